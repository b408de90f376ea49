"""The composer under the chat: the banner shown while editing, the attachments waiting to be
sent (text files as chips with their size and token count), the input box, Attach… (files, or
a folder's files) and Send. The window decides what a message does; this panel gathers it and
says, with the numbers, when what is attached does not fit the context."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (QFileDialog, QHBoxLayout, QLabel, QMenu, QMessageBox, QPushButton, QToolButton,
                               QVBoxLayout, QWidget)

from .attachments import FILE_FILTER, Attachment, AttachmentBar, AttachmentError, check, from_mime, read_file
from .chat_view import EditBanner
from .safe_text import message
from app.core.text_files import estimate_tokens
from .widgets import InputBox


class Composer(QWidget):
    refused = Signal(str)  # an attachment the loaded model cannot read: one line for the status bar
    editing_changed = Signal(object)  # the message whose new version is being written; None: no more
    tools_toggled = Signal(bool)  # the chat's tools switched on or off
    force_tool = Signal(str)  # the user asked that the next answer call this tool

    def __init__(self, parent=None):
        super().__init__(parent)
        self.info = None  # the loaded model's app.core.chat_types.ModelInfo
        self.tokenizer = None  # what the pending files' token counts were counted with (_tokenizer_of)
        self.editing = None  # the MessageWidget whose new version is in the input box
        self.set_aside = ("", [])  # while editing: the input's text and attachments from before, for Esc
        # counts tokens: (texts, callback(counts, exact)) -> None, answered on the GUI thread
        self.counter = None
        self.context_used, self.n_ctx = 0, 0  # the open chat's tokens and the context, as last counted
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.edit_banner = EditBanner()
        self.attach_bar = AttachmentBar()
        self.paste_offer = PasteOffer()
        self.paste_offer.accepted.connect(self.paste_as_file)
        lay.addWidget(self.edit_banner)
        lay.addWidget(self.attach_bar)
        lay.addWidget(self.paste_offer)
        row = QHBoxLayout()
        self.input = InputBox()
        self.input.media.connect(self.paste_media)
        self.input.long_paste.connect(self.paste_offer.offer)
        self.input.setPlaceholderText("Message Gemma…  (Enter sends, Shift+Enter new line, Esc stops)")
        self.input.setFixedHeight(84)
        self.attach_btn = QToolButton()
        self.attach_btn.setText("Attach…")
        self.attach_btn.clicked.connect(self.attach_files)
        menu = QMenu(self.attach_btn)
        self.attach_files_act = QAction("Attach files…", menu)
        self.attach_files_act.triggered.connect(self.attach_files)
        self.attach_folder_act = QAction("Attach folder…", menu)
        self.attach_folder_act.triggered.connect(lambda: self.attach_folder())
        menu.addActions([self.attach_files_act, self.attach_folder_act])
        self.attach_btn.setMenu(menu)
        self.attach_btn.setPopupMode(QToolButton.MenuButtonPopup)  # click: files; the arrow: a folder too
        self.tools_btn = QToolButton()  # the chat's MCP tools: on or off, and which ones there are
        self.tools_btn.setText("Tools")
        self.tools_btn.setObjectName("toolsSwitch")  # the themes mark it when on
        self.tools_btn.setCheckable(True)
        self.tools_btn.toggled.connect(self.tools_toggled)
        self.tools_btn.toggled.connect(self._name_tools_switch)
        self.tools_menu = QMenu(self.tools_btn)
        self.tools_btn.setMenu(self.tools_menu)
        self.tools_btn.setPopupMode(QToolButton.MenuButtonPopup)
        self.send_btn = QPushButton("Send")
        row.addWidget(self.input, 1)
        row.addWidget(self.tools_btn)
        row.addWidget(self.attach_btn)
        row.addWidget(self.send_btn)
        lay.addLayout(row)

    def show_model(self, info, busy: bool) -> None:
        """Attaching as the loaded model (a ModelInfo, or None) allows; Send or Stop. Another
        model counts the files waiting in the input again, with its own tokenizer."""
        self.info = info
        if info is not None and _tokenizer_of(info) != self.tokenizer:
            self.tokenizer = _tokenizer_of(info)
            self._recount()
        self.attach_btn.setEnabled(info is not None and not busy)
        media = " or sounds" if info and info.audio else ""
        self.attach_btn.setToolTip(
            "Attaching is off: no model is loaded" if info is None else
            "Attach code and other text files" + (f", pictures{media}" if info.vision or info.audio else "") +
            "; the arrow attaches a folder's files (also: drop files on the input, or paste)" +
            ("" if info.vision or info.audio else f". Pictures are off: {self.refusal('image')}"))
        self.send_btn.setText("Stop" if busy else "Send")
        self.send_btn.setEnabled(busy or info is not None)

    def _name_tools_switch(self, *_) -> None:
        """On or off in words too: a theme's checked look alone can be faint."""
        self.tools_btn.setText("Tools: on" if self.tools_btn.isChecked() else "Tools")

    def show_tools(self, why_not: str, on: bool, tools: list, busy: bool, forced: str = "") -> None:
        """The Tools switch: this chat's choice, the tools the switched-on servers offer (each
        can be asked for by name; the one the next answer calls, `forced`, is ticked), or why
        there are none."""
        b = self.tools_btn
        b.blockSignals(True)
        b.setChecked(on and not why_not)
        b.blockSignals(False)
        self._name_tools_switch()
        b.setEnabled(not why_not and not busy)
        names = ", ".join(t.key for t in tools[:12]) + (" …" if len(tools) > 12 else "")
        b.setToolTip(f"Tools are off: {why_not}" if why_not else
                     f"Let the model use tools in this chat ({names}); you approve each call. "
                     "The arrow asks for one by name")
        self.tools_menu.clear()
        for t in tools:
            act = self.tools_menu.addAction(f"Make the next answer call {t.key}  ({t.server})")
            act.setCheckable(True)
            act.setChecked(t.key == forced)
            act.setToolTip(t.description)
            act.triggered.connect(lambda _=False, k=t.key: self.force_tool.emit(k))

    def begin_edit(self, w) -> None:
        """Put a message back in the input box; sending makes a new version of it."""
        if self.editing is None:  # (editing another message keeps the first draft aside)
            self.set_aside = (self.input.toPlainText(), self.attach_bar.take())
        self.editing = w
        self.edit_banner.show()
        self.restore(w)
        self.editing_changed.emit(w)

    def restore(self, w) -> None:
        """A message's text and attachments back in the input box."""
        self.attach_bar.clear()
        for path, name, kind, *rest in w.media:
            if path is not None and path.is_file():
                self._add(Attachment(path.read_bytes(), name, kind, rest[0] if rest else ""))
        self.input.setPlainText(w.text)
        self.input.setFocus()

    def cancel_edit(self) -> None:
        """Leave the edit: the input holds again what it held before it."""
        if self.editing is not None:
            self.attach_bar.clear()
            self._give_back_draft()
            self.editing_changed.emit(None)  # the edited message and what follows it shown again

    def _give_back_draft(self) -> None:
        self.editing = None
        self.edit_banner.hide()
        self.put_draft(*self.set_aside)
        self.set_aside = ("", [])

    def take_draft(self) -> tuple[str, list]:
        """The input's text and attachments, taken out (another chat opens: they stay with this one)."""
        text = self.input.toPlainText()
        self.input.clear()
        return text, self.attach_bar.take()

    def put_draft(self, text: str, attachments: list) -> None:
        """A draft back in the input box, in place of what was there."""
        self.attach_bar.clear()
        self.input.setPlainText(text)
        for item in attachments:
            self._add(item)

    def take(self) -> tuple[str, list, object]:
        """What to send: the text, the attachments, and the message it is a new version of (or None).
        After an edit the input holds again the draft from before it."""
        text, editing = self.input.toPlainText().strip(), self.editing
        attachments = self.attach_bar.take()
        self.input.clear()
        if editing is not None:
            self._give_back_draft()  # (the session shows the new version where the old one was)
        return text, attachments, editing

    def refusal(self, kind: str) -> str | None:
        """None when the loaded model reads that kind ("text", "image", "audio"), else why not."""
        if self.info is None:
            return "no model is loaded"
        return None if kind == "text" else self.info.media_refusal(kind)

    def attach_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach files", "", FILE_FILTER)
        items = []
        for p in paths:
            try:
                items.append(read_file(p))
            except AttachmentError as e:
                message(self, QMessageBox.Warning, "Cannot attach", str(e))
        self.add_attachments(items)

    def paste_media(self, mime) -> None:
        folders = [u.toLocalFile() for u in mime.urls() if u.isLocalFile() and Path(u.toLocalFile()).is_dir()] \
            if mime.hasUrls() else []
        if folders:  # a dropped folder opens its tree, to pick its files
            self.attach_folder(folders[0])
        try:
            self.add_attachments(from_mime(mime))
        except AttachmentError as e:
            message(self, QMessageBox.Warning, "Cannot attach", str(e))

    def paste_as_file(self, start: int, end: int) -> None:
        """The long text just pasted leaves the input box and becomes a chip instead."""
        from PySide6.QtGui import QTextCursor

        cur = QTextCursor(self.input.document())
        cur.setPosition(start)
        cur.setPosition(min(end, len(self.input.toPlainText())), QTextCursor.KeepAnchor)
        text = cur.selectedText().replace("\u2029", "\n")  # Qt's paragraph separator
        if not text.strip():
            return
        n = sum(1 for i in self.attach_bar.items if i.name.startswith("pasted"))
        try:
            item = check(text.encode("utf-8"), f"pasted{f' {n + 1}' if n else ''}.txt")
        except AttachmentError as e:
            self.refused.emit(str(e))
            return
        cur.removeSelectedText()
        self.add_attachments([item])

    def attach_folder(self, root: str = "") -> None:
        """A folder's tree; the files the user ticks become attachments (see folder_dialog)."""
        from app.ui.dialogs.folder_dialog import choose_folder_files

        root = root or QFileDialog.getExistingDirectory(self, "Attach folder")
        if not root or self.info is None:
            return
        free = max(0, self.n_ctx - self.context_used - self.pending_tokens()) if self.n_ctx else 10**9
        items = []
        for name, text, source in choose_folder_files(self, root, self.count_texts, free):
            items.append(Attachment(text.encode("utf-8"), name, "text", source))
        self.add_attachments(items)

    def add_attachments(self, items) -> None:
        """Pending attachments, if the loaded model reads them; else one line why not."""
        for item in items:
            why = self.refusal(item.kind)
            if why:
                self.refused.emit(f"Cannot attach {item.name}: {why}")
                continue
            self._add(item)

    def _add(self, item: Attachment) -> None:
        if not self.attach_bar.add(item):
            self.refused.emit(f"{item.name} is already attached")
        elif item.kind == "text" and item.tokens is None:
            self.count_texts([item.text], lambda counts, it=item: self._counted(it, counts[0]))

    def _recount(self) -> None:
        texts = [i for i in self.attach_bar.items if i.kind == "text"]
        for item in texts:
            item.tokens = None
            self.count_texts([item.text], lambda counts, it=item: self._counted(it, counts[0]))
        if texts:
            self.attach_bar.relabel()

    def count_texts(self, texts: list[str], done) -> None:
        """Tokens of each text, by the loaded model's tokenizer (`done(counts)` on the GUI thread);
        without an engine to ask, a rough estimate (the folder dialog marks it)."""
        if self.counter is not None:
            self.counter(texts, lambda counts, exact: done(counts))
        else:
            done([estimate_tokens(t) for t in texts])

    def _counted(self, item: Attachment, tokens: int) -> None:
        if item not in self.attach_bar.items:
            return  # removed meanwhile
        item.tokens = tokens
        if self.n_ctx and tokens > self.n_ctx:
            self.attach_bar.remove(item)
            self.refused.emit(f"Cannot attach {item.name}: {tokens:,} tokens, more than the whole "
                              f"{self.n_ctx:,}-token context")
            return
        self.attach_bar.relabel()

    def pending_tokens(self) -> int:
        return sum(i.tokens or 0 for i in self.attach_bar.items if i.kind == "text")

    def files_over(self) -> list[tuple[str, int]]:
        """The attached files, (name, tokens), where they do not fit beside the chat, else []:
        said before sending, so no file is ever cut to fit."""
        files = self.pending_tokens()
        if not self.n_ctx or not files or self.context_used + files < self.n_ctx:
            return []
        return [(i.name, i.tokens) for i in self.attach_bar.items if i.tokens]


def _tokenizer_of(info) -> tuple:
    """What a model counts tokens with: its file, or the server and the model it names."""
    return (info.target, info.remote.server if info.remote else "", info.target_name)


class PasteOffer(QWidget):
    """Shown after pasting more than a screenful: keep it as text, or make it a file chip."""

    accepted = Signal(int, int)  # where the pasted text is in the input box

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("pasteOffer")
        self.span = (0, 0)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.label = QLabel()
        self.make_btn = QPushButton("Attach as a file")
        self.make_btn.clicked.connect(self._accept)
        keep = QToolButton()
        keep.setText("Keep as text")
        keep.setAutoRaise(True)
        keep.clicked.connect(self.hide)
        lay.addWidget(self.label, 1)
        lay.addWidget(self.make_btn)
        lay.addWidget(keep)
        self.hide()

    def offer(self, start: int, end: int, lines: int) -> None:
        self.span = (start, end)
        self.label.setText(f"Pasted {lines:,} lines. Attach them as a file instead? It shows as one chip, and the "
                           "model reads it as a file.")
        self.show()

    def _accept(self) -> None:
        self.hide()
        self.accepted.emit(*self.span)
