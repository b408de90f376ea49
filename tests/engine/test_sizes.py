"""Every Gemma 4 size by its shape (`tandem make-test-models --size`, engine/testmodels/writer.py):
E4B with its KV-sharing layers, per-layer embeddings and double-wide MLPs; 12B and 31B with 8
and 16 KV heads and a 1024-token window over 48 and 60 layers; 26B-A4B's 128 experts, 8 per
token. Each on the engine's real path: MTP (fixed and auto draft lengths) and lookup drafting
give the baseline's greedy output, four sequences decoding together give what each gets alone,
sampling under drafting keeps the target's distribution, a grammar holds under drafting, and
the prompt cache reuses a conversation that parts from a
cached one beyond the window (its checkpoints). Slow lane: each pair is written once per
machine (30-60 s) and decodes at 15-40 tokens a second on 2 cores."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from engine.local.engine import Engine, GenerationConfig
from engine.local.runtime import LoadOptions

from ..support.shaped import SIZES, WAIT_AND_RUN, one_loaded, shaped_pair
from .test_batching import run_together, same_or_near_tie

pytestmark = [pytest.mark.slow, pytest.mark.timeout(WAIT_AND_RUN)]
OPTS = LoadOptions(n_ctx=4096, n_batch=128, n_ubatch=128, n_threads=2, cache_disk_mib=0)
WINDOW_SIZES = {"e4b", "26b-a4b"}  # a 512 window with KV-sharing layers; a 1024 one
ASKS = ["Write a Python function that reverses a list.", "What is the capital of France?",
        "Explain speculative decoding in one sentence.", "List three prime numbers."]


@pytest.fixture(scope="module", params=SIZES)
def shaped(request):
    """(size, engine) of a shaped pair at full agreement: four sequences, 4096 cells, micro-batches
    of 128 (the sliding-window layers keep window + 128 cells), both cores (these graphs are
    large enough that the conftest's one thread per engine would only slow them)."""
    size = request.param
    target, drafter = shaped_pair(size)
    with one_loaded():
        engine = Engine.load(target, drafter, replace(OPTS, n_seq=4))
        engine.paths = (target, drafter)
        yield size, engine
        engine.close()


def chat(engine, ask: str) -> list[int]:
    return engine.format_chat([{"role": "user", "content": ask}])


def test_drafting_gives_the_baselines_greedy_output(shaped):
    size, e = shaped
    p = chat(e, ASKS[0])
    e.reset()
    base = e.run(p, GenerationConfig(max_tokens=24, spec="none")).tokens
    for spec, k in (("mtp", 3), ("auto", "auto"), ("lookup", "auto")):
        e.reset()
        r = e.run(p, GenerationConfig(max_tokens=24, spec=spec, draft_max=k))
        assert same_or_near_tie(e, p, r.tokens, base) == "identical", (size, spec)
        if spec != "lookup":
            assert r.stats.draft_tokens > 0 and r.stats.accepted_tokens > 0, (size, spec)


def test_sampling_under_drafting_keeps_the_targets_distribution(shaped):
    """The drafted positions (the second and third token) of 150 seeded samples with MTP and
    without are one distribution by a chi-square test (test_sampling.py: its power, on the
    tiny pair with thousands)."""
    from collections import Counter

    from engine.sampling import SamplingParams

    from ..support.stats import chi2_pvalue

    size, e = shaped
    p = chat(e, ASKS[2])
    sp = SamplingParams(temperature=3.0, top_k=4, top_p=1.0)
    arms = {}
    for spec in ("none", "mtp"):
        e.reset()
        runs = [e.run(p, GenerationConfig(max_tokens=3, spec=spec, draft_max=2, sampling=sp, seed=seed))
                for seed in range(150)]
        arms[spec] = [tuple(r.tokens) for r in runs]
        if spec == "mtp":
            assert all(r.stats.draft_tokens > 0 for r in runs), size  # each drafted
    for pos in (1, 2):
        pv = chi2_pvalue(Counter(t[pos] for t in arms["none"]), Counter(t[pos] for t in arms["mtp"]))
        assert pv > 1e-3, (size, pos, pv)


def test_four_sequences_together_give_what_each_gets_alone(shaped):
    size, e = shaped
    prompts = [chat(e, a) for a in ASKS]
    configs = [GenerationConfig(max_tokens=12 + 4 * i, spec="auto") for i in range(len(prompts))]
    solo = []
    for p, c in zip(prompts, configs):
        e.reset()
        solo.append(e.run(p, c).tokens)
    e.reset()
    together, _ = run_together(e, prompts, configs)
    outcomes = [same_or_near_tie(e, p, got[0], want) for p, got, want in zip(prompts, together, solo)]
    assert outcomes.count("near-tie") <= 1, (size, outcomes)


def test_a_grammar_holds_under_drafting(shaped):
    size, e = shaped
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    p = chat(e, ASKS[3])
    e.reset()
    base = e.run(p, GenerationConfig(max_tokens=16, spec="none", json_schema=schema)).tokens
    e.reset()
    r = e.run(p, GenerationConfig(max_tokens=16, spec="auto", json_schema=schema))
    assert r.tokens == base, size
    assert isinstance(json.loads(r.answer)["n"], int), r.answer


def test_a_conversation_parting_beyond_the_window_is_read_from_a_checkpoint(shaped):
    """A long system prompt, then two different long questions, on one sequence (its
    sliding-window layers keep window + 128 cells, 640 or 1152): where the second parts from the
    first, the cells were recycled while the first was read, so it reads again from the
    checkpoint at its turn, and answers as a cold engine does."""
    size, shared = shaped
    if size not in WINDOW_SIZES:
        pytest.skip("a window of 1024 is 26b-a4b's too: 12b and 31b read these prompts in 2.5 and 5 min")
    e = Engine.load(*shared.paths, replace(OPTS, n_seq=1))
    try:
        system = {"role": "system", "content": "You are a careful assistant. " + "Check every step. " * 100}
        filler = " Keep the answer short and say why." * 180
        p1, p2 = (e.format_chat([system, {"role": "user", "content": a + filler}]) for a in ASKS[:2])
        parting = next(i for i, (a, b) in enumerate(zip(p1, p2)) if a != b)
        assert len(p1) - parting > e.rt.n_swa + e.rt.n_ubatch + 128
        e.run(p1, GenerationConfig(max_tokens=4, spec="none"))
        r = e.run(p2, GenerationConfig(max_tokens=8, spec="auto"))
        assert 0 < r.stats.reused_tokens <= parting and parting - r.stats.reused_tokens < 8, (size, r.stats)
        assert e.cache_counts.events["checkpoint_restores"] == 1
        e.reset()
        assert e.run(p2, GenerationConfig(max_tokens=8, spec="auto")).tokens == r.tokens
    finally:
        e.close()


def test_the_memory_plan_is_what_llama_cpp_allocates(shaped):
    """The recommendation's sums (engine/models/memory_plan.py) read from each size's own header:
    weights and total within 10 % of llama.cpp's buffers, the KV cache (a 1024 window over four
    sequences, E4B's shared layers) to llama.cpp's rounding."""
    from .test_memory_plan import check_plan

    _, engine = shaped
    check_plan(engine, 4)
