"""The window's keys that are not menu entries (Esc), the find bar they drive, and Help → Keyboard
shortcuts. The list is read from the window's own menu entries and shortcuts when it opens, so it
cannot fall behind them; only the keys a widget reads itself (Enter in the input) are written here."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (QAbstractItemView, QDialog, QDialogButtonBox, QHeaderView, QTableWidget,
                               QTableWidgetItem, QVBoxLayout)

from .find_bar import FindBar

# keys read by a widget's keyPressEvent: no QAction or QShortcut to read them from
TYPED = (("Enter", "Send the message (in the input box)"),
         ("Shift+Enter", "New line (in the input box)"),
         ("Enter / Shift+Enter", "Next / previous match (in the find bar)"))


def install(win) -> None:
    """The find bar at the top of the chat view, and Esc (see MainWindow._escape)."""
    win.find_bar = FindBar(win.chat_view)
    win.chat_view.layout().insertWidget(0, win.find_bar)
    # a chat opened or a version switched: the matches are found again in what is shown now
    win.session.model.reset.connect(lambda: win.find_bar.search(keep=True))
    esc = QShortcut(QKeySequence(Qt.Key_Escape), win, win._escape, context=Qt.WindowShortcut)
    esc.setWhatsThis("Stop the reply; leave editing; close the find bar")
    win.shortcuts_dialog = None


def _keys(seqs) -> str:
    return ", ".join(s.toString(QKeySequence.NativeText) for s in seqs)


def shortcut_rows(win) -> list[tuple[str, str]]:
    """(keys, what they do) for every menu entry with a key, every described shortcut, and TYPED."""
    rows = []
    for top in win.menuBar().actions():
        for act in top.menu().actions():
            if act.shortcuts():
                rows.append((_keys(act.shortcuts()), act.text().replace("&", "").rstrip("…")))
    for sc in win.findChildren(QShortcut):
        if sc.whatsThis():  # each QShortcut made for people says what it does
            rows.append((_keys([sc.key()]), sc.whatsThis()))
    return rows + list(TYPED)


class ShortcutsDialog(QDialog):
    """A table of keys and what they do; not modal, so it can stay open beside the chat."""

    def __init__(self, rows: list[tuple[str, str]], parent=None):
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        self._rows = rows
        table = QTableWidget(len(rows), 2, self)
        table.setHorizontalHeaderLabels(["Keys", "Does"])
        table.verticalHeader().hide()
        table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        table.setSelectionMode(QAbstractItemView.NoSelection)
        table.setFocusPolicy(Qt.NoFocus)
        table.setShowGrid(False)
        for r, (keys, what) in enumerate(rows):
            table.setItem(r, 0, QTableWidgetItem(keys))
            table.setItem(r, 1, QTableWidgetItem(what))
        table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeToContents)
        table.horizontalHeader().setStretchLastSection(True)
        buttons = QDialogButtonBox(QDialogButtonBox.Close)
        buttons.rejected.connect(self.close)
        lay = QVBoxLayout(self)
        lay.addWidget(table)
        lay.addWidget(buttons)
        self.resize(520, min(640, 90 + 30 * len(rows)))

    def rows(self) -> list[tuple[str, str]]:
        return list(self._rows)


def show_shortcuts(win) -> None:
    """Help → Keyboard shortcuts: the list, made anew each time from the window's keys."""
    if win.shortcuts_dialog is not None:
        win.shortcuts_dialog.close()
    win.shortcuts_dialog = ShortcutsDialog(shortcut_rows(win), win)
    win.shortcuts_dialog.show()
