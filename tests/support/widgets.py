"""What a user sees and clicks in widgets: the laid-out links of a reply's text, a tree's items."""

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


def tree_items(tree):
    """{path in the tree: item} over the whole tree, as shown (a folder's path ends in "/")."""
    out = {}

    def walk(item, prefix):
        for i in range(item.childCount()):
            child = item.child(i)
            path = prefix + child.text(0)
            out[path + ("/" if child.childCount() else "")] = child
            walk(child, path + "/")

    walk(tree.invisibleRootItem(), "")
    return out
