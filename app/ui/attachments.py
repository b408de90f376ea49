"""Files attached to a message: text files (source code, Markdown, JSON, logs — told by their
content, see `text_files`), pictures and sounds; by button, drag-and-drop or paste (Ctrl+V of a
screenshot). What is attached is checked here cheaply (size, kind, image dimensions from the
header) so a bad file is refused at once in one line; decoding pictures for the model happens
in the engine thread. Thumbnails are read scaled, never at full size."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QSize, Qt, Signal
from PySide6.QtGui import QImage, QImageReader, QPixmap
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QScrollArea, QToolButton, QWidget

from engine.local.media import MAX_IMAGE_PIXELS, MAX_MEDIA_BYTES, media_kind

from app.core.text_files import MAX_TEXT_BYTES, NotText, decode_text, human_size

THUMB = 72  # px, the long side of a thumbnail
CHIP_CHARS = 32  # a chip's file name is cut in the middle past about this many characters' width
# any file may be a text file (told by its content), so the dialog shows all files by default
FILE_FILTER = ("All files (*);;Pictures and sounds (*.png *.jpg *.jpeg *.webp *.gif *.bmp *.wav *.mp3 *.flac)")


class AttachmentError(ValueError):
    pass


@dataclass
class Attachment:
    data: bytes
    name: str
    kind: str  # "text", "image" or "audio"
    source: str = ""  # the file it was read from ("" when pasted): where Save over original writes
    tokens: int | None = None  # a text file's tokens, once the engine has counted them

    @property
    def text(self) -> str:
        return decode_text(self.data) if self.kind == "text" else ""

    @property
    def label(self) -> str:
        """A chip's words: name, size and (text files) tokens."""
        if self.kind != "text":
            return self.name
        tokens = "… tokens" if self.tokens is None else f"{self.tokens:,} tokens"
        return f"{self.name} · {human_size(len(self.data))} · {tokens}"


def check(data: bytes, name: str, source: str = "") -> Attachment:
    """An attachment, or AttachmentError saying in one line why not. Text is told by content
    first: no picture or sound decodes as UTF-8 without NUL bytes."""
    try:
        decode_text(data[:MAX_TEXT_BYTES + 1], partial=len(data) > MAX_TEXT_BYTES)
    except NotText:
        pass
    else:
        if len(data) > MAX_TEXT_BYTES:
            raise AttachmentError(f"{name}: a text file of {human_size(len(data))}, over the "
                                  f"{MAX_TEXT_BYTES // 2**20} MB Tandem reads whole")
        return Attachment(data, name, "text", source)
    if len(data) > MAX_MEDIA_BYTES:
        raise AttachmentError(f"{name}: larger than {MAX_MEDIA_BYTES // 2**20} MB")
    kind = media_kind(data)
    if kind == "audio":
        return Attachment(data, name, "audio", source)
    ba = QByteArray(data)
    buf = QBuffer(ba)  # kept referenced while the reader uses it (the reader does not own it)
    buf.open(QIODevice.ReadOnly)
    reader = QImageReader(buf)
    size = reader.size()
    if not reader.canRead() or not size.isValid():
        raise AttachmentError(f"{name}: a binary file, not text (UTF-8 without NUL bytes) nor a picture or "
                              "sound Tandem reads (PNG, JPEG, WebP, GIF, BMP; WAV, MP3, FLAC)")
    if size.width() * size.height() > MAX_IMAGE_PIXELS:
        raise AttachmentError(f"{name}: the picture is too large ({size.width()}x{size.height()} pixels, over "
                              f"{MAX_IMAGE_PIXELS // 1_000_000} megapixels); scale it down first")
    return Attachment(data, name, "image", source)


def read_file(path: str | Path) -> Attachment:
    p = Path(path)
    try:
        if p.stat().st_size > MAX_MEDIA_BYTES:
            raise AttachmentError(f"{p.name}: larger than {MAX_MEDIA_BYTES // 2**20} MB")
        if p.is_dir():
            raise AttachmentError(f"{p.name}: a folder (the arrow beside Attach… takes a folder's files)")
        return check(p.read_bytes(), p.name, str(p.resolve()))
    except OSError as e:
        raise AttachmentError(f"{p.name}: cannot be read ({e.strerror or e})") from None


def from_mime(mime) -> list[Attachment]:
    """Files in pasted or dropped data (local files, not folders), or image data (a screenshot)."""
    out = []
    for url in mime.urls() if mime.hasUrls() else []:
        if url.isLocalFile() and not Path(url.toLocalFile()).is_dir():
            out.append(read_file(url.toLocalFile()))
    if not out and mime.hasImage():
        image = QImage(mime.imageData())
        if not image.isNull():
            out.append(check(png_bytes(image), "pasted image.png"))
    return out


