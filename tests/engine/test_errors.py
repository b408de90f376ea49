"""Bad input gets one clear message in-process and never kills the process (from the CLI:
tests/e2e/test_cli_errors.py)."""

from __future__ import annotations

import shutil

import pytest

from engine.local.engine import Engine, GenerationConfig
from engine.errors import MTPUnavailableError

from ..support.bad_files import CASES, model_path


@pytest.mark.parametrize("target,drafter,exc,words", CASES)
def test_bad_files_raise_clear_errors_and_leave_process_healthy(target, drafter, exc, words, tiny, bad):
    t = model_path(target, tiny, bad)
    d = model_path(drafter, tiny, bad) if drafter else None
    with pytest.raises(exc) as err:
        Engine.load(t, d)
    msg = str(err.value)
    assert words.lower() in msg.lower() and "\n" not in msg
    # The process is healthy: a good pair still loads and generates.
    e = Engine.load(tiny["target"], tiny[1.0])
    try:
        assert e.run(e.tokenize("ok"), GenerationConfig(max_tokens=4)).stats.generated_tokens == 4
    finally:
        e.close()


def test_mtp_without_drafter_says_so(tiny):
    e = Engine.load(tiny["target"])
    try:
        with pytest.raises(MTPUnavailableError, match="drafter"):
            e.generate(e.tokenize("hi"), GenerationConfig(spec="mtp"))  # by name: no quiet baseline
        # auto: every source this model has, and without a drafter that is lookup
        assert e.run(e.tokenize("hi"), GenerationConfig(max_tokens=4)).stats.mode == "lookup"
    finally:
        e.close()


def test_copies_of_the_good_pair_load_and_draft(tiny, tmp_path):
    """A guard against the checks above being too eager: the good pair, copied under other
    names, loads as a pair and generates with its drafter drafting."""
    shutil.copy(tiny["target"], tmp_path / "t.gguf")
    shutil.copy(tiny[1.0], tmp_path / "d.gguf")
    e = Engine.load(tmp_path / "t.gguf", tmp_path / "d.gguf")
    try:
        s = e.run(e.tokenize("ok"), GenerationConfig(max_tokens=8, spec="mtp", draft_max=3)).stats
        assert (s.generated_tokens, s.mode) == (8, "mtp") and s.draft_tokens > 0
    finally:
        e.close()


def test_small_context_uses_the_batch_llama_cpp_chose(tiny):
    """n_ctx 300 made llama.cpp cap its batch at 300 while prompts were cut in chunks of 512:
    a long prompt aborted the process (GGML_ASSERT n_tokens_all <= n_batch)."""
    from engine.local.runtime import LoadOptions

    e = Engine.load(tiny["target"], tiny[1.0], LoadOptions(n_ctx=300))
    try:
        assert e.rt.n_batch <= e.n_ctx and e.rt.n_ubatch <= e.rt.n_batch
        prompt = e.tokenize("word " * 400)[: e.n_ctx - 20]
        assert len(prompt) > 300
        for mtp in (False, True):
            e.reset()
            r = e.run(prompt, GenerationConfig(max_tokens=8, spec="auto" if mtp else "none"))
            assert r.stats.generated_tokens == 8
    finally:
        e.close()
