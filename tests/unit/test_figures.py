"""The README's figures are the benchmark files' (docs/figures/*.json, each written by the
script its `command` names): a table that no longer matches its file fails here instead of
misleading a reader."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["agent_session.json", "claude_code_session.json"])
def test_the_agent_session_tables_are_the_benchmark_files(name):
    sys.path.insert(0, str(ROOT))
    from scripts.bench_agent_session import markdown

    data = json.loads((ROOT / "docs" / "figures" / name).read_text("utf-8"))
    assert data["command"].startswith("scripts/bench_agent_session.py") and data["commit"] and data["date"]
    readme = (ROOT / "README.md").read_text("utf-8")
    assert markdown(data) in readme
    assert f"commit {data['commit']}, {data['date']}" in readme


@pytest.mark.parametrize("name", ["concurrency_26b_a4b.json"])
def test_the_several_clients_tables_are_the_benchmark_files(name):
    sys.path.insert(0, str(ROOT))
    from scripts.bench_concurrency import markdown

    data = json.loads((ROOT / "docs" / "figures" / name).read_text("utf-8"))
    assert data["command"].startswith("scripts/bench_concurrency.py") and data["commit"] and data["date"]
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
