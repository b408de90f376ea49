"""Acceptance statistics match how the synthetic drafters were built."""

from __future__ import annotations

import pytest

from engine.local.engine import Engine, GenerationConfig

from ..support.prompts import PROMPTS


def run_all(engine, k, max_tokens=64, spec="mtp"):
    out = []
    for text in PROMPTS:
        engine.reset()
        out.append(engine.run(engine.tokenize(text), GenerationConfig(max_tokens=max_tokens, spec=spec, draft_max=k)))
    return out


def totals(results):
    drafted = sum(r.stats.draft_tokens for r in results)
    accepted = sum(r.stats.accepted_tokens for r in results)
    return drafted, accepted


def test_full_agreement_accepts_nearly_everything(tiny):
    e = Engine.load(tiny["target"], tiny[1.0])
    try:
        res = run_all(e, 3)
        drafted, accepted = totals(res)
        assert drafted > 100
        assert accepted / drafted > 0.95
        for r in res:
            s = r.stats
            # tokens per verify step = accepted + 1, close to k + 1
            assert s.mean_accepted_length == pytest.approx((s.accepted_tokens + s.steps) / s.steps)
            assert s.mean_accepted_length > 3.5
            assert sum(r.drafted) == s.accepted_tokens  # origin flags agree with the counts
    finally:
        e.close()


def test_scrambled_drafter_accepts_nothing_and_output_is_unchanged(tiny):
    e = Engine.load(tiny["target"], tiny[0.0])
    try:
        mtp = run_all(e, 4)
        base = run_all(e, 4, spec="none")
        drafted, accepted = totals(mtp)
        assert drafted > 100 and accepted / drafted < 0.02
        for m, b in zip(mtp, base):
            assert m.tokens == b.tokens
            assert m.stats.mean_accepted_length == pytest.approx(1.0, abs=0.05)
    finally:
        e.close()


def test_partial_agreement_per_position(engine07):
    res = run_all(engine07, 3)
    drafted_at = [sum(r.stats.drafted_at[i] for r in res) for i in range(3)]
    accepted_at = [sum(r.stats.accepted_at[i] for r in res) for i in range(3)]
    # The drafter's rule agrees with the target on ~70 % of tokens, independently per token:
    # position i is accepted about 0.7^(i+1) of the time.
    for i in range(3):
        rate = accepted_at[i] / drafted_at[i]
        assert abs(rate - 0.7 ** (i + 1)) < 0.15, (i, rate)
    assert accepted_at[0] >= accepted_at[1] >= accepted_at[2]
    s = res[0].stats
    assert len(s.per_position_acceptance) == 3
    assert s.acceptance_rate == pytest.approx(s.accepted_tokens / s.draft_tokens)


def test_baseline_stats_have_no_drafts(engine07):
    r = run_all(engine07, 3, spec="none")[0]
    s = r.stats
    assert s.mode == "baseline" and s.draft_tokens == 0 and s.acceptance_rate is None
    assert s.steps == s.generated_tokens - 1 == len(r.tokens) - 1  # the first token comes from prefill
    assert s.decode_tps > 0 and s.ttft_s > 0 and s.prefill_tps > 0
    assert 0.0 <= s.python_share <= 1.0
