"""The shaped test pairs of every Gemma 4 size (`tandem make-test-models --size`,
engine/testmodels/writer.py), written once per machine into ~/.cache/tandem/shaped and again
whenever the writer's code changes; the engine's, the server's and the window's size tests
share them. One of them is loaded at a time on this machine (`one_loaded`)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from .once import once

SIZES = ["e4b", "12b", "26b-a4b", "31b"]
# a size test's time limit: its turn at one_loaded (a wait of 311 s was seen under 3 workers) and its run
WAIT_AND_RUN = 1800


def _writer_key() -> str:
    """The test models' code: a pair written by other code is written again."""
    src = Path(__file__).resolve().parents[2] / "engine" / "testmodels"
    h = hashlib.sha256()
    for f in sorted(src.glob("*.py")):
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def shaped_pair(size: str) -> tuple[Path, Path]:
    """(target, drafter at full agreement) of `size`, written if not yet (30-60 s)."""
    from engine.testmodels import make_test_models

    where = Path.home() / ".cache" / "tandem" / "shaped" / f"{size}-{_writer_key()}"
    with once(f"shaped-{size}"):  # one worker writes it, the others find it written
        target, drafter = where / f"{size}-target.gguf", where / f"{size}-drafter-a1.gguf"
        if not (target.exists() and drafter.exists()):
            target, drafter = make_test_models(where, size, 1.0)
    return target, drafter


def one_loaded():
    """Held while a test has a shaped pair loaded, across the suite's workers: the memory plan
    gives the 31B shape 16.9 GB at its 32,768-token context, and two big pairs loaded at once by
    two workers, each seeing the memory free before the other took it, ran a 23 GB machine out of
    memory (the kernel killed a worker)."""
    return once("shaped-loaded")
