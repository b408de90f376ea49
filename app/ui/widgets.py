"""Widgets of the chat window: a message bubble, the input box, the empty chat's examples."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication, QPixmap, QTextCursor
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QSizePolicy,
                               QToolButton, QVBoxLayout, QWidget)

from app.core.code_match import suggested_name
from .render import COPIED, CodeBlock, for_display, relabel_link, render_markdown, render_origins
from .safe_text import SafeBrowser, open_web_link


def is_dark() -> bool:
    return QGuiApplication.palette().window().color().lightness() < 128


class Notice(QFrame):
    """A line of advice above the chat that the user can close (×): it stays closed until
    something new is to be said (`say`)."""

    def __init__(self, name: str, parent=None):
        super().__init__(parent)
        self.setObjectName(name)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(6, 4, 4, 4)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.PlainText)
        lay.addWidget(self.label, 1)
        self.close_btn = QToolButton()
        self.close_btn.setText("×")
        self.close_btn.setAutoRaise(True)
        self.close_btn.setToolTip("Close this notice")
        self.close_btn.setAccessibleName("Close this notice")
        self.close_btn.clicked.connect(self.hide)
        lay.addWidget(self.close_btn, 0, Qt.AlignTop)
        self.hide()

    def say(self, text: str) -> None:
        self.label.setText(text)
        self.show()

    def text(self) -> str:
        return self.label.text()


class AutoHeightBrowser(SafeBrowser):
    """A read-only rich text view as tall as its content (the page scrolls, not each message)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarAsNeeded)
        self.setFrameShape(QFrame.NoFrame)
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)
        self.document().contentsChanged.connect(self._fit)
        self.viewport().setAutoFillBackground(False)

    def _fit(self):
        self.document().setTextWidth(self.viewport().width())
        h = int(self.document().size().height()) + 6
        if self.horizontalScrollBar().isVisible():
            h += self.horizontalScrollBar().height()
        if h != self.height():
            self.setFixedHeight(h)

    def resizeEvent(self, e):
        super().resizeEvent(e)
        self._fit()


