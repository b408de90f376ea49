"""Every llama.cpp computation of a loaded pair runs on the scheduler's one thread: warm-up and
the measurements too. llama.cpp's CPU backend (built with OpenMP) gives each thread that
computes a team of its own worker threads, and they stay; two teams on a 2-core machine made
every later decode of the 26B-A4B shape twice as slow (`tandem serve`'s warm-up on the main
thread: 24 against 50 tok/s without a drafter)."""

from __future__ import annotations

import os
import threading

import pytest

from engine.generation import GenerationConfig
from engine.local.engine import Engine
from engine.local.options import LoadOptions

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")


def threads() -> int:
    """The process's threads that Python did not start (llama.cpp's and OpenMP's)."""
    return len(os.listdir("/proc/self/task")) - threading.active_count()


def test_warm_up_and_measurements_add_no_threads_of_their_own(tiny):
    e = Engine.load(tiny["target"], tiny[1.0], LoadOptions(n_ctx=1024, n_threads=2, cache_ram_mib=0))
    try:
        prompt = e.prompts.tokenize("Hello there")
        e.run(prompt, GenerationConfig(max_tokens=4, spec="none"))  # the scheduler's thread and its team
        before = threads()
        e.warm_up()
        e.next_token_margin(prompt, [])
        e.run(prompt, GenerationConfig(max_tokens=4))
        assert threads() == before
    finally:
        e.close()
