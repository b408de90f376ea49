"""The chat list panel: new chat, search, chats grouped by date (Today, Yesterday, Previous 7
days, Older), a context menu, Delete key and multi-select. It only emits requests; the main
window acts on them."""

from __future__ import annotations

import time

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QKeySequence, QShortcut
from PySide6.QtWidgets import (QAbstractItemView, QInputDialog, QLineEdit, QListWidget, QListWidgetItem, QMenu,
                               QMessageBox, QPushButton, QStyledItemDelegate, QVBoxLayout, QWidget)

from .safe_text import message

GROUPS = ("Today", "Yesterday", "Previous 7 days", "Older")


def date_group(updated: float, now: float | None = None) -> str:
    """Which heading a chat last updated at `updated` (epoch seconds) goes under."""
    now_t = time.localtime(now if now is not None else time.time())
    midnight = time.mktime((now_t.tm_year, now_t.tm_mon, now_t.tm_mday, 0, 0, 0, 0, 0, -1))
    if updated >= midnight:
        return GROUPS[0]
    if updated >= midnight - 86400:
        return GROUPS[1]
    if updated >= midnight - 7 * 86400:
        return GROUPS[2]
    return GROUPS[3]


class _FitDelegate(QStyledItemDelegate):
    """Rows ask for no width: QListView makes every row as wide as the widest one or the list,
    so each is as wide as the list and a long title is cut with "…" where the list ends."""

    def sizeHint(self, option, index):
        return QSize(1, super().sizeHint(option, index).height())


class ChatList(QWidget):
    open_requested = Signal(int)
    new_requested = Signal()
    rename_requested = Signal(int, str)
    delete_requested = Signal(list)  # chat ids
    export_requested = Signal(str, int)  # "md" or "json", chat id

    def __init__(self, store, parent=None):
        super().__init__(parent)
        self.store = store
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)
        self.new_btn = QPushButton("+ New chat")
        self.new_btn.clicked.connect(self.new_requested)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search chats…")
        self.search.setClearButtonEnabled(True)
        self.list = QListWidget()
        self.list.setSelectionMode(QAbstractItemView.ExtendedSelection)
        self.list.itemClicked.connect(self._clicked)
        self.list.setContextMenuPolicy(Qt.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu)
        # long titles end in "…" instead of widening the list past its panel (the tooltip has them whole)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.ElideRight)
        self.list.setItemDelegate(_FitDelegate(self.list))
        QShortcut(QKeySequence.Delete, self.list, self.delete_selected,
                  context=Qt.WidgetShortcut).setWhatsThis("Delete the selected chats (in the chat list)")
        lay.addWidget(self.new_btn)
        lay.addWidget(self.search)
        lay.addWidget(self.list, 1)
        self.current_id: int | None = None
        self.search.textChanged.connect(lambda *_: self.refresh())

    def refresh(self, current_id: int | None = None) -> None:
        if current_id is not None:
            self.current_id = current_id
        self.list.clear()
        group = None
        now = time.time()
        for c in self.store.conversations(self.search.text().strip()):
            g = date_group(c.updated, now)
            if g != group:
                group = g
                head = QListWidgetItem(g)
                head.setFlags(Qt.ItemIsEnabled)  # a heading: shown, never selected
                head.setForeground(QColor("#80868b"))
                font = QFont(head.font())
                font.setBold(True)
                font.setPointSizeF(max(7.0, font.pointSizeF() * 0.85))
                head.setFont(font)
                self.list.addItem(head)
            it = QListWidgetItem(c.title)
            it.setData(Qt.UserRole, c.id)
            it.setToolTip(f"{c.title}\n{time.strftime('%Y-%m-%d %H:%M', time.localtime(c.updated))}")
            self.list.addItem(it)
            if c.id == self.current_id:
                it.setSelected(True)

    def titles(self) -> list[str]:
        """The chats shown, without the date headings."""
        return [self.list.item(i).text() for i in range(self.list.count())
                if self.list.item(i).data(Qt.UserRole) is not None]

    def _clicked(self, it: QListWidgetItem) -> None:
        cid = it.data(Qt.UserRole)
        if cid is not None and len(self.list.selectedItems()) <= 1:
            self.open_requested.emit(cid)

    def selected_ids(self) -> list[int]:
        return [it.data(Qt.UserRole) for it in self.list.selectedItems() if it.data(Qt.UserRole) is not None]

    def delete_selected(self) -> None:
        ids = self.selected_ids()
        if not ids:
            return
        names = [it.text() for it in self.list.selectedItems() if it.data(Qt.UserRole) is not None]
        what = f"“{names[0]}”" if len(ids) == 1 else f"these {len(ids)} chats"
        if message(self, QMessageBox.Question, "Delete chat", f"Delete {what}? This cannot be undone.",
                   QMessageBox.Yes | QMessageBox.No) == QMessageBox.Yes:
            self.delete_requested.emit(ids)

    def _menu(self, pos) -> None:
        it = self.list.itemAt(pos)
        if not it or it.data(Qt.UserRole) is None:
            return
        cid, title = it.data(Qt.UserRole), it.text()
        if not it.isSelected():
            self.list.clearSelection()
            it.setSelected(True)
        if len(self.selected_ids()) == 1:  # right-click opens the chat, as a click does (not a multi-selection)
            self.open_requested.emit(cid)  # (the list is rebuilt: `it` is gone)
        m = QMenu(self)
        ren = m.addAction("Rename…")
        md = m.addAction("Export as Markdown…")
        js = m.addAction("Export as JSON…")
        m.addSeparator()
        dl = m.addAction("Delete")
        act = m.exec(self.list.mapToGlobal(pos))
        if act == ren:
            title, ok = QInputDialog.getText(self, "Rename chat", "Title:", text=title)
            if ok and title.strip():
                self.rename_requested.emit(cid, title.strip())
        elif act == dl:
            self.delete_selected()
        elif act in (md, js):
            self.export_requested.emit("md" if act == md else "json", cid)
