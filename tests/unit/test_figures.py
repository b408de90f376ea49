"""The README's figures are the benchmark files' (docs/figures/*.json, each written by the
script its `command` names): a table that no longer matches its file fails here instead of
misleading a reader."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name, script", [("agent_session.json", "bench_agent_session"),
                                          ("claude_code_session.json", "bench_agent_session"),
                                          ("concurrency_26b_a4b.json", "bench_concurrency"),
                                          ("draft_head.json", "bench_draft_head")])
def test_the_readme_tables_are_the_benchmark_files(name, script):
    """Each file's table (its script's `markdown`) is in the README, with the file's commit and date."""
    import importlib

    sys.path.insert(0, str(ROOT))
    markdown = importlib.import_module(f"scripts.{script}").markdown

    data = json.loads((ROOT / "docs" / "figures" / name).read_text("utf-8"))
    assert data["command"].startswith(f"scripts/{script}.py") and data["commit"] and data["date"]
    readme = (ROOT / "README.md").read_text("utf-8")
    assert markdown(data) in readme
    assert f"commit {data['commit']}, {data['date']}" in readme


def test_the_every_size_table_is_the_benchmark_files():
    sys.path.insert(0, str(ROOT))
    from scripts.gpu_bench_table import table

    files = [json.loads((ROOT / "docs" / "figures" / "sizes-cpu" / f"{s}.json").read_text("utf-8"))
             for s in ("e4b", "12b", "26b-a4b", "31b")]
    assert all(d["command"].startswith("scripts/bench_concurrency.py") and d["commit"] for d in files)
    readme = (ROOT / "README.md").read_text("utf-8")
    assert table(files) in readme
    assert (ROOT / "docs" / "figures" / "sizes-cpu" / "table.md").read_text("utf-8").strip() == table(files)
