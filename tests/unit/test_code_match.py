"""Which attached file a code block in a reply rewrites (by name in the fence or the text before
it, or by similarity), and where a block whose fence never closed is cut: no widgets."""

from __future__ import annotations

from app.core.code_match import match_file
from app.core.text_files import AttachedFile
from app.ui.render import cut_off, split_code

from ..support.code_samples import PY, RS


def test_a_block_whose_fence_never_closed_is_cut_off():
    closed = f"Fixed:\n\n```python\n{PY}\n```\n\nand then\n\n```rust\n{RS}"
    parts = [p for p in split_code(closed) if p.kind == "code"]
    assert [(p.text, p.closed) for p in parts] == [(PY, True), (RS, False)]
    assert not cut_off(closed, PY) and cut_off(closed, RS)
    assert not cut_off(f"```python\n{PY}\n```", PY)  # closed at the very end of the reply
    assert cut_off(f"```python\n{PY}\n``", PY + "\n``")  # half a closing fence closes nothing


# ---- which file a block rewrites -------------------------------------------------------------
A = AttachedFile("app/main.py", "import sys\n\nprint(sys.argv)\n")
B = AttachedFile("util.py", "def helper():\n    return 42\n")
FILES = [A, B]


def test_match_by_name_in_the_fence_info():
    assert match_file("x = 1", "python title=util.py", "", FILES) is B
    assert match_file("x = 1", "python main.py", "", FILES) is A  # a basename will do


def test_match_by_name_in_the_text_before():
    assert match_file("x = 1", "python", "Change main.py like this:\n\n", FILES) is A
    assert match_file("x = 1", "python", "In util.py, then in `app/main.py`:\n", FILES) is A  # the nearest
    assert match_file("x = 1", "python", "data.py and util.pyc are unrelated\n", FILES) is None
    assert match_file("x = 1", "python", "util.py" + " blah" * 100, FILES) is None  # too far back


def test_match_by_similarity():
    edited = "def helper():\n    return 43\n"
    assert match_file(edited, "python", "Here:\n", FILES) is B
    assert match_file("totally\ndifferent\ncode\n", "", "", FILES) is None
    assert match_file(edited, "python", "", []) is None


def test_an_identical_block_is_no_edit():
    assert match_file(B.text, "python", "util.py, as you sent it:\n", FILES) is None
    assert match_file(B.text.rstrip() + "\n\n", "", "", FILES) is None
