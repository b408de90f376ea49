"""Continuous batching: several generations decode together in one context (one target batch
per step), each equal to what it gets alone except at measured near-ties, each with its own
stop, stats and cached prefix."""

from __future__ import annotations

import threading
import time

import pytest

from engine.local.engine import Engine, GenerationConfig
from engine.local.runtime import LoadOptions

from ..support.prompts import PROMPTS

TOL = 0.05  # logit gap below which two tokens count as tied (the tiny models' batch noise is ~1e-3)


@pytest.fixture(scope="module")
def batched(tiny):
    e = Engine.load(tiny["target"], tiny[0.7], LoadOptions(n_seq=4))
    yield e
    e.close()


def run_together(engine, prompts, configs):
    """Every generation started at once on its own thread; their results and event times."""
    out = [None] * len(prompts)
    times = [[] for _ in prompts]
    go = threading.Barrier(len(prompts))

    def one(i):
        go.wait()
        toks, answer, last = [], "", None
        for ev in engine.generate(prompts[i], configs[i]):
            toks += ev.tokens
            answer += ev.answer
            times[i].append((time.perf_counter(), len(ev.tokens)))
            last = ev
        out[i] = (toks, answer, last.stats)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out, times


def same_or_near_tie(engine, prompt, got, want):
    """True when equal; a divergence must sit where the solo decoding's top two nearly tie."""
    if got == want:
        return "identical"
    j = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    margin = engine.next_token_margin(prompt, want[:j])
    assert margin < TOL, f"diverged at token {j} with a top-2 gap of {margin:.4f}: not a near-tie"
    return "near-tie"


@pytest.mark.parametrize("spec", ["none", "mtp", "auto"])
def test_concurrent_greedy_equals_solo(batched, spec):
    """8 generations on 4 sequences (4 run, 4 wait for a slot), different prompts and lengths,
    crossing the sliding window (16 positions) at different steps: each equals its solo run."""
    e = batched
    prompts = [e.tokenize(p * (1 + i % 3)) for i, p in enumerate(PROMPTS)]
    configs = [GenerationConfig(max_tokens=40 + 9 * i, spec=spec,
                                draft_max=3 if spec == "mtp" else "auto") for i in range(len(prompts))]
    solo = []
    for p, c in zip(prompts, configs):
        e.reset()
        solo.append(e.run(p, c).tokens)
    e.reset()
    together, _ = run_together(e, prompts, configs)
    outcomes = [same_or_near_tie(e, p, got[0], want) for p, got, want in zip(prompts, together, solo)]
    assert outcomes.count("near-tie") <= 2, outcomes
    # per-request stats are exact: each counts its own tokens
    for (toks, _, stats), c in zip(together, configs):
        assert stats.generated_tokens == len(toks) <= c.max_tokens
        assert stats.finish_reason in ("stop", "length")
        if spec == "mtp":
            assert stats.draft_tokens > 0 and 0 <= stats.accepted_tokens <= stats.draft_tokens


def test_long_prompt_does_not_stall_the_others(batched):
    """A long prompt arriving while three replies stream is prefilled in chunks between their
    steps: they keep streaming while it is read."""
    e = batched
    e.reset()
    long_prompt = e.tokenize("the quick brown fox jumps over the lazy dog " * 300)[:2700]
    shorts = [e.tokenize(p) for p in PROMPTS[:3]]
    cfg = GenerationConfig(max_tokens=400, spec="none")
    events = {i: [] for i in range(4)}
    started = threading.Event()
    submitted = {}

    def short(i):
        for ev in e.generate(shorts[i], cfg):
            events[i].append(time.perf_counter())
            if len(events[i]) == 5:
                started.set()

    threads = [threading.Thread(target=short, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    assert started.wait(60)
    submitted["t"] = time.perf_counter()
    first = None
    for ev in e.generate(long_prompt, GenerationConfig(max_tokens=4, spec="none")):
        first = first or time.perf_counter()
    for t in threads:
        t.join(120)
    during = [sum(submitted["t"] < t < first for t in events[i]) for i in range(3)]
    # the prompt takes ~2700 / 128 steps; each short reply gets a token in every one of them
    assert min(during) >= 10, during


def test_stop_stops_only_its_own(batched):
    """Dropping one stream (a Stop, a client gone) ends that generation after its step; the
    others run to their end, and the slot is free for the next request."""
    e = batched
    e.reset()
    prompts = [e.tokenize(p) for p in PROMPTS[:3]]
    cfg = GenerationConfig(max_tokens=200, spec="none")
    streams = [e.generate(p, cfg) for p in prompts]
    got = [[] for _ in streams]
    for _ in range(5):
        for i, s in enumerate(streams):
            got[i] += next(s).tokens
    streams[1].close()
    for i in (0, 2):
        for ev in streams[i]:
            got[i] += ev.tokens
            last = ev
        assert last.finish_reason == "length" and last.stats.generated_tokens == 200
    assert e.scheduler.idle(30)
    assert not any(s.busy for s in e.scheduler.slots)


def test_next_turn_goes_to_its_cached_prefix(batched):
    """A conversation's next request goes to the slot that holds it: only the new suffix is
    decoded, even after other conversations used the other slots (whose sliding-window
    cells llama.cpp recycles meanwhile)."""
    e = batched
    e.reset()
    prompts = [e.tokenize(p) for p in PROMPTS[:3]]
    replies = [e.run(p, GenerationConfig(max_tokens=12, spec="none")) for p in prompts]
    for p, r in zip(prompts, replies):
        nxt = p + r.tokens + e.tokenize(" and then?", add_special=False)
        res = e.run(nxt, GenerationConfig(max_tokens=4, spec="none"))
        # everything but the reply's last token (never decoded) was cached
        assert res.stats.reused_tokens == len(p) + len(r.tokens) - 1, (res.stats.reused_tokens, len(p))


def test_requests_sharing_the_context_never_cut_each_other_short(tiny):
    """The sequences share one pool of context cells. A request reserves its prompt and
    max_tokens, so four replies that together need more than the context each get what they
    get alone (the ones that do not fit beside the running ones wait), never a reply cut
    short by the others filling the context (as a new user found: 'length' at 667 of 1500)."""
    e = Engine.load(tiny["target"], tiny[0.7], LoadOptions(n_seq=4, n_ctx=1024))
    try:
        prompts = [e.tokenize(p * 3) for p in PROMPTS[:4]]
        cfg = GenerationConfig(max_tokens=400, spec="none")
        solo = []
        for p in prompts:
            e.reset()
            solo.append(e.run(p, cfg))
        assert all(r.stats.finish_reason == "length" for r in solo)
        e.reset()
        together, _ = run_together(e, prompts, [cfg] * 4)
        for (toks, _, stats), alone in zip(together, solo):
            assert stats.finish_reason == "length" and toks == alone.tokens, stats.finish_reason
    finally:
        e.close()
