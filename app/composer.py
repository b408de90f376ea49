"""The composer under the chat: the banner shown while editing, the attachments waiting to be
sent, the input box, Attach… and Send. The window decides what a message does; this panel
gathers it."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QMessageBox, QPushButton, QToolButton, QVBoxLayout, QWidget

from .attachments import FILE_FILTER, Attachment, AttachmentBar, AttachmentError, from_mime, read_file
from .chat_view import EditBanner
from .safe_text import message
from .widgets import InputBox


class Composer(QWidget):
    refused = Signal(str)  # an attachment the loaded model cannot read: one line for the status bar
    editing_changed = Signal(object)  # the message whose new version is being written; None: no more

    def __init__(self, parent=None):
        super().__init__(parent)
        self.info = None  # the loaded model's app.chat_types.ModelInfo
        self.editing = None  # the MessageWidget whose new version is in the input box
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.edit_banner = EditBanner()
        self.attach_bar = AttachmentBar()
        lay.addWidget(self.edit_banner)
        lay.addWidget(self.attach_bar)
        row = QHBoxLayout()
        self.input = InputBox()
        self.input.media.connect(self.paste_media)
        self.input.setPlaceholderText("Message Gemma…  (Enter sends, Shift+Enter new line, Esc stops)")
        self.input.setFixedHeight(84)
        self.attach_btn = QToolButton()
        self.attach_btn.setText("Attach…")
        self.attach_btn.clicked.connect(self.attach_files)
        self.send_btn = QPushButton("Send")
        row.addWidget(self.input, 1)
        row.addWidget(self.attach_btn)
        row.addWidget(self.send_btn)
        lay.addLayout(row)

    def show_model(self, info, busy: bool) -> None:
        """Attaching as the loaded model (a ModelInfo, or None) allows; Send or Stop."""
        self.info = info
        media_ok = bool(info and (info.vision or info.audio))
        self.attach_btn.setEnabled(media_ok and not busy)
        self.attach_btn.setToolTip(
            ("Attach pictures" + (" or sounds" if info.audio else "") +
             " (also: paste a screenshot, or drop files on the input)") if media_ok else
            f"Attaching is off: {self.refusal('image')}")
        self.send_btn.setText("Stop" if busy else "Send")
        self.send_btn.setEnabled(busy or info is not None)

    def begin_edit(self, w) -> None:
        """Put a message back in the input box; sending makes a new version of it."""
        self.editing = w
        self.edit_banner.show()
        self.restore(w)
        self.editing_changed.emit(w)

    def restore(self, w) -> None:
        """A message's text and attachments back in the input box."""
        self.attach_bar.clear()
        for path, name, kind in w.media:
            if path is not None and path.is_file():
                self.attach_bar.add(Attachment(path.read_bytes(), name, kind))
        self.input.setPlainText(w.text)
        self.input.setFocus()

    def cancel_edit(self) -> None:
        if self.editing is not None:
            self.editing = None
            self.attach_bar.clear()
            self.edit_banner.hide()
            self.editing_changed.emit(None)

    def take(self) -> tuple[str, list, object]:
        """What to send: the text, the attachments, and the message it is a new version of (or None)."""
        text, editing = self.input.toPlainText().strip(), self.editing
        self.input.clear()
        self.editing = None
        self.edit_banner.hide()
        return text, self.attach_bar.take(), editing

    def refusal(self, kind: str) -> str | None:
        """None when the loaded model reads that kind ("image", "audio"), else why not."""
        return "no model is loaded" if self.info is None else self.info.media_refusal(kind)

    def attach_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach pictures or sounds", "", FILE_FILTER)
        items = []
        for p in paths:
            try:
                items.append(read_file(p))
            except AttachmentError as e:
                message(self, QMessageBox.Warning, "Cannot attach", str(e))
        self.add_attachments(items)

    def paste_media(self, mime) -> None:
        try:
            self.add_attachments(from_mime(mime))
        except AttachmentError as e:
            message(self, QMessageBox.Warning, "Cannot attach", str(e))

    def add_attachments(self, items) -> None:
        """Pending attachments, if the loaded model reads them; else one line why not."""
        for item in items:
            why = self.refusal(item.kind)
            if why:
                self.refused.emit(f"Cannot attach {item.name}: {why}")
                continue
            self.attach_bar.add(item)
