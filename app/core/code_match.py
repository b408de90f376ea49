"""Which attached file a reply's code block is a new version of: the one named next to the
block, else the most similar one. No Qt here.

This runs on every Markdown render of a reply (at most once a second while it streams), so
the similarity search is bounded: cheap upper bounds first, texts past MAX_LINES by name only."""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from functools import lru_cache
from pathlib import PurePosixPath

from .text_files import AttachedFile, suffix_for

BEFORE_CHARS = 300  # how far back a reply's text may name the file its next block rewrites
MIN_RATIO = 0.5  # less alike than this, a block is new code, not a version of the file
MAX_LINES = 5000  # SequenceMatcher is quadratic at worst: bigger texts are matched by name only


def basename(name: str) -> str:
    return PurePosixPath(name.replace("\\", "/")).name


def _lines(text: str) -> list[str]:
    """Lines as compared: trailing spaces, line endings and blank lines at either end make no edit."""
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    start = next((i for i, line in enumerate(lines) if line), len(lines))
    return lines[start:]


@lru_cache(maxsize=64)
def _file_lines(f: AttachedFile) -> tuple:
    return tuple(_lines(f.text))


def _mentioned(name: str, text: str) -> int:
    """Where the last mention of `name` in `text` ends (-1: none). A whole name only: "a.py"
    is not in "data.py" nor in "a.pyc", but is in "src/a.py" and "`a.py`."."""
    last = -1
    for m in re.finditer(r"(?<![\w.-])" + re.escape(name) + r"(?![\w-]|\.\w)", text, re.I):
        last = m.end()
    return last


def _named(info: str, before: str, files: tuple) -> AttachedFile | None:
    """The file the fence's info string names, else the one the text names last (nearest the
    block); a full name beats a bare basename mentioned at the same place."""
    best, best_key = None, None
    for f in files:
        for name in dict.fromkeys((f.name, basename(f.name))):
            if not name:
                continue
            key = (_mentioned(name, info) >= 0, _mentioned(name, before), len(name))
            if (key[0] or key[1] >= 0) and (best_key is None or key > best_key):
                best, best_key = f, key
    return best


@lru_cache(maxsize=64)
def _most_similar(code: str, files: tuple) -> AttachedFile | None:
    """The file most like the block (ratio ≥ MIN_RATIO), cheap bounds before the real ratio.
    Cached: while a reply streams, its finished blocks are compared again at every render."""
    new = _lines(code)
    if not new or len(new) > MAX_LINES:
        return None
    sm = SequenceMatcher(None)
    sm.set_seq2(new)  # the block is the same against every file: its index is built once
    best, best_ratio = None, MIN_RATIO
    for f in files:
        old = _file_lines(f)
        if not old or len(old) > MAX_LINES:
            continue
        sm.set_seq1(old)
        if sm.real_quick_ratio() < best_ratio or sm.quick_ratio() < best_ratio:
            continue
        ratio = sm.ratio()
        if ratio > best_ratio or (best is None and ratio >= best_ratio):
            best, best_ratio = f, ratio
    return best


def match_file(code: str, lang: str, before: str, files: list[AttachedFile]) -> AttachedFile | None:
    """The attached file `code` is a new version of, or None. `lang` is the fence's info string
    (its language label and whatever follows, e.g. "python title=app.py"); `before` the reply's
    text just before the block. A block identical to an attached file is a quote, no edit."""
    files = tuple(files)
    if not files or not code.strip():
        return None
    new = tuple(_lines(code))
    if any(_file_lines(f) == new for f in files):
        return None
    return _named(lang, before[-BEFORE_CHARS:], files) or _most_similar(code, files)


def suggested_name(lang: str, match: AttachedFile | None = None) -> str:
    """What Save as… proposes: the matched file's name, else "snippet" with the language's suffix."""
    if match is not None and basename(match.name):
        return basename(match.name)
    suffix = suffix_for(lang)
    return "snippet" + suffix if suffix.startswith(".") else suffix  # "Dockerfile" is a whole name
