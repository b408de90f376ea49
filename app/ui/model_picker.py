"""The model picker in the main window: the pairs in the library, most recently used first,
then the models of each server connection; choosing one switches to it with one click. Its
last entries open the Models page and the Connections."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QSizePolicy

from engine.models.library import Library

MANAGE = "manage"
CONNECT = "connect"


class ModelPicker(QComboBox):
    chosen = Signal(str, str)  # (target, drafter) to load
    remote_chosen = Signal(str, str)  # (connection name, model) to connect to
    manage = Signal()
    connect_requested = Signal()

    def __init__(self, library: Library, settings=None, parent=None):
        super().__init__(parent)
        self.library = library
        self.settings = settings  # where the server connections are
        self.setObjectName("modelPicker")
        self.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.setMinimumContentsLength(10)  # long names are elided: the window fits 800 px with real fonts (Xvfb: 807 at 14)
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)
        self.setToolTip("The model to chat with: switch with one click. Models… adds, downloads and removes them")
        self._current = ""  # a local target path, or "remote:<connection>:<model>"
        self.activated.connect(self._activated)
        self.refresh()

    def refresh(self, current: str | None = None, status: str = "") -> None:
        """Rebuild the list; `current` is the loaded (or loading) target, `status` words for it."""
        if current is not None:
            self._current = current if not current or current.startswith("remote:") else str(Path(current).resolve())
        self.blockSignals(True)
        self.clear()
        entries = sorted(self.library.entries(), key=lambda e: (e.last_used, e.added), reverse=True)
        cur = self._current
        if cur and not cur.startswith("remote:") and not any(e.target == cur for e in entries):
            self.addItem(Path(cur).stem, (cur, ""))
        for e in entries:
            mark = "" if e.drafter else "  (no drafter)"
            self.addItem(e.name + mark, (e.target, e.drafter or ""))
            self.setItemData(self.count() - 1, f"{e.target}\n{e.drafter or 'no MTP drafter'}", 3)  # tooltip
        from app.ui.dialogs.connections import load_connections

        for c in load_connections(self.settings) if self.settings is not None else []:
            for m in c.models:
                # llama-server names a model by its file path unless started with --alias
                shown = Path(m).name if m.endswith(".gguf") else m
                self.addItem(f"{shown} — {c.name}", (f"remote:{c.name}:{m}", ""))
                self.setItemData(self.count() - 1, f"{m} on {c.url} ({c.engine or 'server'})", 3)
        if cur.startswith("remote:") and not any(isinstance(self.itemData(i), tuple) and self.itemData(i)[0] == cur
                                                 for i in range(self.count())):
            _, conn, model = cur.split(":", 2)
            self.addItem(f"{Path(model).name if model.endswith('.gguf') else model} — {conn}", (cur, ""))
        if self.count() == 0:
            self.addItem("No model — choose one…", None)
        self.insertSeparator(self.count())
        self.addItem("Models…", MANAGE)
        self.addItem("Connect to a server…", CONNECT)
        idx = next((i for i in range(self.count()) if isinstance(self.itemData(i), tuple)
                    and self.itemData(i)[0] == cur), 0)
        self.setCurrentIndex(idx)
        if status and isinstance(self.itemData(idx), tuple):
            self.setItemText(idx, f"{self.itemText(idx)} — {status}")
        self.blockSignals(False)

    def _activated(self, index: int) -> None:
        data = self.itemData(index)
        if data in (MANAGE, CONNECT) or data is None:
            self.refresh()  # back to the loaded model while the page is open
            (self.connect_requested if data == CONNECT else self.manage).emit()
        elif isinstance(data, tuple) and data[0] != self._current:
            if data[0].startswith("remote:"):
                _, conn, model = data[0].split(":", 2)
                self.remote_chosen.emit(conn, model)
            else:
                self.chosen.emit(data[0], data[1])


def model_label(info) -> tuple[str, str]:
    """The picker's status words and tooltip for a loaded model (an app.core.chat_types.ModelInfo)."""
    if info.remote:
        r = info.remote
        return info.engine, f"{r.model} on {info.engine} at {r.server}. Switch with one click"
    d = f" + {info.drafter_name}" if info.drafter_name else " (no MTP drafter: it drafts by lookup)"
    # the entry already says "(no drafter)": the status says what drafts instead
    hint = " (Settings to choose yourself)" if info.placement.startswith("Chose") else ""
    placed = f"\n{info.placement}{hint}" if info.placement else ""
    return ("" if info.drafter_name else "lookup drafting",
            f"{info.target_name}{d}. Switch with one click; Models… to add or remove{placed}")


def target_stem(info) -> str:
    """The loaded target's file name without its extension (what `tandem serve` calls the model)."""
    return Path(info.target_name).stem if info else "model"