class MessageWidget(QFrame):
    """One message: role, collapsible thinking, body (Markdown or token origins), footer."""

    RENDER_INTERVAL_MS = 1000
    COPIED_MS = 2000  # how long a code block's Copy link reads "Copied ✓"

    copy_requested = Signal(str)
    save_requested = Signal(str, str)  # a code block's Save as…: (code, suggested file name)
    diff_requested = Signal(str, object)  # its Diff with…: (code, the AttachedFile it is a new version of)
    # ("regenerate" | "edit" | "details" | "continue" | "previous" | "next", self)
    action = Signal(str, object)

    def __init__(self, role: str, message_id: int | None = None, parent=None):
        super().__init__(parent)
        self.role = role
        self.message_id = message_id
        self.text = ""
        self.thinking = ""
        self.origins: list = []
        self.stats: dict | None = None
        self.show_origins = False
        self._blocks: list[CodeBlock] = []
        # the chat's attached text files (ChatView sets it): what a code block may rewrite
        self.attached_files: Callable[[], list] = lambda: []
        self._copied: int | None = None  # the block whose Copy link reads "Copied ✓"
        self._copied_timer = QTimer(self)
        self._copied_timer.setSingleShot(True)
        self._copied_timer.timeout.connect(lambda: self._show_copied(None))
        self._render_pending = False
        self.setObjectName("userMessage" if role == "user" else "modelMessage")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 8, 12, 8)
        lay.setSpacing(4)
        lay.addLayout(self._build_head(role))
        self._build_body(lay)

    def _build_head(self, role: str) -> QHBoxLayout:
        """Who wrote it, the version arrows and the message's buttons."""
        head = QHBoxLayout()
        self.who = QLabel("You" if role == "user" else "Gemma")
        self.who.setStyleSheet("font-weight:600")
        head.addWidget(self.who)
        head.addStretch(1)
        self.buttons = {}
        for name, text, tip in (
                ("previous", "‹", "Previous version of this message"),
                ("next", "›", "Next version of this message"),
                ("copy", "Copy", "Copy message"),
                ("edit", "Edit", "Edit and send as a new version (the old one is kept)"),
                ("regenerate", "Regenerate", "Write another answer (the old one is kept)"),
                ("continue", "Continue", "The answer was cut at max tokens: write on from where it stopped"),
                ("details", "Details", "Acceptance per draft position")):
            b = QToolButton(self)
            b.setText(text)
            b.setToolTip(tip)
            b.setAutoRaise(True)
            b.clicked.connect(lambda _=False, n=name: self._clicked(n))
            head.addWidget(b)
            self.buttons[name] = b
            if name == "previous":
                self.version_label = QLabel("1 / 1", self)
                self.version_label.setToolTip("Versions of this message: edits and regenerations are all kept")
                head.addWidget(self.version_label)
        self.buttons["edit"].setVisible(role == "user")
        self.buttons["regenerate"].setVisible(role == "assistant")
        for name in ("details", "continue"):
            self.buttons[name].setVisible(False)
        self.set_version(1, 1)
        self._last = False
        return head

    def _build_body(self, lay: QVBoxLayout) -> None:
        """The folded thinking, the attachments, the text, the tool calls and the footer."""
        self.think_toggle = QToolButton(self)
        self.think_toggle.setText("▸ Thinking")
        self.think_toggle.setAutoRaise(True)
        self.think_toggle.setCheckable(True)
        self.think_toggle.toggled.connect(self._toggle_thinking)
        self.think_toggle.hide()
        self.think_view = QLabel(self)
        self.think_view.setTextFormat(Qt.PlainText)  # model output: never rendered as HTML
        self.think_view.setWordWrap(True)
        self.think_view.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.think_view.setStyleSheet("color: gray; font-style: italic")
        self.think_view.hide()
        lay.addWidget(self.think_toggle)
        lay.addWidget(self.think_view)

        self.body = AutoHeightBrowser(self)
        self.body.anchorClicked.connect(self.follow_link)
        self.media_row = QHBoxLayout()  # thumbnails of attached pictures and sounds
        self.media_row.setContentsMargins(0, 0, 0, 0)
        self.media_row.addStretch(1)
        lay.addLayout(self.media_row)
        self.media: list = []
        lay.addWidget(self.body)
        self.tool_box = QVBoxLayout()  # the tool calls this answer ends with (app.tool_view.ToolCard)
        self.tool_box.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(self.tool_box)
        self.tool_cards: dict = {}  # call id -> ToolCard
        self.footer = QLabel(self)
        self.footer.setWordWrap(True)  # a long footer wraps instead of widening the window
        self.footer.setStyleSheet("color: gray; font-size: 11px")
        self.footer.hide()
        lay.addWidget(self.footer)

    def _clicked(self, name):
        if name == "copy":
            self.copy_requested.emit(self.text)
        else:
            self.action.emit(name, self)

    @property
    def code_blocks(self) -> list[str]:
        """The code of each block in the message, in order (what its Copy links copy)."""
        return [b.code for b in self._blocks]

    def follow_link(self, url):
        """What a click on a link in the body does. Links come from model text too: only our code
        block links (by index: a link can name a block, never carry code or a file) and web links act."""
        kind, i = url.scheme(), url.path()
        if kind not in ("copy", "save", "diff"):
            open_web_link(url)
        elif i.isdigit() and int(i) < len(self._blocks):
            block = self._blocks[int(i)]
            if kind == "copy":
                self.copy_requested.emit(block.code)
                self._show_copied(int(i))
            elif kind == "save":
                self.save_requested.emit(block.code, suggested_name(block.lang, block.match))
            elif block.match is not None:
                self.diff_requested.emit(block.code, block.match)

    def _show_copied(self, i: int | None) -> None:
        """Block i's Copy link reads "Copied ✓" for COPIED_MS (None: none does)."""
        doc = self.body.document()
        if self._copied is not None:
            relabel_link(doc, f"copy:{self._copied}", "Copy")
        self._copied = i
        if i is not None:
            relabel_link(doc, f"copy:{i}", COPIED)
            self._copied_timer.start(self.COPIED_MS)  # read now: a test may shorten it

    def _toggle_thinking(self, on):
        self.think_toggle.setText(("▾" if on else "▸") + " Thinking")
        self.think_view.setVisible(on)

    def set_media(self, items: list) -> None:
        """[(path or None, name, kind, source)]: thumbnails (pictures) and chips (files) above the text."""
        from .attachments import thumbnail, tile

        self.media = list(items)
        while self.media_row.count() > 1:
            w = self.media_row.takeAt(0).widget()
            if w:
                w.deleteLater()
        for path, name, kind, *_ in items:
            pix = thumbnail(path=path, side=160) if kind == "image" and path is not None else None
            self.media_row.insertWidget(self.media_row.count() - 1, tile(pix if pix is not None else QPixmap(),
                                                                        name, kind))

    def add_tool_card(self, card) -> None:
        self.tool_cards[card.call_id] = card
        self.tool_box.addWidget(card)
        self.body.setVisible(bool(self.text.strip()))  # an answer that is only calls shows only them

    def set_content(self, text: str, thinking: str = "", origins: list | None = None) -> None:
        self.text = text
        self.thinking = thinking
        if origins is not None:
            self.origins = origins
        self.think_toggle.setVisible(bool(thinking))
        self.think_view.setText(for_display(thinking))
        self.refresh()

    def append(self, text: str, thinking: str, pieces: list) -> None:
        """Streaming: new text is appended as plain text (cheap, incremental layout) and
        the full Markdown render runs at most every RENDER_INTERVAL_MS. The GUI thread
        shares the GIL with the engine thread, so its work must stay small and bounded."""
        self.text += text
        self.thinking += thinking
        self.origins.extend([t, d] for t, ch, d in pieces if ch == "answer")
        if text and not self.show_origins:
            cur = QTextCursor(self.body.document())
            cur.movePosition(QTextCursor.End)
            cur.insertText(for_display(text))
        if not self._render_pending:
            self._render_pending = True
            QTimer.singleShot(self.RENDER_INTERVAL_MS, self._deferred_refresh)

    @property
    def render_pending(self) -> bool:
        """Streamed text is shown plain until its Markdown render, due within RENDER_INTERVAL_MS."""
        return self._render_pending

    def _deferred_refresh(self) -> None:
        self._render_pending = False
        self.think_toggle.setVisible(bool(self.thinking))
        self.think_view.setText(for_display(self.thinking))
        self.refresh()

    def refresh(self) -> None:
        doc = self.body.document()
        if self.show_origins and self.role == "assistant" and self.origins:
            render_origins(doc, self.origins, is_dark())
            self._blocks = []
        elif self.role == "assistant":
            # the attached files only when there is code to compare (the session reads the chat's list)
            files = self.attached_files() if "```" in self.text else []
            self._blocks = render_markdown(doc, self.text, is_dark(), files, self._copied)
        else:
            doc.setPlainText(for_display(self.text))
        self.body._fit()

    def set_stats(self, stats: dict | None) -> None:
        self.stats = stats
        if stats and stats.get("footer"):
            reason = stats.get("finish_reason")
            note = {"cancelled": " · stopped", "length": " · max tokens", "context": " · cut: the context is full"}.get(reason, "")
            self.footer.setText(stats["footer"] + note)
            self.footer.show()
        self.buttons["details"].setVisible(bool(stats and stats.get("mode") in ("mtp", "lookup", "hybrid")))
        self._show_continue()

    def set_version(self, version: int, versions: int) -> None:
        self.version_label.setText(f"{version} / {versions}")
        for w in (self.version_label, self.buttons["previous"], self.buttons["next"]):
            w.setVisible(versions > 1)
        self.buttons["previous"].setEnabled(version > 1)
        self.buttons["next"].setEnabled(version < versions)

    def set_last(self, last: bool) -> None:
        self._last = last
        self._show_continue()

    def _show_continue(self) -> None:
        # cut at max tokens, stopped, or by an error (a server that went away): Continue writes on
        cut = bool(self.stats and self.stats.get("finish_reason") in ("length", "cancelled", "error"))
        self.buttons["continue"].setVisible(self.role == "assistant" and self._last and cut and bool(self.text))


