"""Where a figures file (docs/figures/*.json, the README's tables) came from: the command that
wrote it, the commit, the day and the machine. tests/unit/test_figures.py checks the README
names the commit and date of each file it shows."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def provenance(script: str) -> dict:
    """`script`: the path the README runs it by (scripts/NAME.py); its arguments are this run's."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    return {"command": " ".join([script] + sys.argv[1:]), "commit": commit, "date": time.strftime("%Y-%m-%d"),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs" + _gpu()}


def _gpu() -> str:
    """", NAME" of the GPU llama.cpp would use, where this build sees one."""
    sys.path.insert(0, str(ROOT))
    from engine.models.hardware import free_memory

    free, name, _ = free_memory()
    return f", {name}" if free else ""
