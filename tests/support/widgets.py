"""Clicks on the laid-out links of a reply's text, as the user makes them."""

from __future__ import annotations


def click_link(qtbot, w, href):
    """A real mouse click on our header link `href` (found in the laid-out document)."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QTextCursor

    doc = w.body.document()
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            if frag.charFormat().anchorHref() == href:
                cur = QTextCursor(doc)
                cur.setPosition(frag.position() + 1)
                pos = w.body.cursorRect(cur).center()
                qtbot.mouseClick(w.body.viewport(), Qt.LeftButton, pos=pos)
                return
            it += 1
        block = block.next()
    raise AssertionError(f"no link {href}")