class InputBox(QPlainTextEdit):
    """Enter sends, Shift+Enter inserts a newline, Tab moves on to the next control (Esc is the
    window's: it stops wherever the focus is). Pictures and sounds pasted or dropped here become
    attachments (`media` signal)."""

    send = Signal()
    media = Signal(object)  # QMimeData holding pictures or files
    long_paste = Signal(int, int, int)  # pasted more than a screenful: where it starts, ends, its lines
    LONG_PASTE_LINES, LONG_PASTE_CHARS = 40, 4000

    def canInsertFromMimeData(self, source) -> bool:
        return source.hasImage() or source.hasUrls() or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source) -> None:
        if source.hasImage() or (source.hasUrls() and any(u.isLocalFile() for u in source.urls())):
            self.media.emit(source)
            if not source.hasText() or source.hasUrls():
                return
        start = self.textCursor().selectionStart()
        super().insertFromMimeData(source)
        text = source.text()
        lines = text.count("\n") + 1
        if lines > self.LONG_PASTE_LINES or len(text) > self.LONG_PASTE_CHARS:
            self.long_paste.emit(start, self.textCursor().position(), lines)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setTabChangesFocus(True)

    def keyPressEvent(self, e):
        if e.key() in (Qt.Key_Return, Qt.Key_Enter) and not (e.modifiers() & Qt.ShiftModifier):
            self.send.emit()
            return
        super().keyPressEvent(e)


class EmptyState(QWidget):
    """What a new chat shows: a few example prompts to start from."""

    EXAMPLES = [
        ("Coding: averages of a CSV", "Write a Python function that reads a CSV file and returns the average "
                                      "of each column."),
        ("Explain: hash maps", "Explain how a hash map works, with a small example."),
        ("Speed demo: count to fifty", "Count from one to fifty in words, separated by commas."),
    ]
    chosen = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(24, 24, 24, 8)
        title = QLabel("Start a chat")
        title.setStyleSheet("font-size: 18px; font-weight: 600")
        lay.addWidget(title)
        hint = QLabel("Type below, or try one of these. Code and repetitive answers are where the drafter "
                      "helps most; Compare runs a prompt with and without it.")
        hint.setWordWrap(True)
        hint.setStyleSheet("color: gray")
        lay.addWidget(hint)
        row = QHBoxLayout()
        for kind, prompt in self.EXAMPLES:
            b = QToolButton(self)
            b.setText(kind)
            b.setToolButtonStyle(Qt.ToolButtonTextOnly)
            # never wider than the window allows: the whole prompt is in the tooltip
            b.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
            b.setMinimumWidth(60)
            b.setToolTip(prompt)
            b.clicked.connect(lambda _=False, p=prompt: self.chosen.emit(p))
            row.addWidget(b)
        lay.addLayout(row)
