"""The figures files (docs/figures/*.json) and the pages' tables made from them: where a file
came from (the command that wrote it, the commit, the day and the machine), and the tables of
every page written again from their files (`.venv/bin/python scripts/figures.py`)."""

from __future__ import annotations

import importlib
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def provenance(script: str) -> dict:
    """`script`: the path the README runs it by (scripts/NAME.py); its arguments are this run's."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    # code that is not in the commit it names would make the figure's provenance untrue
    changed = subprocess.run(["git", "status", "--porcelain", "--", "engine", "scripts", "packaging", "resources"],
                             cwd=ROOT, capture_output=True, text=True).stdout.strip()
    commit += " with uncommitted changes" if changed else ""
    return {"command": " ".join([script] + sys.argv[1:]), "commit": commit, "date": time.strftime("%Y-%m-%d"),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs" + _gpu()}


def save(path: str | None, data: dict) -> None:
    """A figures file (the run's `--json OUT`), as every benchmark writes it; no path, no file."""
    if path:
        Path(path).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def _gpu() -> str:
    """", NAME" of the GPU llama.cpp would use, where this build sees one."""
    sys.path.insert(0, str(ROOT))
    from engine.models.hardware import free_memory

    free, name, _ = free_memory()
    return f", {name}" if free else ""


# --- the pages' tables, from these files ---------------------------------------------------------
# A page shows a figures file as a marker line, then the table its script's `markdown` makes of
# it and a caption saying where and when it was measured (a directory: gpu_bench.sh's one table
# of its sizes, which carries its own caption). `python scripts/figures.py` writes every table
# again after a run; tests/unit/test_figures.py fails on any table that is not its file's.

MARKER = re.compile(r"^<!-- figures: (\S+) -->\n", re.M)
FIGURES = ROOT / "docs" / "figures"
SIZE_ORDER = ("tiny", "e2b", "e4b", "12b", "26b-a4b", "31b")


def load(name: str):
    """The file `name` under docs/figures, or for a directory (`sizes-cpu/`) its sizes' files in order."""
    path = FIGURES / name
    if name.endswith("/"):
        files = sorted(path.glob("*.json"), key=lambda p: SIZE_ORDER.index(p.stem) if p.stem in SIZE_ORDER else 99)
        return [json.loads(p.read_text("utf-8")) for p in files]
    return json.loads(path.read_text("utf-8"))


def render(name: str) -> str:
    """What a page shows for `name`: the table its script makes of it, and where it came from."""
    sys.path.insert(0, str(ROOT))
    data = load(name)
    if isinstance(data, list):
        from scripts.gpu_bench_table import table

        return table(data)
    module = importlib.import_module("scripts." + Path(data["command"].split()[0]).stem)
    return (f"{module.markdown(data)}\n\n*Measured {data['date']} at commit {data['commit']} on {data['machine']}: "
            f"`docs/figures/{name}`*")


def shown(text: str) -> list[tuple[str, int, int]]:
    """Each figures block of a page: (name, where its table starts, where its caption ends)."""
    out = []
    for m in MARKER.finditer(text):
        start = m.end()
        end = text.find("\n\n", text.find("\n\n", start) + 2)  # the table, a blank line, the caption
        out.append((m.group(1), start, len(text) if end < 0 else end))
    return out


def written(text: str) -> str:
    """The page with every figures block rendered again from its file."""
    for name, start, end in reversed(shown(text)):
        text = text[:start] + render(name) + text[end:]
    return text


def pages() -> list[Path]:
    """The pages a reader reads: the README, then docs/*.md (tests/support/docs.py reads these too)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def main() -> int:
    for page in pages():
        before = page.read_text("utf-8")
        after = written(before)
        if after != before:
            page.write_text(after, "utf-8")
            print(f"wrote {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
