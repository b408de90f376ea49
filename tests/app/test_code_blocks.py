"""Code blocks in replies: their header (language, Copy with a visible "Copied ✓", Save as…,
Diff with the attached file a block rewrites), the side-by-side
diff and its Save over original, which writes only once the user confirms.

Qt's standard dialogs are patched to stand in for the user's answer; our own code is not."""

from __future__ import annotations

import os
import stat
import time

import pytest
from PySide6.QtCore import QUrl
from PySide6.QtWidgets import QFileDialog, QMessageBox

from app.ui.dialogs.diff_dialog import DiffDialog, save_code_as
from app.core.text_files import AttachedFile
from app.ui.widgets import MessageWidget

from ..support.code_samples import PY, RS
from ..support.widgets import click_link

CALC = ("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n"
        "def mul(a, b):\n    return a * b\n")
CALC_FIXED = CALC.replace("return a - b", "return a - b  # fixed").replace("def mul", "def times")


def reply(qtbot, text, files=()):
    w = MessageWidget("assistant", 1)
    qtbot.addWidget(w)
    w.attached_files = lambda: list(files)
    w.resize(700, 400)
    w.show()
    w.set_content(text)
    return w


def test_header_shows_language_and_links(qtbot):
    w = reply(qtbot, f"Two blocks:\n\n```python\n{PY}\n```\n\nand\n\n```rust\n{RS}\n```\n")
    text, html = w.body.toPlainText(), w.body.toHtml()
    assert "python   Copy   Save as…" in text and "rust   Copy   Save as…" in text
    for href in ("copy:0", "save:0", "copy:1", "save:1"):
        assert href in html
    assert "diff:" not in html and "Diff with" not in text  # nothing attached: nothing to compare


def test_copy_emits_the_code_and_says_copied_for_a_while(qtbot):
    w = reply(qtbot, f"```python\n{PY}\n```\n\n```rust\n{RS}\n```\n")
    w.COPIED_MS = 300
    copied = []
    w.copy_requested.connect(copied.append)
    click_link(qtbot, w, "copy:1")
    assert copied == [RS]
    text = w.body.toPlainText()
    assert text.count("Copied ✓") == 1 and text.index("Copied ✓") > text.index("python   Copy")  # block 1's
    w.refresh()  # a render meanwhile (a streaming reply's) keeps it
    assert w.body.toPlainText().count("Copied ✓") == 1
    qtbot.waitUntil(lambda: "Copied" not in w.body.toPlainText(), timeout=2000)
    assert w.body.toPlainText().count("Copy ") == 2


def test_copied_lasts_about_two_seconds(qtbot):
    w = reply(qtbot, f"```python\n{PY}\n```\n")
    t0 = time.monotonic()
    w.follow_link(QUrl("copy:0"))
    assert "Copied ✓" in w.body.toPlainText()
    qtbot.waitUntil(lambda: "Copied" not in w.body.toPlainText(), timeout=3500)
    assert time.monotonic() - t0 >= 1.8  # (a coarse Qt timer may end up to 5% early)


def test_a_model_link_that_looks_like_ours_keeps_its_text(qtbot):
    w = reply(qtbot, f"```python\n{PY}\n```\n\n[Copy](copy:0) and [x](save:7)")
    saved = []
    w.save_requested.connect(lambda *a: saved.append(a))
    w.follow_link(QUrl("copy:0"))
    assert w.body.toPlainText().count("Copied ✓") == 1 and "Copy and x" in w.body.toPlainText()
    w.follow_link(QUrl("save:7"))  # no block 7
    w.follow_link(QUrl("diff:0"))  # block 0 matches no file
    assert saved == []


@pytest.mark.parametrize("lang, code, suffix", [("python", PY, ".py"), ("rust", RS, ".rs"),
                                                ("", "some text", ".txt"), ("klingon", "qapla'", ".txt")])
