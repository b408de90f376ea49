"""scripts/bench_verify_cost.py on the tiny pair's target: a table per model of the batch's cost
by rows and sequences, each against one plain step (which is 1.00x by definition)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_the_verify_cost_table(tiny):
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_verify_cost.py"), "-m", str(tiny["target"]),
                        "--rows", "1", "3", "--seqs", "1", "2", "--repeats", "2"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{tiny['target'].name}: ms per batch") and "3 rows" in lines[1]
    one, two = lines[2].split(), lines[3].split()
    assert one[0] == "1" and one[2] == "(1.00x)" and two[0] == "2" and len(two) == 7
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_verify_cost.py"), "-m", str(tiny["target"]),
                          "--rows", "2"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "must include 1" in bad.stderr
