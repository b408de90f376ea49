"""Fresh-machine proof: the built wheel installs into a new virtual environment outside the
source tree and runs (packaging/check-wheel.sh)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # builds the wheel and installs it into a new environment: minutes
def test_wheel_installs_and_runs_in_a_fresh_venv():
    if not (ROOT / ".venv" / "llama-wheel.txt").exists():
        pytest.skip("run packaging/install.sh first (it records the llama-cpp-python wheel it built)")
    r = subprocess.run(["bash", str(ROOT / "packaging" / "check-wheel.sh")], capture_output=True, text=True,
                       timeout=1200)
    built = sorted(p.suffix for p in (ROOT / "dist").glob("tandem_chat-*"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"tandem {__import__('engine').__version__}" in r.stdout and "wheel ok:" in r.stdout and "wheel check passed" in r.stdout
    assert built == [".gz", ".whl"]


def test_the_installer_says_at_once_that_python_3_10_is_too_old(tmp_path):
    """pyproject asks for Python 3.11 (app/tools/results.py uses BaseExceptionGroup, a 3.11 builtin;
    it used to promise 3.10, where every MCP start-up error became a NameError). The installer
    says so before it creates anything or compiles llama.cpp for minutes."""
    import shutil

    py310 = shutil.which("python3.10")
    if py310 is None:
        pytest.skip("no python3.10 on this machine")
    r = subprocess.run(["bash", str(ROOT / "packaging" / "install.sh")], capture_output=True, text=True, timeout=60,
                       env={**__import__("os").environ, "PYTHON": py310})
    assert r.returncode == 2 and "needs Python 3.11 or newer" in r.stderr and "PYTHON=python3.11" in r.stderr
    assert 'requires-python = ">=3.11"' in (ROOT / "pyproject.toml").read_text()
