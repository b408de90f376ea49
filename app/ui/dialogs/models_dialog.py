"""The Models page: the pairs on this computer (target, drafter, projector, quantization, size,
fit, last used), with Load, Import, Download, Show in folder and Remove."""

from __future__ import annotations

import html
import time
from pathlib import Path

from PySide6.QtCore import QUrl, Qt, Signal
from PySide6.QtGui import QColor, QDesktopServices
from PySide6.QtWidgets import (QAbstractItemView, QDialog, QFileDialog, QHBoxLayout, QHeaderView, QLabel,
                               QMessageBox, QPushButton, QTableWidget, QTableWidgetItem, QVBoxLayout)

from engine.errors import TandemError
from engine.models.hardware import Machine
from engine.models.library import Library, PairDetails
from engine.models.pairing import find_drafter

from app.ui.safe_text import message

FIT_COLORS = {"fits": "#2e7d32", "tight": "#a15c00", "too big": "#b3261e"}


def _size(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _when(t: float) -> str:
    if not t:
        return "never"
    days = (time.time() - t) / 86400
    return "today" if days < 1 else "yesterday" if days < 2 else time.strftime("%Y-%m-%d", time.localtime(t))


def import_pair(parent, library: Library, path: str) -> str | None:
    """Add a GGUF the user picked, with the drafter found next to it; one clear message when
    there is none. Returns the target's path, or None when the file cannot be used."""
    try:
        drafter, reasons = find_drafter(path)
    except TandemError as e:
        message(parent, QMessageBox.Warning, "Cannot use this file", str(e))
        return None
    if drafter is None:
        shown = reasons[:3] + ([f"…and {len(reasons) - 3} more files"] if len(reasons) > 3 else [])
        why = "\n".join(shown) or "no MTP drafter file is next to it"
        message(parent, QMessageBox.Information, "No MTP drafter found",
                f"{Path(path).name} will run without an MTP drafter: it drafts by lookup only, which speeds "
                f"up answers that repeat text already in the chat (an edited file).\n\n{why}")
    library.add(Path(path).stem, path, drafter, "import")
    return str(Path(path).resolve())


class ModelsDialog(QDialog):
    """Emits `load_requested(target, drafter)` when the user picks a pair to run."""

    load_requested = Signal(str, str)
    COLUMNS = ["Model", "Quant", "Drafter (MTP)", "Projector", "Size", "Fit", "Last used"]

    def __init__(self, library: Library, machine: Machine, downloader_args: dict | None = None,
                 current: str = "", parent=None):
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.resize(820, 420)
        self.library, self.machine = library, machine
        self.downloader_args = downloader_args or {}
        self.current = current
        self.rows: list[PairDetails] = []
        lay = QVBoxLayout(self)
        lay.addWidget(QLabel(f"Models on this computer. <b>This machine:</b> {html.escape(machine.description)}"))
        self.table = QTableWidget(0, len(self.COLUMNS))
        self.table.setHorizontalHeaderLabels(self.COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.Stretch)
        self.table.doubleClicked.connect(self.load_selected)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        lay.addWidget(self.table, 1)
        self.empty = QLabel("No models yet: Download one, or Import a Gemma 4 GGUF you already have.")
        self.empty.setStyleSheet("color: gray")
        lay.addWidget(self.empty)
        row = QHBoxLayout()
        self.download_btn = QPushButton("Download…")
        self.download_btn.setToolTip("Get a Gemma 4 model and its drafter from Hugging Face")
        self.download_btn.clicked.connect(self.download)
        self.import_btn = QPushButton("Import GGUF…")
        self.import_btn.setToolTip("Use a Gemma 4 GGUF already on this computer; its drafter is found next to it")
        self.import_btn.clicked.connect(self.import_file)
        self.reveal_btn = QPushButton("Show in folder")
        self.reveal_btn.clicked.connect(self.reveal)
        self.remove_btn = QPushButton("Remove…")
        self.remove_btn.clicked.connect(self.remove)
        self.load_btn = QPushButton("Load")
        self.load_btn.setDefault(True)
        self.load_btn.clicked.connect(self.load_selected)
        close = QPushButton("Close")
        close.clicked.connect(self.reject)
        for b in (self.download_btn, self.import_btn, self.reveal_btn, self.remove_btn):
            row.addWidget(b)
        row.addStretch(1)
        row.addWidget(close)
        row.addWidget(self.load_btn)
        lay.addLayout(row)
        self.refresh()

    # ---- the table --------------------------------------------------------------------
    def refresh(self, select: str | None = None) -> None:
        self.rows = self.library.details(self.machine)
        self.table.setRowCount(len(self.rows))
        for i, d in enumerate(self.rows):
            e = d.entry
            name = e.name + ("  (loaded)" if self.current and Path(self.current).resolve() == Path(e.target) else "")
            cells = [name, d.quant or "?", Path(e.drafter).name if e.drafter else "none (lookup only)",
                     Path(e.projector).name if e.projector else "–", _size(d.size) if d.size else "?",
                     "problem" if d.problem else d.fit, _when(e.last_used)]
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(d.problem or f"{e.target}\n{e.drafter or 'no drafter'}")
                color = FIT_COLORS["too big"] if d.problem else FIT_COLORS.get(d.fit)
                if c == 5 and color:
                    item.setForeground(QColor(color))
                self.table.setItem(i, c, item)
        for c in range(1, len(self.COLUMNS)):
            self.table.resizeColumnToContents(c)
        self.empty.setVisible(not self.rows)
        target = select or self.current
        idx = next((i for i, d in enumerate(self.rows) if target and d.entry.target == str(Path(target).resolve())), 0)
        if self.rows:
            self.table.selectRow(idx)
        self._update_buttons()

    def selected(self) -> PairDetails | None:
        rows = self.table.selectionModel().selectedRows()
        return self.rows[rows[0].row()] if rows and rows[0].row() < len(self.rows) else None

    def _update_buttons(self) -> None:
        d = self.selected()
        for b in (self.reveal_btn, self.remove_btn):
            b.setEnabled(d is not None)
        self.load_btn.setEnabled(d is not None and d.problem is None)

    # ---- actions ----------------------------------------------------------------------
    def load_selected(self, *_):
        d = self.selected()
        if d is None or d.problem:
            if d is not None:
                message(self, QMessageBox.Warning, "Cannot load this model", d.problem)
            return
        self.load_requested.emit(d.entry.target, d.entry.drafter or "")
        self.accept()

    def import_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import a Gemma 4 model (GGUF)", "", "GGUF models (*.gguf)")
        if path:
            self.import_path(path)

    def import_path(self, path: str) -> None:
        target = import_pair(self, self.library, path)
        if target:
            self.refresh(select=target)

    def download(self) -> None:
        from .welcome import WelcomeDialog

        dlg = WelcomeDialog(self, self.downloader_args, library=self.library, machine=self.machine)
        dlg.setWindowTitle("Download a model")
        if dlg.exec() == QDialog.Accepted and dlg.chosen:
            self.refresh(select=dlg.chosen[0])

    def reveal(self) -> None:
        d = self.selected()
        if d is not None:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(Path(d.entry.target).parent)))

    def remove(self) -> None:
        d = self.selected()
        if d is None:
            return
        box = QMessageBox(QMessageBox.Question, "Remove model", "", QMessageBox.Cancel, self)
        box.setTextFormat(Qt.PlainText)
        keep = box.addButton("Remove from the list", QMessageBox.AcceptRole)
        delete = None
        if d.entry.source == "download":
            box.setText(f"Remove {d.entry.name}?\n\nTandem downloaded it: you can also delete its files "
                        f"({_size(d.size)}) from disk.")
            delete = box.addButton("Remove and delete files", QMessageBox.DestructiveRole)
        else:
            box.setText(f"Remove {d.entry.name} from the list?\n\nYou imported it: its files stay where they are.")
        box.exec()
        if box.clickedButton() not in (keep, delete) or box.clickedButton() is None:
            return
        self.library.remove(d.entry.target, delete_files=box.clickedButton() is delete)
        self.refresh()
