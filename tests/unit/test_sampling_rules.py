"""Sampling's rules without a model: the residual distribution after a rejection, and the order
of truncations and penalties."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from engine.sampling import SamplingParams, distribution, sample_residual


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
