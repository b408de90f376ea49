"""Speculative sampling keeps the target's distribution: MTP and baseline samples of the next
few tokens are indistinguishable by a chi-square test; sampling is reproducible by seed."""

from __future__ import annotations

from collections import Counter

import pytest

from engine.local.engine import Engine, GenerationConfig
from engine.sampling import SamplingParams

from ..support.stats import chi2_pvalue

N = 1500  # samples per arm


def samples(engine, prompt, drafting, temperature, n=N, k=3):
    sp = SamplingParams(temperature=temperature, top_k=8, top_p=1.0)
    out = []
    for seed in range(n):
        r = engine.run(prompt, GenerationConfig(max_tokens=3, spec="auto" if drafting else "none", draft_max=k, sampling=sp, seed=seed))
        out.append(tuple(r.tokens))
    return out


@pytest.fixture(scope="module")
def sampler(tiny):
    e = Engine.load(tiny["target"], tiny[1.0])
    yield e
    e.close()


@pytest.mark.slow  # thousands of samples per arm
def test_mtp_sampling_matches_target_distribution(sampler):
    prompt = sampler.tokenize("Hello world")
    base = samples(sampler, prompt, False, 3.0)
    mtp = samples(sampler, prompt, True, 3.0)
    for pos in range(3):
        p = chi2_pvalue(Counter(s[pos] for s in base), Counter(s[pos] for s in mtp))
        assert p > 1e-3, f"position {pos}: MTP and baseline differ (p={p:.2g})"
    p = chi2_pvalue(Counter(s[:2] for s in base), Counter(s[:2] for s in mtp))
    assert p > 1e-3, f"joint (first two tokens): p={p:.2g}"


@pytest.mark.slow  # thousands of samples per arm
def test_chi_square_detects_a_different_distribution(sampler):
    """The test above has power: a small change of temperature is caught."""
    prompt = sampler.tokenize("Hello world")
    a = samples(sampler, prompt, False, 3.0, n=1000)
    b = samples(sampler, prompt, False, 2.3, n=1000)
    assert chi2_pvalue(Counter(s[0] for s in a), Counter(s[0] for s in b)) < 1e-3


def test_seeded_runs_are_reproducible(sampler):
    prompt = sampler.tokenize("The quick brown fox")
    sp = SamplingParams(temperature=1.5, top_k=16)
    for drafting in (False, True):
        runs = [sampler.run(prompt, GenerationConfig(max_tokens=24, spec="auto" if drafting else "none", sampling=sp, seed=7)).tokens
                for _ in range(2)]
        assert runs[0] == runs[1]
    other = sampler.run(prompt, GenerationConfig(max_tokens=24, sampling=sp, seed=8)).tokens
    assert other != runs[0]
