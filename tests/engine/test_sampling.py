"""Speculative sampling keeps the target's distribution: MTP and baseline samples of the next
few tokens are indistinguishable by a chi-square test; sampling is reproducible by seed."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from engine.local.engine import Engine, GenerationConfig
from engine.sampling import SamplingParams, distribution, sample_residual

from ..support.stats import chi2_pvalue

N = 1500  # samples per arm


def samples(engine, prompt, use_mtp, temperature, n=N, k=3):
    sp = SamplingParams(temperature=temperature, top_k=8, top_p=1.0)
    out = []
    for seed in range(n):
        r = engine.run(prompt, GenerationConfig(max_tokens=3, use_mtp=use_mtp, draft_max=k, sampling=sp, seed=seed))
        out.append(tuple(r.tokens))
    return out


@pytest.fixture(scope="module")
def sampler(tiny):
    e = Engine.load(tiny["target"], tiny[1.0])
    yield e
    e.close()


def test_mtp_sampling_matches_target_distribution(sampler):
    prompt = sampler.tokenize("Hello world")
    base = samples(sampler, prompt, False, 3.0)
    mtp = samples(sampler, prompt, True, 3.0)
    for pos in range(3):
        p = chi2_pvalue(Counter(s[pos] for s in base), Counter(s[pos] for s in mtp))
        assert p > 1e-3, f"position {pos}: MTP and baseline differ (p={p:.2g})"
    p = chi2_pvalue(Counter(s[:2] for s in base), Counter(s[:2] for s in mtp))
    assert p > 1e-3, f"joint (first two tokens): p={p:.2g}"


def test_chi_square_detects_a_different_distribution(sampler):
    """The test above has power: a small change of temperature is caught."""
    prompt = sampler.tokenize("Hello world")
    a = samples(sampler, prompt, False, 3.0, n=1000)
    b = samples(sampler, prompt, False, 2.3, n=1000)
    assert chi2_pvalue(Counter(s[0] for s in a), Counter(s[0] for s in b)) < 1e-3


def test_seeded_runs_are_reproducible(sampler):
    prompt = sampler.tokenize("The quick brown fox")
    sp = SamplingParams(temperature=1.5, top_k=16)
    for use_mtp in (False, True):
        runs = [sampler.run(prompt, GenerationConfig(max_tokens=24, use_mtp=use_mtp, sampling=sp, seed=7)).tokens
                for _ in range(2)]
        assert runs[0] == runs[1]
    other = sampler.run(prompt, GenerationConfig(max_tokens=24, use_mtp=True, sampling=sp, seed=8)).tokens
    assert other != runs[0]


def test_residual_never_returns_the_rejected_token():
    rng = np.random.default_rng(0)
    p_ids, p = np.array([1, 2, 3]), np.array([0.5, 0.3, 0.2])
    q_ids, q = np.array([1]), np.array([1.0])  # a greedy draft of token 1 was rejected
    draws = Counter(sample_residual(p_ids, p, q_ids, q, rng) for _ in range(4000))
    assert draws[1] == 0
    assert abs(draws[2] / 4000 - 0.6) < 0.04


def test_truncation_order_and_penalty():
    logits = np.array([5.0, 4.0, 3.0, -1.0, 2.0])
    ids, p = distribution(logits, np.array([0]), SamplingParams(temperature=1.0, top_k=3, top_p=1.0, repeat_penalty=2.0))
    # token 0 penalised 5 -> 2.5, so the top 3 are 1 (4.0), 2 (3.0), 0 (2.5)
    assert list(ids) == [1, 2, 0]
    assert p.sum() == pytest.approx(1.0)
    ids, _ = distribution(logits, np.zeros(0, np.int64), SamplingParams(temperature=1.0, top_k=0, top_p=0.5))
    assert list(ids) == [0]
    ids, _ = distribution(logits, np.zeros(0, np.int64), SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.3))
    assert list(ids) == [0, 1]
