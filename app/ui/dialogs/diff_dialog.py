"""Saving a reply's code block: to a file the user picks (Save as…), or over the attached file
it is a new version of, after a side-by-side diff and the user's confirmation. Nothing is
written without the user asking for it and, over an original, confirming it."""

from __future__ import annotations

import contextlib
import difflib
import html
import os
import stat
import tempfile
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFontDatabase, QPalette
from PySide6.QtWidgets import QDialog, QFileDialog, QHBoxLayout, QLabel, QMessageBox, QPushButton, QVBoxLayout

from app.core.code_match import basename
from app.ui.safe_text import SafeBrowser, message
from app.core.text_files import _BOMS, MAX_TEXT_BYTES, AttachedFile, NotText, decode_text  # _BOMS: keep a file's encoding

CONTEXT_LINES = 3  # unchanged lines shown around each change
MAX_ROWS = 4000  # a table this long is already slow to lay out: the rest is summed up in one row
CUT_OFF = ("This reply was cut off before its code block ended: saving it would truncate the file. "
           "Save as… can still write it to a new file.")
ADDED, REMOVED = "#2da44e", "#cf222e"  # mixed into the palette's base colour: readable light and dark
_last_dir = ""  # where the last Save as… went: the next one starts there


def file_text(code: str, like: str = "") -> str:
    """A code block as a file's text: ending in a newline, with the line endings of `like`
    (the attached version), since a reply's text always has plain newlines."""
    text = code if code.endswith("\n") or not code else code + "\n"
    return text.replace("\n", "\r\n") if "\r\n" in like else text


def save_code_as(parent, code: str, suggested_name: str) -> str | None:
    """Ask where to save `code` (the dialog asks before replacing a file) and write it as UTF-8;
    the path written, or None (cancelled, or failed: said in a message box)."""
    global _last_dir
    start = os.path.join(_last_dir or str(Path.home()), basename(suggested_name) or "snippet.txt")
    path, _ = QFileDialog.getSaveFileName(parent, "Save code as", start)
    if not path:
        return None
    try:
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(file_text(code))
    except OSError as e:
        message(parent, QMessageBox.Warning, "Save as", f"Could not save {path}: {e.strerror or e}")
        return None
    _last_dir = os.path.dirname(path)
    return path