def png_bytes(image: QImage) -> bytes:
    buf = QBuffer()
    buf.open(QIODevice.WriteOnly)
    image.save(buf, "PNG")
    return bytes(buf.data())


def thumbnail(data: bytes | None = None, path: str | Path | None = None, side: int = THUMB) -> QPixmap:
    """A small picture read at reduced size (the reader scales while decoding where it can)."""
    ba = QByteArray(data or b"")
    buf = QBuffer(ba)  # kept referenced while the reader uses it
    buf.open(QIODevice.ReadOnly)
    reader = QImageReader(str(path)) if path is not None else QImageReader(buf)
    size = reader.size()
    if size.isValid() and size.width() * size.height() <= MAX_IMAGE_PIXELS:
        reader.setScaledSize(size.scaled(QSize(side, side), Qt.KeepAspectRatio))
        image = reader.read()
        if not image.isNull():
            return QPixmap.fromImage(image)
    return QPixmap()


def tile(pixmap: QPixmap, label: str, kind: str) -> QLabel:
    w = QLabel()
    w.setToolTip(label)
    if kind == "image" and not pixmap.isNull():
        w.setPixmap(pixmap)
    else:  # a long name is cut in the middle (its start and its extension stay), size and tokens
        # whole; the tooltip has it all
        name, sep, rest = label.partition(" · ")
        fm = w.fontMetrics()
        name = fm.elidedText(name, Qt.ElideMiddle, fm.averageCharWidth() * CHIP_CHARS)
        w.setText({"audio": "♪ ", "text": "▤ "}.get(kind, "") + name + sep + rest)
        w.setTextFormat(Qt.PlainText)
    w.setObjectName("attachmentTile")
    return w


class AttachmentBar(QWidget):
    """The attachments waiting in the input box, each with a remove button. The chips scroll
    sideways within the composer's width: however many there are, they never widen the window
    (which would push Send and the status bar off the screen)."""

    changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.items: list[Attachment] = []
        self.scroll = QScrollArea(self)
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.NoFrame)
        self.scroll.setVerticalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        chips = QWidget()
        self.row = QHBoxLayout(chips)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.addStretch(1)
        self.scroll.setWidget(chips)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.scroll)
        self.hide()

    def _fit_height(self) -> None:
        """As tall as the chips, plus the scroll bar when they are wider than the bar: with no
        vertical scrolling, the chips must never be cut at the bottom."""
        chips = self.scroll.widget().sizeHint()
        bar = self.scroll.horizontalScrollBar().sizeHint().height() if chips.width() > self.width() else 0
        self.scroll.setFixedHeight(chips.height() + bar)

    def resizeEvent(self, e):
        super().resizeEvent(e)
        self._fit_height()

    def add(self, item: Attachment) -> bool:
        """False when the same file (its name and content) is already there; the same text
        under another name is another file, which the model reads by its name too."""
        if any(i.data == item.data and i.name == item.name for i in self.items):
            return False
        self.items.append(item)
        self._rebuild()
        return True

    def remove(self, item: Attachment) -> None:
        self.items = [i for i in self.items if i is not item]
        self._rebuild()

    def relabel(self) -> None:
        """The chips' words again (a token count arrived)."""
        self._rebuild()

    def clear(self) -> None:
        self.items = []
        self._rebuild()

    def take(self) -> list[Attachment]:
        items, self.items = self.items, []
        self._rebuild()
        return items

    def _rebuild(self) -> None:
        while self.row.count() > 1:
            w = self.row.takeAt(0).widget()
            if w:
                w.hide()  # at once: until deleted it would still paint under the new chips
                w.deleteLater()
        for i, item in enumerate(self.items):
            box = QWidget()
            lay = QHBoxLayout(box)
            lay.setContentsMargins(0, 0, 0, 0)
            chip = tile(thumbnail(item.data) if item.kind == "image" else QPixmap(), item.label, item.kind)
            if item.source:
                chip.setToolTip(f"{item.source}\n{item.label}")
            lay.addWidget(chip)
            rm = QToolButton()
            rm.setText("×")
            rm.setToolTip(f"Remove {item.name}")
            rm.clicked.connect(lambda _=False, n=i: self._remove(n))
            lay.addWidget(rm)
            self.row.insertWidget(self.row.count() - 1, box)
            box.show()  # now, not on the next event loop turn: the row's size (_fit_height) counts it
        self.setVisible(bool(self.items))
        self._fit_height()
        self.changed.emit()

    def _remove(self, n: int) -> None:
        if 0 <= n < len(self.items):
            del self.items[n]
            self._rebuild()
