"""The pages' figures are the benchmark files' (docs/figures/*.json, each written by the script
its `command` names): a table that is not its file's fails here instead of misleading a reader,
and so does a table of measured figures that comes from no file."""

from __future__ import annotations

import json
import re
import shutil
import sys

import pytest

from ..support import docs

sys.path.insert(0, str(docs.ROOT))
from scripts import figures  # noqa: E402

FIGURE = re.compile(r"\|\s*[^|]*\d+\.\d+")  # a table cell holding a measured number


def _tables(text: str) -> list[tuple[int, str]]:
    """Each Markdown table of a page: where it starts, and its lines."""
    out, start = [], None
    lines = text.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    for i, line in enumerate(lines + [""]):
        if line.startswith("|") and start is None:
            start = i
        elif not line.startswith("|") and start is not None:
            out.append((offsets[start], "\n".join(lines[start:i])))
            start = None
    return out


@pytest.mark.parametrize("page", docs.pages(), ids=lambda p: p.name)
def test_every_table_of_figures_is_its_file(page):
    text = page.read_text("utf-8")
    blocks = figures.shown(text)
    for name, start, end in blocks:
        assert text[start:end] == figures.render(name), f"{page.name}: the table of {name} is not its file's " \
                                                        f"(.venv/bin/python scripts/figures.py writes it again)"
    starts = {start for _, start, _ in blocks}
    loose = [table.split("\n")[0] for at, table in _tables(text) if FIGURE.search(table) and at not in starts]
    assert loose == [], f"{page.name}: tables of figures from no docs/figures file"


def test_every_figures_file_is_shown_and_names_its_command_and_commit():
    shown = {name for page in docs.pages() for name, _, _ in figures.shown(page.read_text("utf-8"))}
    files = {p.name for p in figures.FIGURES.glob("*.json")} | {p.name + "/" for p in figures.FIGURES.iterdir()
                                                               if p.is_dir()}
    assert shown == files
    for name in files:
        for data in (figures.load(name) if name.endswith("/") else [figures.load(name)]):
            assert data["command"].startswith("scripts/") and data["commit"] and data["date"] and data["machine"]


def test_the_every_size_table_is_gpu_bench_shs():
    """gpu_bench.sh writes its table.md beside the sizes' files: the page's table is that one."""
    assert (figures.FIGURES / "sizes-cpu" / "table.md").read_text("utf-8").strip() == figures.render("sizes-cpu/")


def test_a_stale_figure_fails(tmp_path, monkeypatch):
    """A figure changed in the file and not on the page (or the other way) is found."""
    name = "draft_head.json"
    data = figures.load(name)
    data["pairs"]["e2b"]["full"]["mtp_tps"] += 1.0
    shutil.copytree(figures.FIGURES, tmp_path / "figures")
    (tmp_path / "figures" / name).write_text(json.dumps(data), "utf-8")
    page = next(p.read_text("utf-8") for p in docs.pages() if f"<!-- figures: {name} -->" in p.read_text("utf-8"))
    monkeypatch.setattr(figures, "FIGURES", tmp_path / "figures")
    (_, start, end), = [b for b in figures.shown(page) if b[0] == name]
    assert page[start:end] != figures.render(name)
    assert figures.written(page) != page and figures.render(name) in figures.written(page)
