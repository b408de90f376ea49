"""The Linux one-folder bundle (PyInstaller) builds, starts its window under Xvfb, loads the
synthetic models and answers a prompt (packaging/build-linux.sh + smoke-linux.sh)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ..support.system_libs import need_xvfb

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # PyInstaller builds the bundle: minutes


def test_linux_bundle_builds_and_answers():
    need_xvfb()
    shutil.rmtree(ROOT / "dist" / "Tandem", ignore_errors=True)
    r = subprocess.run(["bash", str(ROOT / "packaging" / "smoke-linux.sh")], capture_output=True, text=True,
                       timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "smoke test: reply of" in out and "tok/s" in out and "MTP + lookup k auto" in out  # auto: both sources
    share = ROOT / "dist" / "Tandem" / "share"
    assert (share / "applications" / "io.github.tandem_chat.Tandem.desktop").exists()
    assert (share / "icons" / "hicolor" / "256x256" / "apps" / "io.github.tandem_chat.Tandem.png").exists()
