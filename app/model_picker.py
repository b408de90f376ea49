"""The model picker in the main window: the pairs in the library, most recently used first;
choosing one switches to it with one click. Its last entry opens the Models page."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QSizePolicy

from engine.models.library import Library

MANAGE = "manage"


class ModelPicker(QComboBox):
    chosen = Signal(str, str)  # (target, drafter) to load
    manage = Signal()

    def __init__(self, library: Library, parent=None):
        super().__init__(parent)
        self.library = library
        self.setObjectName("modelPicker")
        self.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.setMinimumContentsLength(14)  # long names are elided, the toolbar stays on screen at 800 px
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)
        self.setToolTip("The model to chat with: switch with one click. Models… adds, downloads and removes them")
        self._current = ""
        self._status = ""
        self.activated.connect(self._activated)
        self.refresh()

    def refresh(self, current: str | None = None, status: str = "") -> None:
        """Rebuild the list; `current` is the loaded (or loading) target, `status` words for it."""
        if current is not None:
            self._current = str(Path(current).resolve()) if current else ""
        self._status = status
        self.blockSignals(True)
        self.clear()
        entries = sorted(self.library.entries(), key=lambda e: (e.last_used, e.added), reverse=True)
        cur = self._current
        if cur and not any(e.target == cur for e in entries):
            self.addItem(Path(cur).stem, (cur, ""))
        for e in entries:
            mark = "" if e.drafter else "  (no drafter)"
            self.addItem(e.name + mark, (e.target, e.drafter or ""))
            self.setItemData(self.count() - 1, f"{e.target}\n{e.drafter or 'no MTP drafter'}", 3)  # tooltip
        if self.count() == 0:
            self.addItem("No model — choose one…", None)
        self.insertSeparator(self.count())
        self.addItem("Models…", MANAGE)
        idx = next((i for i in range(self.count()) if isinstance(self.itemData(i), tuple)
                    and self.itemData(i)[0] == cur), 0)
        self.setCurrentIndex(idx)
        if status and isinstance(self.itemData(idx), tuple):
            self.setItemText(idx, f"{self.itemText(idx)} — {status}")
        self.blockSignals(False)

    def _activated(self, index: int) -> None:
        data = self.itemData(index)
        if data == MANAGE or data is None:
            self.refresh()  # back to the loaded model while the page is open
            self.manage.emit()
        elif isinstance(data, tuple) and data[0] != self._current:
            self.chosen.emit(data[0], data[1])
