"""The composer under the chat: the banner shown while editing, the attachments waiting to be
sent, the input box, Attach… and Send. The window decides what a message does; this panel
gathers it."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QMessageBox, QPushButton, QToolButton, QVBoxLayout, QWidget

from .attachments import FILE_FILTER, AttachmentBar, AttachmentError, from_mime, read_file
from .chat_view import EditBanner
from .safe_text import message
from .widgets import InputBox


class Composer(QWidget):
    refused = Signal(str)  # an attachment the loaded model cannot read: one line for the status bar

    def __init__(self, refusal: Callable[[str], str | None], parent=None):
        """`refusal(kind)`: None when the loaded model reads that kind ("image", "audio"), else why not."""
        super().__init__(parent)
        self.refusal = refusal
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
