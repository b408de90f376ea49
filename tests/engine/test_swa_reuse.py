"""Prefix reuse must respect the sliding-window cache.

With `swa_full=False` llama.cpp's sliding-window layers keep only the newest positions; once
a long conversation has recycled the oldest cells, reusing an early cached prefix (a new chat
shares `<bos>` and the turn header) gives wrong logits. Every reply here must equal what a
fresh engine answers to the same conversation, baseline and MTP.
"""

from __future__ import annotations

import pytest

from engine.local.engine import Engine, GenerationConfig
from engine.local.runtime import LoadOptions

# n_ubatch 16: the sliding-window cache of the tiny model (window 16) holds 256 cells, so a
# conversation of a few hundred tokens recycles its oldest cells.
SMALL_CACHE = LoadOptions(n_batch=16, n_ubatch=16, n_ctx=2048)
LONG = "Hello world, this is a test of the sliding window cache " * 30


def _answer(engine, msgs, drafting, max_tokens=48):
    r = engine.run(engine.format_chat(msgs), GenerationConfig(max_tokens=max_tokens, spec="auto" if drafting else "none", draft_max=3))
    return r.tokens


def _fresh(paths, msgs, drafting, max_tokens=48, opts=SMALL_CACHE):
    e = Engine.load(paths[0], paths[1], opts)
    try:
        return _answer(e, msgs, drafting, max_tokens)
    finally:
        e.close()


@pytest.fixture(scope="module")
def pair(noisy):
    # the noisy target leans on attention more than the agreeing one, so stale cells show
    return noisy["target"], noisy[1.0]


@pytest.mark.parametrize("drafting", [False, True])
def test_new_chat_after_a_long_chat_equals_a_fresh_engine(pair, drafting):
    engine = Engine.load(*pair, SMALL_CACHE)
    try:
        _answer(engine, [{"role": "user", "content": LONG}], drafting, max_tokens=64)
        assert engine.rt.n_swa > 0
        short = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
        got = _answer(engine, short, drafting)
    finally:
        engine.close()
    assert got == _fresh(pair, short, drafting)


@pytest.mark.parametrize("drafting", [False, True])
def test_multi_turn_chat_with_replies_longer_than_the_window(pair, drafting):
    """Several turns, each reply longer than the window; then an edit of the first message
    (the cache is rolled back far past the recycled cells). Every turn equals a fresh engine."""
    engine = Engine.load(*pair, SMALL_CACHE)
    try:
        msgs = []
        for turn, text in enumerate(["Hello world, tell me about the model", "and the draft token",
                                     "Gemma speed test python function", "a b c d e f g"]):
            msgs.append({"role": "user", "content": text})
            got = _answer(engine, msgs, drafting, max_tokens=80)
            assert len(got) > engine.rt.n_swa
            assert got == _fresh(pair, msgs, drafting, max_tokens=80), f"turn {turn}"
            msgs.append({"role": "assistant", "content": engine.detokenize(got)})
        edited = [{"role": "user", "content": "Hello world, tell me about the code"}]
        assert _answer(engine, edited, drafting) == _fresh(pair, edited, drafting)
    finally:
        engine.close()


@pytest.mark.slow  # a long chat on Gemma 3 270M: about 10 s
def test_gemma3_new_chat_after_a_long_chat(gemma3_path):
    """The reported case on a real model: Gemma 3 270M (window 512)."""
    opts = LoadOptions(n_ctx=2048, n_batch=64, n_ubatch=64, n_threads=2)  # cache: 768 SWA cells
    engine = Engine.load(gemma3_path, None, opts)
    try:
        story = " ".join(f"Sentence number {i} of a long story about a lighthouse keeper." for i in range(70))
        _answer(engine, [{"role": "user", "content": story}], False, max_tokens=8)
        assert engine.rt.n_swa == 512
        assert len(engine.scheduler.slots[0].cached) > 768 + 100
        q = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
        got = _answer(engine, q, False, max_tokens=16)
    finally:
        engine.close()
    expected = _fresh((gemma3_path, None), q, False, max_tokens=16, opts=opts)
    assert got == expected
