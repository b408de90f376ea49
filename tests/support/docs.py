"""The pages a reader reads: the README, then docs/*.md. The tests that hold the pages to the
code (every command run, every table its figures file, the layout every module) read them here."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def pages() -> list[Path]:
    sys.path.insert(0, str(ROOT))
    from scripts.figures import pages as reader_pages  # one list of the pages, for the tests and the renderer

    return reader_pages()


def text() -> str:
    """Every page, the README first, each starting on a line of its own."""
    return "\n\n".join(p.read_text("utf-8") for p in pages())


def section(start: str) -> str:
    """From the first line `start` of any page to the next heading of the same level or above."""
    body = text()
    i = body.index(start)
    level = len(start) - len(start.lstrip("#"))
    rest = body[i + len(start):]
    ends = [rest.find("\n" + "#" * n + " ") for n in range(1, level + 1)] if level else []
    ends = [e for e in ends if e >= 0]
    return start + (rest[:min(ends)] if ends else rest)
