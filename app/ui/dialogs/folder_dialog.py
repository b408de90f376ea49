"""Attach folder…: a folder's text files as a tree (see `folder_scan` for what is left out and
why), each with its size and tokens, the ticked total against what the context has free. What
does not fit is said before sending, with the numbers, and Attach waits until it fits: nothing
is ever cut silently. Nothing is ticked at first."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QDialog, QHBoxLayout, QHeaderView, QLabel, QPushButton, QTreeWidget,
                               QTreeWidgetItem, QVBoxLayout)

from app.core import folder_scan
from app.core.folder_scan import DEPENDENCY, TOO_LARGE, FolderScan, ReadError
from app.core.text_files import MAX_TEXT_BYTES, human_size

# what the dialog holds in memory at most: far more than any context takes (a million tokens
# is about 4 MB of text), so the limit only keeps a huge folder from filling the memory
READ_BUDGET = 32 * 2**20
NOT_READ = f"not read (over {READ_BUDGET // 2**20} MB in all)"
REL = Qt.UserRole  # a file item's path relative to the root

TokenCounter = Callable[[list[str], Callable[[list[int]], None]], None]


def _fmt(n: int, exact: bool) -> str:
    return f"{n:,}" if exact else f"≈{n:,}"


def skipped_summary(s: FolderScan, extra: dict[str, int] | None = None) -> str:
    """'Skipped: 3 ignored by .gitignore, 2 binary, node_modules, .venv' (the dependency folders
    by name, the first few), or "" when nothing was."""
    counts = dict(s.counts)
    for reason, n in (extra or {}).items():
        counts[reason] = counts.get(reason, 0) + n
    folders = [rel.rstrip("/") for rel, why in s.skipped if why == DEPENDENCY]
    parts = []
    for reason, n in counts.items():
        if reason == DEPENDENCY:
            continue
        label = f"too large (over {human_size(MAX_TEXT_BYTES)})" if reason == TOO_LARGE else reason
        parts.append(f"{n:,} {label}")
    if counts.get(DEPENDENCY):
        more = counts[DEPENDENCY] - min(len(folders), 4)
        parts.append(", ".join(folders[:4]) + (f" and {more:,} more folders" if more > 0 else ""))
    return "Skipped: " + ", ".join(parts) if parts else ""


class FolderDialog(QDialog):
    """`count(texts, done)` counts tokens asynchronously and calls `done(counts)` on the GUI
    thread; `free_tokens` is what the chat has left; `exact` False: the counts are estimates."""

    def __init__(self, root: str, count: TokenCounter, free_tokens: int, parent=None, *, exact: bool = True):
        super().__init__(parent)
        self.root = Path(root)
        self.free_tokens, self.exact = max(0, int(free_tokens)), exact
        self.setWindowTitle(f"Attach folder — {self.root.name or str(self.root)}")
        self.resize(720, 560)
        self._texts: dict[str, str] = {}  # rel -> text, the files that can be ticked
        self._tokens: dict[str, int] | None = None  # rel -> tokens, once counted
        self._items: list[QTreeWidgetItem] = []  # the file items, in tree order
        self._folders: dict[str, QTreeWidgetItem] = {}  # rel -> folder item

        lay = QVBoxLayout(self)
        self.tree = QTreeWidget()
        self.tree.setColumnCount(3)
        self.tree.setHeaderLabels(["Name", "Size", "Tokens"])
        self.tree.header().setSectionResizeMode(0, QHeaderView.Stretch)
        self.tree.header().setStretchLastSection(False)
        self.tree.setUniformRowHeights(True)
        lay.addWidget(self.tree, 1)
        self.skipped_label = QLabel()
        self.skipped_label.setWordWrap(True)
        self.skipped_label.setTextFormat(Qt.PlainText)
        lay.addWidget(self.skipped_label)
        self.total_label = QLabel()
        self.total_label.setWordWrap(True)
        self.total_label.setTextFormat(Qt.PlainText)
        lay.addWidget(self.total_label)
        row = QHBoxLayout()
        self.tick_all_btn = QPushButton("Tick all")
        self.tick_all_btn.clicked.connect(lambda: self._tick_all(True))
        self.untick_all_btn = QPushButton("Untick all")
        self.untick_all_btn.clicked.connect(lambda: self._tick_all(False))
        cancel = QPushButton("Cancel")
        cancel.clicked.connect(self.reject)
        self.attach_btn = QPushButton("Attach")
        self.attach_btn.setDefault(True)
        self.attach_btn.clicked.connect(self.accept)
        for b in (self.tick_all_btn, self.untick_all_btn):
            row.addWidget(b)
        row.addStretch(1)
        row.addWidget(cancel)
        row.addWidget(self.attach_btn)
        lay.addLayout(row)

        self._load()
        self.tree.itemChanged.connect(lambda *_: self._update_total())
        self._update_total()
        if self._texts:
            order = list(self._texts)
            count(list(self._texts.values()), lambda counts: self._counted(order, counts))

    # ---- reading and the tree ---------------------------------------------------------
    def _load(self) -> None:
        """Scan the folder and read its text files once (bounded: the scan's limits and
        READ_BUDGET); files that turn out not to be text after all join the skipped line."""
        try:
            scan = folder_scan.scan(self.root)
        except OSError as e:
            self.skipped_label.setText(f"Cannot list {self.root}: {e.strerror or e}")
            return
        extra: dict[str, int] = {}
        budget = READ_BUDGET
        for f in scan.files:
            if f.size > budget:
                extra[NOT_READ] = extra.get(NOT_READ, 0) + 1
                continue
            try:
                self._texts[f.rel] = text = folder_scan.read(self.root, f.rel)
            except ReadError as e:  # changed since the scan, or not text past its start
                extra[e.reason] = extra.get(e.reason, 0) + 1
                continue
            budget -= len(text.encode("utf-8", "replace"))
        self._build_tree({f.rel: f.size for f in scan.files if f.rel in self._texts})
        lines = [skipped_summary(scan, extra)]
        if scan.truncated:
            lines.append(f"The folder is too big to list whole: only the first {len(scan.files):,} "
                         "text files found are shown.")
        if not self._texts:
            lines.append("No text files to attach in this folder.")
        self.skipped_label.setText("\n".join(l for l in lines if l))
        named = [f"{rel} — {why}" for rel, why in scan.skipped[:40]]
        more = sum(scan.counts.values()) - len(named)
        self.skipped_label.setToolTip("\n".join(named + ([f"…and {more:,} more"] if more > 0 else [])))

    def _build_tree(self, sizes: dict[str, int]) -> None:
        folders: dict[str, QTreeWidgetItem] = {}

        def folder(rel: str) -> QTreeWidgetItem | None:
            if not rel:
                return None
            if rel not in folders:
                parent_rel, _, name = rel.rpartition("/")
                parent = folder(parent_rel)
                item = QTreeWidgetItem([name, "", ""])
                item.setFlags(item.flags() | Qt.ItemIsUserCheckable | Qt.ItemIsAutoTristate)
                item.setCheckState(0, Qt.Unchecked)
                (parent.addChild(item) if parent else self.tree.addTopLevelItem(item))
                folders[rel] = item
            return folders[rel]

        # folders before files at each level, as file managers show them
        def key(rel: str):
            parts = rel.lower().split("/")
            return [(0, p) for p in parts[:-1]] + [(1, parts[-1])]

        for rel in sorted(sizes, key=key):
            parent_rel, _, name = rel.rpartition("/")
            item = QTreeWidgetItem([name, human_size(sizes[rel]), "…"])
            item.setFlags((item.flags() | Qt.ItemIsUserCheckable) & ~Qt.ItemIsAutoTristate)
            item.setCheckState(0, Qt.Unchecked)
            item.setData(0, REL, rel)
            item.setTextAlignment(1, Qt.AlignRight | Qt.AlignVCenter)
            item.setTextAlignment(2, Qt.AlignRight | Qt.AlignVCenter)
            parent = folder(parent_rel)
            (parent.addChild(item) if parent else self.tree.addTopLevelItem(item))
            self._items.append(item)
        for item in folders.values():
            item.setTextAlignment(2, Qt.AlignRight | Qt.AlignVCenter)
        if len(self._items) <= 200:  # a small project opens whole; a big one by its top level
            self.tree.expandAll()
        for c in (1, 2):
            self.tree.resizeColumnToContents(c)
        self._folders = folders

    def _counted(self, order: list[str], counts: list[int]) -> None:
        try:
            if len(counts) != len(order):
                return  # not an answer to what was asked: the numbers stay "…"
            self._tokens = dict(zip(order, (int(n) for n in counts)))
            self.tree.blockSignals(True)
            try:
                for item in self._items:
                    item.setText(2, _fmt(self._tokens[item.data(0, REL)], self.exact))
                inside: dict[str, int] = {}
                for rel, n in self._tokens.items():  # each file adds to every folder above it
                    parts = rel.split("/")[:-1]
                    for k in range(1, len(parts) + 1):
                        key = "/".join(parts[:k])
                        inside[key] = inside.get(key, 0) + n
                for rel, item in self._folders.items():
                    item.setText(2, _fmt(inside.get(rel, 0), self.exact))
            finally:
                self.tree.blockSignals(False)
            self.tree.resizeColumnToContents(2)
            self._update_total()
        except RuntimeError:  # the dialog was closed before the counts came
            pass

    # ---- ticking and the total --------------------------------------------------------
    def _ticked(self) -> list[str]:
        return [i.data(0, REL) for i in self._items if i.checkState(0) == Qt.Checked]

    def _tick_all(self, on: bool) -> None:
        self.tree.blockSignals(True)  # one total at the end, not one per file
        try:
            for item in self._items:
                item.setCheckState(0, Qt.Checked if on else Qt.Unchecked)
        finally:
            self.tree.blockSignals(False)
        self._update_total()

    def _update_total(self) -> None:
        ticked = self._ticked()
        free = f"{self.free_tokens:,} free in the context"
        files = f"{len(ticked):,} file" + ("" if len(ticked) == 1 else "s")
        self.total_label.setStyleSheet("")
        if not ticked:
            self.total_label.setText(f"Tick the files to attach · {free}")
            return self._allow(False, "Tick the files to attach first")
        if self._tokens is None:
            self.total_label.setText(f"Ticked {files}: counting tokens… · {free}")
            return self._allow(False, "Counting the tokens of the files…")
        total = sum(self._tokens[r] for r in ticked)
        if total <= self.free_tokens:
            self.total_label.setText(f"Ticked {files}: {_fmt(total, self.exact)} tokens · {free}")
            return self._allow(True, "")
        over = total - self.free_tokens
        self.total_label.setText(f"Ticked {files}: {_fmt(total, self.exact)} tokens, "
                                 f"{_fmt(over, self.exact)} more than the {free} — untick some files")
        self.total_label.setStyleSheet(f"color: {self._warning_color()}")
        self._allow(False, f"The ticked files take {_fmt(total, self.exact)} tokens but the context has "
                           f"{self.free_tokens:,} free: untick {_fmt(over, self.exact)} tokens' worth")

    def _allow(self, ok: bool, why: str) -> None:
        self.attach_btn.setEnabled(ok)
        self.attach_btn.setToolTip(why)

    def _warning_color(self) -> str:
        """A red readable on the window's background, light or dark."""
        return "#f28b82" if self.palette().window().color().lightness() < 128 else "#b3261e"

    # ---- the result -------------------------------------------------------------------
    def selected(self) -> list[tuple[str, str, str]]:
        """The ticked files as (name the model reads: "FOLDER/rel/path", text, absolute path)."""
        base = self.root.name or "folder"
        return [(f"{base}/{rel}", self._texts[rel], folder_scan.source_path(self.root, rel))
                for rel in self._ticked()]


def choose_folder_files(parent, root: str, count: TokenCounter, free_tokens: int, *,
                        exact: bool = True) -> list[tuple[str, str, str]]:
    """Run the dialog modally: the ticked files, or [] when cancelled."""
    dlg = FolderDialog(root, count, free_tokens, parent, exact=exact)
    try:
        return dlg.selected() if dlg.exec() == QDialog.Accepted else []
    finally:
        dlg.deleteLater()
