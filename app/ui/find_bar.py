"""Find in the chat (Ctrl+F): a bar at the top of the chat view. Typing highlights every match in
the messages' text and jumps to the first; Enter or F3 goes to the next, Shift+Enter or Shift+F3
to the previous, round the ends; it says "2 of 5" or "No matches". Esc closes it (the window's
Esc shortcut asks `has_focus` first, so Esc in the input still stops a reply)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QTextCursor
from PySide6.QtWidgets import QApplication, QFrame, QHBoxLayout, QLabel, QLineEdit, QTextEdit, QToolButton

# a browser's find colors, with dark text on them so they read in the dark theme too
MATCH, CURRENT, INK = QColor("#fff176"), QColor("#ff9632"), QColor("#202124")


class FindEdit(QLineEdit):
    """Enter: the next match; Shift+Enter: the previous one."""

    def __init__(self, step, parent=None):
        super().__init__(parent)
        self.step = step

    def keyPressEvent(self, e):
        if e.key() in (Qt.Key_Return, Qt.Key_Enter):
            self.step(-1 if e.modifiers() & Qt.ShiftModifier else 1)
            return
        super().keyPressEvent(e)


class FindBar(QFrame):
    def __init__(self, view, parent=None):
        """`view`: the ChatView searched (its messages' bodies)."""
        super().__init__(parent)
        self.setObjectName("findBar")
        self.view = view
        self.matches: list[tuple] = []  # (MessageWidget, QTextCursor selecting the match)
        self.index = -1
        lay = QHBoxLayout(self)
        lay.setContentsMargins(6, 4, 6, 4)
        self.edit = FindEdit(self.step)
        self.edit.setPlaceholderText("Find in chat")
        self.edit.setClearButtonEnabled(True)
        self.edit.textChanged.connect(lambda _: self.search())
        self.count = QLabel()
        lay.addWidget(self.edit, 1)
        lay.addWidget(self.count)
        for text, tip, slot in (("↑", "Previous match (Shift+Enter, Shift+F3)", lambda: self.step(-1)),
                                ("↓", "Next match (Enter, F3)", lambda: self.step(1)),
                                ("✕", "Close (Esc)", self.close_bar)):
            b = QToolButton()
            b.setText(text)
            b.setToolTip(tip)
            b.setAutoRaise(True)
            b.clicked.connect(slot)
            lay.addWidget(b)
        self.hide()

    def open(self) -> None:
        """Show it with the focus in the box, its text selected (typing replaces it)."""
        self.show()
        self.edit.setFocus()
        self.edit.selectAll()
        self.search()

    def close_bar(self) -> None:
        self.hide()
        self._paint([])
        self.matches, self.index = [], -1

    def has_focus(self) -> bool:
        fw = QApplication.focusWidget()
        return self.isVisible() and fw is not None and self.isAncestorOf(fw)

    def current_match(self):
        """(MessageWidget, QTextCursor) of the match shown, or None."""
        return self.matches[self.index] if 0 <= self.index < len(self.matches) else None

    def search(self, keep: bool = False) -> None:
        """Find the box's text anew (the chat may have changed); `keep`: stay at the same match."""
        if not self.isVisible():
            return
        self.matches = self._find(self.edit.text())
        self.index = min(self.index, len(self.matches) - 1) if keep else (0 if self.matches else -1)
        self._show()

    def step(self, d: int) -> None:
        """To the next (1) or previous (-1) match, round the ends; it opens the bar if closed."""
        if not self.isVisible():
            self.open()
            return
        self.search(keep=True)
        if self.matches:
            self.index = (self.index + d) % len(self.matches)
            self._show()

    def _find(self, text: str) -> list[tuple]:
        """Every match, case-insensitive, in the messages on screen (not those hidden by an edit)."""
        found = []
        if not text:
            return found
        for w in self.view.widgets():
            if w.isHidden():
                continue
            doc = w.body.document()
            cur = doc.find(text, 0)
            while not cur.isNull():
                found.append((w, cur))
                cur = doc.find(text, cur)
        return found

    def _show(self) -> None:
        n = len(self.matches)
        self.count.setText(f"{self.index + 1} of {n}" if n else "No matches" if self.edit.text() else "")
        self._paint(self.matches)
        m = self.current_match()
        if m is not None:
            self._scroll_to(*m)

    def _paint(self, matches: list[tuple]) -> None:
        """The matches as extra selections of their messages' bodies, the current one brighter."""
        per_body = {id(w): (w, []) for w in self.view.widgets()}
        for i, (w, cur) in enumerate(matches):
            sel = QTextEdit.ExtraSelection()
            sel.cursor = cur
            sel.format.setBackground(CURRENT if i == self.index else MATCH)
            sel.format.setForeground(INK)
            per_body.setdefault(id(w), (w, []))[1].append(sel)
        for w, sels in per_body.values():
            w.body.setExtraSelections(sels)

    def _scroll_to(self, w, cur: QTextCursor) -> None:
        rect = w.body.cursorRect(cur)
        at = w.body.viewport().mapTo(self.view.host, rect.center())
        self.view.scroll.ensureVisible(at.x(), at.y(), 40, 60)