def write_atomic(path: str, text: str, encoding: str = "utf-8") -> None:
    """Replace the file at `path` with `text` through a temporary file in its folder and
    os.replace: a crash or a full disk never leaves half a file. Its permission bits stay."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    folder, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding=encoding, newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _mix(pal: QPalette, color: str, amount: float = 0.3) -> str:
    base, c = pal.color(QPalette.Base), QColor(color)
    return QColor(*(round(b + (x - b) * amount) for b, x in ((base.red(), c.red()), (base.green(), c.green()),
                                                              (base.blue(), c.blue())))).name()


def _cell(text: str) -> str:
    # escaped (model output); the cell's white-space: pre-wrap keeps its spaces
    return html.escape(text.expandtabs(4)) or "&nbsp;"


# Each side's text takes half the width and a long line wraps inside its half: unwrapped, the
# side with the longest line took most of the width and pushed the other out of sight.
_TEXT_CELL = '<td width="50%" style="white-space: pre-wrap"'


def side_by_side(old: list[str], new: list[str], pal: QPalette, old_title: str, new_title: str):
    """(html, added, removed): a four-column table (line numbers and text, old left, new
    right), removed lines tinted red and added ones green, CONTEXT_LINES around each change."""
    sm = difflib.SequenceMatcher(None, old, new)
    ops = sm.get_opcodes()
    added = sum(j2 - j1 for tag, _i1, _i2, j1, j2 in ops if tag in ("insert", "replace"))
    removed = sum(i2 - i1 for tag, i1, i2, _j1, _j2 in ops if tag in ("delete", "replace"))
    red, green = _mix(pal, REMOVED), _mix(pal, ADDED)
    muted = _mix(pal, pal.color(QPalette.Text).name(), 0.5)
    num = f'<td align="right" style="color:{muted}; white-space: nowrap">{{}}</td>'

    def side(lines, i, end, changed, tint):
        if i >= end:  # the other side of the change is longer
            return f"<td></td>{_TEXT_CELL}></td>"
        return num.format(i + 1) + (f'{_TEXT_CELL} bgcolor="{tint}">' if changed else f"{_TEXT_CELL}>") + \
            _cell(lines[i]) + "</td>"

    rows = []
    for g, group in enumerate(sm.get_grouped_opcodes(CONTEXT_LINES)):
        if g:
            rows.append(f'<tr><td colspan="4" style="color:{muted}">⋯</td></tr>')
        for tag, i1, i2, j1, j2 in group:
            for k in range(max(i2 - i1, j2 - j1)):
                rows.append(f"<tr>{side(old, i1 + k, i2, tag != 'equal', red)}"
                            f"{side(new, j1 + k, j2, tag != 'equal', green)}</tr>")
    if len(rows) > MAX_ROWS:
        rows[MAX_ROWS:] = [f'<tr><td colspan="4" style="color:{muted}">… {len(rows) - MAX_ROWS} more rows '
                           "not shown</td></tr>"]
    head = (f'<tr><th></th><th align="left" width="50%">{html.escape(old_title)}</th>'
            f'<th></th><th align="left" width="50%">{html.escape(new_title)}</th></tr>')
    if not rows:
        rows.append(f'<tr><td colspan="4" style="color:{muted}">No changes.</td></tr>')
    table = f'<table width="100%" cellspacing="0" cellpadding="2">{head}{"".join(rows)}</table>'
    return table, added, removed


class DiffDialog(QDialog):
    """The attached version of a file (left) beside a reply's code block (right), with Save
    over original… (after a confirmation naming the path), Save as… and Close.

    `cut_off`: the reply stopped inside the block (its closing fence never came), so the block
    is at most the start of the file: Save over original is off, and the dialog says why."""

    def __init__(self, code: str, attached: AttachedFile, parent=None, cut_off: bool = False):
        super().__init__(parent)
        self.code, self.attached, self.cut_off = code, attached, cut_off
        self.setWindowTitle(f"Changes to {attached.name}")
        screen = (parent.screen() if parent is not None else self.screen()).availableGeometry()
        self.resize(min(1100, screen.width() * 9 // 10), min(700, screen.height() * 85 // 100))
        lay = QVBoxLayout(self)
        old, new = attached.text.splitlines(), code.splitlines()
        self.old_lines, self.new_lines = len(old), len(new)
        table, self.added, self.removed = side_by_side(old, new, self.palette(), f"{attached.name} as attached",
                                                       "Reply")
        self.summary = QLabel(f"+{self.added} −{self.removed} lines", self)
        self.summary.setTextFormat(Qt.PlainText)
        lay.addWidget(self.summary)
        self.cut_off_note = QLabel(CUT_OFF, self)  # seen before any button: why Save over original is off
        self.cut_off_note.setTextFormat(Qt.PlainText)
        self.cut_off_note.setWordWrap(True)
        self.cut_off_note.setStyleSheet(f"color: {REMOVED}; font-weight: 600")
        self.cut_off_note.setVisible(cut_off)
        lay.addWidget(self.cut_off_note)
        self.view = SafeBrowser(self)
        self.view.setFont(QFontDatabase.systemFont(QFontDatabase.FixedFont))
        self.view.setHtml(table)
        lay.addWidget(self.view, 1)
        self.status = QLabel(self)  # what Save did
        self.status.setTextFormat(Qt.PlainText)
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        row = QHBoxLayout()
        self.save_over_btn = QPushButton("Save over original…", self)
        self.save_as_btn = QPushButton("Save as…", self)
        close = QPushButton("Close", self)
        row.addWidget(self.save_over_btn)
        row.addWidget(self.save_as_btn)
        row.addStretch(1)
        row.addWidget(close)
        lay.addLayout(row)
        self.save_over_btn.clicked.connect(self.save_over)
        self.save_as_btn.clicked.connect(self.save_as)
        close.clicked.connect(self.reject)
        close.setDefault(True)  # Enter closes; saving is always a deliberate click
        source = attached.source
        self.save_over_btn.setEnabled(not cut_off and bool(source) and os.path.isfile(source))
        if cut_off:
            self.save_over_btn.setToolTip(CUT_OFF)
        elif not self.save_over_btn.isEnabled():
            self.save_over_btn.setToolTip("Where the attached file came from is not known, or it is gone"
                                          if not source else f"{source} no longer exists")

    def save_as(self) -> None:
        path = save_code_as(self, self.code, basename(self.attached.name))
        if path:
            self.status.setText(f"Saved to {path}")

    def save_over(self) -> bool:
        """Write the reply's version over the file it was attached from, once the user confirms."""
        if self.cut_off:  # the button is off; a caller going around it is refused all the same
            self.status.setText("Not saved: " + CUT_OFF)
            return False
        path = os.path.realpath(self.attached.source)  # a link: the file it points to, the link stays
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_TEXT_BYTES + 1)
            on_disk = decode_text(data)
        except (OSError, NotText):
            data, on_disk = b"", None
        # a fixed first line with no "<": QMessageBox then shows the text plain, whatever the path holds
        text = (f"Replace the original file with the reply's version?\n\n{path}\n\n"
                f"+{self.added} −{self.removed} lines.")
        if self.new_lines < self.old_lines and 2 * self.removed > self.old_lines:
            # a reply that drops most of a file is more often a partial one than a meant rewrite
            text += (f"\n\nThe reply's version is much shorter: it removes {self.removed} of the original's "
                     f"{self.old_lines} lines and has {self.new_lines} in all. Is it the whole file?")
        if on_disk is None:
            text += "\n\nThe file could not be read now: it may have changed since it was attached."
        elif on_disk != self.attached.text:
            text += ("\n\nThe file has changed on disk since it was attached: it is no longer the version "
                     "shown on the left. Saving replaces those changes too.")
        if not os.access(path, os.W_OK):
            self.status.setText(f"Not saved: {path} is read-only.")
            return False
        answer = QMessageBox.question(self, "Save over original", text, QMessageBox.Yes | QMessageBox.No,
                                      QMessageBox.No)
        if answer != QMessageBox.Yes:
            self.status.setText("Not saved.")
            return False
        encoding = next((enc for bom, enc in _BOMS if data.startswith(bom)), "utf-8")  # the file keeps its own
        try:
            write_atomic(path, file_text(self.code, self.attached.text), encoding)
        except OSError as e:
            self.status.setText(f"Could not save {path}: {e.strerror or e}")
            return False
        self.status.setText(f"Saved over {path}")
        return True
