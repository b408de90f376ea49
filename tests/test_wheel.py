"""Fresh-machine proof: the built wheel installs into a new virtual environment outside the
source tree and runs (packaging/check-wheel.sh)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_installs_and_runs_in_a_fresh_venv():
    if not (ROOT / ".venv" / "llama-wheel.txt").exists():
        pytest.skip("run packaging/install.sh first (it records the llama-cpp-python wheel it built)")
    r = subprocess.run(["bash", str(ROOT / "packaging" / "check-wheel.sh")], capture_output=True, text=True,
                       timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"tandem {__import__('engine').__version__}" in r.stdout and "wheel ok:" in r.stdout and "wheel check passed" in r.stdout
    assert sorted(p.suffix for p in (ROOT / "dist").iterdir()) == [".gz", ".whl"]