def test_save_suggests_the_languages_suffix(qtbot, lang, code, suffix):
    w = reply(qtbot, f"```{lang}\n{code}\n```\n")
    saved = []
    w.save_requested.connect(lambda c, name: saved.append((c, name)))
    click_link(qtbot, w, "save:0")
    assert saved == [(code, "snippet" + suffix)]


def test_a_block_that_edits_an_attached_file_offers_a_diff(qtbot, tmp_path):
    from app.ui.chat_view import ChatView

    calc = AttachedFile("src/calc.py", CALC, str(tmp_path / "calc.py"))
    other = AttachedFile("notes.md", "# Notes\n\nnothing here\n")
    view = ChatView()
    qtbot.addWidget(view)
    view.attached_files = lambda: [other, calc]  # set after the view is built, as the window does
    diffs, saves = [], []
    view.diff_code.connect(lambda code, f, cut: diffs.append((code, f, cut)))
    view.save_code.connect(lambda code, name: saves.append((code, name)))
    w = view.add("assistant", 1)
    w.set_content(f"The fixed version:\n\n```python\n{CALC_FIXED}```\n\nA new helper:\n\n```python\n{PY}\n```\n")
    text = w.body.toPlainText()
    assert text.count("Diff with src/calc.py") == 1 and "diff:0" in w.body.toHtml() and "diff:1" not in w.body.toHtml()
    w.follow_link(QUrl("diff:0"))
    w.follow_link(QUrl("diff:1"))  # the helper is like no file: nothing
    assert diffs == [(CALC_FIXED.rstrip("\n"), calc, False)]
    w.follow_link(QUrl("save:0"))
    assert saves == [(CALC_FIXED.rstrip("\n"), "calc.py")]  # Save as… proposes the file's own name

    # the reply stopped (max tokens) inside the block: still a diff, said to be cut off
    part = CALC_FIXED[:CALC_FIXED.index("def times")]
    w.set_content(f"The fixed version:\n\n```python\n{part}")
    w.follow_link(QUrl("diff:0"))
    assert diffs[-1] == (part.rstrip("\n"), calc, True)


# ---- the diff and saving ---------------------------------------------------------------------
def test_diff_dialog_shows_both_sides_and_counts(qtbot):
    d = DiffDialog(CALC_FIXED, AttachedFile("calc.py", CALC))
    qtbot.addWidget(d)
    text = d.view.toPlainText()
    assert "calc.py as attached" in text and "Reply" in text
    assert "def mul(a, b):" in text and "def times(a, b):" in text and "# fixed" in text
    assert (d.added, d.removed) == (2, 2) and d.summary.text() == "+2 −2 lines"
    assert "bgcolor" in d.view.toHtml() or "background-color" in d.view.toHtml()  # changed lines tinted
    assert not d.save_over_btn.isEnabled()  # no source: nowhere to save over


def test_save_over_original_only_after_confirmation(qtbot, tmp_path, monkeypatch):
    path = tmp_path / "calc.py"
    path.write_text(CALC)
    os.chmod(path, 0o640)
    d = DiffDialog(CALC_FIXED, AttachedFile("calc.py", CALC, str(path)))
    qtbot.addWidget(d)
    assert d.save_over_btn.isEnabled()
    asked = []

    def answer(reply):
        def question(parent, title, text, *args):
            asked.append(text)
            return reply
        return question

    monkeypatch.setattr(QMessageBox, "question", answer(QMessageBox.No))
    d.save_over_btn.click()
    assert path.read_text() == CALC and asked and str(path) in asked[0] and "+2 −2" in asked[0]
    assert "changed" not in asked[0]
    monkeypatch.setattr(QMessageBox, "question", answer(QMessageBox.Yes))
    d.save_over_btn.click()
    assert path.read_text() == CALC_FIXED
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert "Saved over" in d.status.text()
    assert [p.name for p in tmp_path.iterdir()] == ["calc.py"]  # no temporary file left


