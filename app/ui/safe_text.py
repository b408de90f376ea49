"""Showing untrusted text (model output, chat titles, file names) without letting it load
anything.

Qt's rich text fetches every resource a document names: a Markdown image `![x](/path)` is
read from the file system when the text is laid out (`/dev/zero` aborts the process with
std::bad_alloc, a FIFO blocks it), and QLabel / QMessageBox render any text that looks like
HTML. So: documents that never load a resource, images shown as links the user may click,
and labels and message boxes that show plain text.
"""

from __future__ import annotations

from PySide6.QtCore import QUrl, Qt
from PySide6.QtGui import QDesktopServices, QGuiApplication, QImage, QTextCharFormat, QTextCursor, QTextDocument, QTextFormat
from PySide6.QtWidgets import QMessageBox, QSizePolicy, QSpacerItem, QTextBrowser

_ALT = getattr(QTextFormat, "ImageAltText", None)  # Qt >= 6.? keeps Markdown's alt text


class SafeDocument(QTextDocument):
    """A document that loads no resource at all. Returning a (blank) image matters: for a
    null answer Qt's image handler falls back to reading the path from disk itself."""

    _blank = None

    def loadResource(self, kind, url):  # noqa: N802 (Qt's name)
        if kind == QTextDocument.ImageResource:
            if SafeDocument._blank is None:
                img = QImage(1, 1, QImage.Format_ARGB32)
                img.fill(Qt.transparent)
                SafeDocument._blank = img
            return SafeDocument._blank
        return ""


class SafeBrowser(QTextBrowser):
    """A read-only rich text view over a SafeDocument; links do nothing until clicked, and
    then only web links open (in the system browser)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setDocument(SafeDocument(self))
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)

    def loadResource(self, kind, url):  # noqa: N802
        return self.document().loadResource(kind, url)


def open_web_link(url: QUrl) -> bool:
    """Open http(s) links the user clicked; anything else (file:, custom schemes) is ignored."""
    if url.scheme() in ("http", "https") and url.host():
        QDesktopServices.openUrl(url)
        return True
    return False


def fragments(doc: QTextDocument):
    """Every run of text with one format in `doc`, in order."""
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            if frag.isValid():
                yield frag
            it += 1
        block = block.next()


def images_to_links(doc: QTextDocument) -> None:
    """Replace each image in `doc` by a link '[image: alt]' to its address: the user sees
    where it points and can open it deliberately; nothing is fetched."""
    found = []
    for frag in fragments(doc):
        fmt = frag.charFormat()
        if fmt.isImageFormat():
            alt = fmt.property(_ALT) if _ALT is not None else ""
            found.append((frag.position(), frag.length(), fmt.toImageFormat().name(), alt or ""))
    for pos, length, src, alt in reversed(found):
        cur = QTextCursor(doc)
        cur.setPosition(pos)
        cur.setPosition(pos + length, QTextCursor.KeepAnchor)
        link = QTextCharFormat()
        link.setAnchor(True)
        link.setAnchorHref(src)
        link.setFontUnderline(True)
        link.setForeground(QGuiApplication.palette().link())
        link.setToolTip(src)
        cur.insertText(f"[image: {alt or src}]", link)


TITLE_MARGIN = 160  # px beside a title in the window's frame: its icon and buttons


def message_box(parent, icon, title: str, text: str, buttons=QMessageBox.Ok) -> QMessageBox:
    """QMessageBox with plain text (its default renders anything that looks like HTML), at
    least as wide as its title: a box sized by a short text had its title cut ("Could … model")."""
    box = QMessageBox(icon, title, text, buttons, parent)
    box.setTextFormat(Qt.PlainText)
    grid = box.layout()  # a QGridLayout: a spacer across its columns sets the minimum width
    width = box.fontMetrics().horizontalAdvance(title) + TITLE_MARGIN
    grid.addItem(QSpacerItem(width, 0, QSizePolicy.Minimum, QSizePolicy.Minimum), grid.rowCount(), 0, 1,
                 grid.columnCount())
    return box


def message(parent, icon, title: str, text: str, buttons=QMessageBox.Ok):
    """A plain-text message box (see message_box), shown until the user answers; the button."""
    box = message_box(parent, icon, title, text, buttons)
    box.exec()
    return box.standardButton(box.clickedButton())
