"""Attach folder…: the scan (what git would show, text only, bounded) and the dialog (tree,
ticks, token totals against the free context, nothing cut silently). Real files on disk."""

from __future__ import annotations

import codecs
import os

import pytest

from app.core import folder_scan
from app.core.folder_scan import BINARY, DEPENDENCY, IGNORED, OUTSIDE, TOO_LARGE, ReadError, scan
from app.core.text_files import MAX_TEXT_BYTES

from ..support.widgets import tree_items

LISTED = [".gitignore", "README.md", "alias.py", "env/notes.txt", "keep.log", "main.py", "src/.gitignore",
          "src/app.py", "src/important.log", "sub/generated.py", "sub/secret", "utf16.txt"]
SKIPPED = {
    "debug.log": IGNORED, "secret/": IGNORED, "excluded.md": IGNORED,  # root rules, .git/info/exclude
    "src/generated.py": IGNORED, "src/other.log": IGNORED,  # the nested .gitignore, and the root's *.log
    "node_modules/": DEPENDENCY, "__pycache__/": DEPENDENCY, ".venv/": DEPENDENCY, "myenv/": DEPENDENCY,
    "data.txt": BINARY, "logo.png": BINARY, "big.txt": TOO_LARGE, "link.txt": OUTSIDE,
}


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "proj"
    write(root / ".gitignore", "# build output\n*.log\nsecret/\n!keep.log\n")
    write(root / ".git" / "info" / "exclude", "excluded.md\n")
    write(root / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(root / "main.py", "print('hello world')\n")  # 2 words
    write(root / "README.md", "# Proj\n\nA small project for tests.\n")  # 7 words
    write(root / "keep.log", "kept by a negation\n")  # 4
    write(root / "debug.log", "ignored\n")
    write(root / "excluded.md", "excluded by .git/info/exclude\n")
    write(root / "secret" / "a.txt", "in an ignored folder\n")
    write(root / "src" / ".gitignore", "generated.py\n!important.log\n")
    write(root / "src" / "app.py", "def f():\n    return 1\n")  # 4
    write(root / "src" / "generated.py", "x = 1\n")
    write(root / "src" / "important.log", "re-included below the root\n")  # 4
    write(root / "src" / "other.log", "ignored by the root's rule\n")
    write(root / "sub" / "generated.py", "y = 2\n")  # the nested rule is src/'s only: 3
    write(root / "sub" / "secret", "a file, which secret/ (a folder rule) leaves alone\n")
    write(root / "node_modules" / "lib" / "index.js", "module.exports = 1;\n")
    write(root / "__pycache__" / "main.cpython-311.pyc", b"\x00\x01bytecode")
    write(root / ".venv" / "pyvenv.cfg", "home = /usr/bin\n")
    write(root / ".venv" / "lib" / "site.py", "import os\n")
    write(root / "myenv" / "pyvenv.cfg", "home = /usr/bin\n")  # a venv of any name
    write(root / "env" / "notes.txt", "an env folder without pyvenv.cfg\n")  # 5
    write(root / "data.txt", b"looks like text\x00\x00\x01\x02")
    write(root / "logo.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64))
    write(root / "utf16.txt", codecs.BOM_UTF16_LE + "Grüße aus UTF-16\n".encode("utf-16-le"))  # 3
    write(root / "big.txt", b"a" * (MAX_TEXT_BYTES + 1))
    write(tmp_path / "outside" / "secret.txt", "not in the folder\n")
    os.symlink(tmp_path / "outside" / "secret.txt", root / "link.txt")
    os.symlink(root / "main.py", root / "alias.py")  # a link within the folder is its file: 2
    return root


def test_scan_lists_text_files_and_says_what_it_skipped(project):
    s = scan(project)
    assert [f.rel for f in s.files] == LISTED
    assert dict(s.skipped) == SKIPPED
    assert s.counts == {IGNORED: 5, DEPENDENCY: 4, BINARY: 2, TOO_LARGE: 1, OUTSIDE: 1}
    assert not s.truncated
    sizes = {f.rel: f.size for f in s.files}
    assert sizes["main.py"] == len("print('hello world')\n")


def test_scan_is_bounded(project):
    s = scan(project, max_files=3)
    assert len(s.files) == 3 and s.truncated
    s = scan(project, max_visits=5)
    assert s.truncated and len(s.files) < len(LISTED)
    assert not scan(project, max_files=len(LISTED)).truncated  # exactly full is whole


def test_read_whole_text_or_one_line_error(project):
    assert folder_scan.read(project, "utf16.txt") == "Grüße aus UTF-16\n"
    assert folder_scan.read(project, "alias.py") == "print('hello world')\n"
    for rel in ("link.txt", "data.txt", "big.txt", "missing.py"):
        with pytest.raises(ReadError) as e:
            folder_scan.read(project, rel)
        assert rel in str(e.value) and "\n" not in str(e.value)


def test_scan_of_a_missing_folder_raises(tmp_path):
    with pytest.raises(OSError):
        scan(tmp_path / "nope")


# ---- the dialog -----------------------------------------------------------------------------
WORDS = {"main.py": 2, "README.md": 7, "keep.log": 4, "src/app.py": 4, "utf16.txt": 3}


def words(texts, done):
    """A token counter for the dialog: whitespace-separated words, answered at once."""
    done([len(t.split()) for t in texts])


class Later:
    """A counter that answers when the test says so, as the engine thread does."""

    def __init__(self):
        self.calls = []

    def __call__(self, texts, done):
        self.calls.append((texts, done))

    def answer(self):
        texts, done = self.calls[-1]
        words(texts, done)


def dialog(qtbot, root, count, free, **kw):
    from app.ui.dialogs.folder_dialog import FolderDialog

    d = FolderDialog(str(root), count, free, **kw)
    qtbot.addWidget(d)
    return d


def tick(d, *rels):
    from PySide6.QtCore import Qt

    by_path = tree_items(d.tree)
    for rel in rels:
        by_path[rel].setCheckState(0, Qt.Checked)


def test_dialog_shows_the_tree_and_what_was_skipped(qtbot, project):
    from PySide6.QtCore import Qt

    d = dialog(qtbot, project, words, 1000)
    assert d.windowTitle() == "Attach folder — proj"
    tree = tree_items(d.tree)
    assert sorted(p for p in tree if not p.endswith("/")) == sorted(LISTED)
    assert {"src/", "env/", "sub/"} <= set(tree)
    assert [d.tree.headerItem().text(c) for c in range(3)] == ["Name", "Size", "Tokens"]
    assert tree["src/"].flags() & Qt.ItemIsAutoTristate
    assert all(i.checkState(0) == Qt.Unchecked for i in tree.values())  # nothing ticked at first
    assert tree["main.py"].text(2) == "2" and tree["src/"].text(2) == "10"  # app.py 4, important.log 4, .gitignore 2
    skipped = d.skipped_label.text()
    for part in ("5 ignored by .gitignore", "2 binary", "1 too large", "1 linking outside the folder",
                 "node_modules", ".venv", "__pycache__"):
        assert part in skipped
    assert "too big to list whole" not in skipped
    assert not d.attach_btn.isEnabled() and d.selected() == []


def test_ticking_counts_against_the_free_context(qtbot, project):
    later = Later()
    d = dialog(qtbot, project, later, 100)
    assert len(later.calls) == 1 and len(later.calls[0][0]) == len(LISTED)  # every text, once
    assert tree_items(d.tree)["main.py"].text(2) == "…"
    tick(d, "main.py", "README.md", "src/app.py")
    assert "counting tokens" in d.total_label.text() and not d.attach_btn.isEnabled()
    later.answer()
    assert d.total_label.text() == "Ticked 3 files: 13 tokens · 100 free in the context"
    assert d.attach_btn.isEnabled()
    names = [(n, t) for n, t, _ in d.selected()]
    assert names == [("proj/src/app.py", "def f():\n    return 1\n"), ("proj/main.py", "print('hello world')\n"),
                     ("proj/README.md", "# Proj\n\nA small project for tests.\n")]
    assert d.selected()[1][2] == str((project / "main.py").resolve())


def test_what_does_not_fit_is_said_and_blocks_attach(qtbot, project):
    d = dialog(qtbot, project, words, 10)
    d.tick_all_btn.click()
    total = sum(len(folder_scan.read(project, rel).split()) for rel in LISTED)
    text = d.total_label.text()
    assert f"Ticked {len(LISTED)} files: {total:,} tokens" in text and "10 free" in text
    assert f"{total - 10:,} more" in text
    assert not d.attach_btn.isEnabled() and "10 free" in d.attach_btn.toolTip()
    assert "color" in d.total_label.styleSheet()
    d.untick_all_btn.click()
    tick(d, "keep.log", "src/important.log")  # 8 tokens fit in 10
    assert d.attach_btn.isEnabled() and d.total_label.styleSheet() == ""
    assert [n for n, _, _ in d.selected()] == ["proj/src/important.log", "proj/keep.log"]  # tree order


def test_ticking_a_folder_ticks_its_files_and_estimates_say_so(qtbot, project):
    d = dialog(qtbot, project, words, 1000, exact=False)
    tick(d, "src/")
    assert sorted(n for n, _, _ in d.selected()) == ["proj/src/.gitignore", "proj/src/app.py",
                                                    "proj/src/important.log"]
    assert d.total_label.text() == "Ticked 3 files: ≈10 tokens · 1,000 free in the context"
    assert tree_items(d.tree)["main.py"].text(2) == "≈2"


def test_a_truncated_listing_says_so(qtbot, project, monkeypatch):
    from app.ui.dialogs import folder_dialog

    monkeypatch.setattr(folder_dialog.folder_scan, "scan", lambda root: scan(root, max_files=2))
    d = dialog(qtbot, project, words, 1000)
    assert "too big to list whole" in d.skipped_label.text()
    assert len([p for p in tree_items(d.tree) if not p.endswith("/")]) == 2