def confirmation(qtbot, monkeypatch, code: str, attached: AttachedFile) -> str:
    """What Save over original asks before writing (answered No)."""
    d = DiffDialog(code, attached)
    qtbot.addWidget(d)
    asked = []
    monkeypatch.setattr(QMessageBox, "question", lambda parent, title, text, *a: asked.append(text) or QMessageBox.No)
    d.save_over()
    return asked[0]


def test_a_changed_original_is_said_in_the_confirmation(qtbot, tmp_path, monkeypatch):
    path = tmp_path / "calc.py"
    path.write_text(CALC + "# edited since\n")
    asked = confirmation(qtbot, monkeypatch, CALC_FIXED, AttachedFile("calc.py", CALC, str(path)))
    assert "changed on disk since it was attached" in asked
    assert path.read_text() == CALC + "# edited since\n"


def test_save_over_keeps_crlf_line_endings(qtbot, tmp_path, monkeypatch):
    crlf = CALC.replace("\n", "\r\n")
    path = tmp_path / "calc.py"
    path.write_bytes(crlf.encode())
    d = DiffDialog(CALC_FIXED, AttachedFile("calc.py", crlf, str(path)))
    qtbot.addWidget(d)
    monkeypatch.setattr(QMessageBox, "question", lambda *a: QMessageBox.Yes)
    assert d.save_over()
    assert path.read_bytes() == CALC_FIXED.replace("\n", "\r\n").encode()


def test_save_code_as_writes_the_file(qtbot, tmp_path, monkeypatch):
    target = tmp_path / "out" / "snippet.py"
    target.parent.mkdir()
    offered = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        lambda parent, caption, start, *a: offered.append(start) or (str(target), ""))
    assert save_code_as(None, PY, "snippet.py") == str(target)
    assert offered[0].endswith("snippet.py")
    assert target.read_text(encoding="utf-8") == PY + "\n"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a: ("", ""))  # cancelled
    assert save_code_as(None, "other", "x.py") is None
    assert target.read_text(encoding="utf-8") == PY + "\n"


def test_a_cut_off_block_never_saves_over_the_original(qtbot, tmp_path, monkeypatch):
    path = tmp_path / "calc.py"
    path.write_text(CALC)
    part = CALC_FIXED[:CALC_FIXED.index("def times")]  # what a reply stopped at max tokens holds
    d = DiffDialog(part, AttachedFile("calc.py", CALC, str(path)), cut_off=True)
    qtbot.addWidget(d)
    d.show()
    assert not d.save_over_btn.isEnabled() and d.save_as_btn.isEnabled()
    assert d.cut_off_note.isVisible()
    assert d.cut_off_note.text().startswith("This reply was cut off before its code block ended: saving it "
                                            "would truncate the file")
    asked = []
    monkeypatch.setattr(QMessageBox, "question", lambda parent, title, text, *a: asked.append(text) or QMessageBox.Yes)
    assert not d.save_over()  # called around the button: refused all the same, without asking
    assert path.read_text() == CALC and not asked and d.status.text().startswith("Not saved: This reply was cut off")
    whole = DiffDialog(CALC_FIXED, AttachedFile("calc.py", CALC, str(path)))
    qtbot.addWidget(whole)
    whole.show()
    assert whole.save_over_btn.isEnabled() and not whole.cut_off_note.isVisible()


def test_a_much_shorter_version_is_said_in_the_confirmation(qtbot, tmp_path, monkeypatch):
    path = tmp_path / "calc.py"
    path.write_text(CALC)
    short = "def add(a, b):\n    return a + b + 0\n"  # a closed block that drops most of the file
    asked = confirmation(qtbot, monkeypatch, short, AttachedFile("calc.py", CALC, str(path)))
    assert "much shorter: it removes 9 of the original's 10 lines and has 2 in all" in asked
    assert path.read_text() == CALC
    same_length = confirmation(qtbot, monkeypatch, CALC_FIXED, AttachedFile("calc.py", CALC, str(path)))
    assert "much shorter" not in same_length  # an edit of the same length: no word
