"""Token selection shared by every decoding strategy, so baseline and MTP apply the
same penalties and truncation to the same logits.

The order follows llama.cpp's default chain: logit bias, penalties (repetition, then OpenAI's
presence and frequency penalties, over the last `repeat_last_n` tokens, as llama.cpp's
penalties sampler does), top-k, top-p, min-p, then temperature. A distribution is returned as
(candidate ids, probabilities).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 64
    top_p: float = 0.95
    min_p: float = 0.0
    repeat_penalty: float = 1.0  # 1 = off
    repeat_last_n: int = 64
    presence_penalty: float = 0.0  # subtracted once from each token seen (OpenAI's)
    frequency_penalty: float = 0.0  # subtracted once per time each token was seen
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit; -inf: never sampled)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def penalized(self) -> bool:
        """Recent tokens change the logits (a penalty is on)."""
        return self.repeat_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0

    @property
    def plain(self) -> bool:
        """The raw logits decide: no penalty and no bias (a greedy choice is their argmax)."""
        return not self.penalized and not self.logit_bias

    def validate(self) -> None:
        for name in ("temperature", "top_p", "min_p", "repeat_penalty"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be a finite number")
        if not 0 <= self.repeat_last_n <= 1 << 20:
            raise ValueError("repeat_last_n must be between 0 and 1048576")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0 (0 = off)")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1]")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError("min_p must be in [0, 1)")
        if self.repeat_penalty <= 0:
            raise ValueError("repeat_penalty must be > 0")
        for name in ("presence_penalty", "frequency_penalty"):
            v = getattr(self, name)
            if not math.isfinite(v) or not -2.0 <= v <= 2.0:
                raise ValueError(f"{name} must be between -2 and 2")
        for tok, bias in self.logit_bias:
            if not isinstance(tok, int) or tok < 0 or not (-100 <= bias <= 100 or bias == -math.inf):
                raise ValueError("logit_bias maps token ids to numbers between -100 and 100 (or -inf: a ban)")


def apply_penalty(logits: np.ndarray, recent: np.ndarray, penalty: float) -> np.ndarray:
    """llama.cpp's repetition penalty on a copy: divide positive logits, multiply negative."""
    out = logits.copy()
    if penalty != 1.0 and recent.size:
        ids = np.unique(recent)
        v = out[ids]
        out[ids] = np.where(v > 0, v / penalty, v * penalty)
    return out


def processed(logits: np.ndarray, recent: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The logits after bias and penalties (the same array when there are none)."""
    if params.plain:
        return logits
    x = logits.astype(np.float32, copy=True)
    for tok, bias in params.logit_bias:
        if tok < x.shape[0]:
            x[tok] += bias
    if params.repeat_penalty != 1.0:
        x = apply_penalty(x, recent, params.repeat_penalty)
    if (params.presence_penalty or params.frequency_penalty) and recent.size:
        ids, counts = np.unique(recent, return_counts=True)
        x[ids] -= params.presence_penalty + params.frequency_penalty * counts
    return x


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = np.max(x)
    return x - (m + np.log(np.sum(np.exp(x - m))))


def greedy_token(logits: np.ndarray, recent: np.ndarray, params: SamplingParams) -> int:
    return int(np.argmax(processed(logits, recent, params)))


def distribution(logits: np.ndarray, recent: np.ndarray, params: SamplingParams):
    """The processed next-token distribution for temperature sampling: (ids, probs)."""
    return truncated(processed(logits, recent, params), params)


def truncated(x: np.ndarray, params: SamplingParams):
    """The sampling distribution from already processed logits: top-k, top-p, min-p, temperature."""
    n = x.shape[0]
    if 0 < params.top_k < n:
        ids = np.argpartition(x, n - params.top_k)[n - params.top_k:]
    else:
        ids = np.arange(n)
    v = x[ids].astype(np.float64)
    order = np.argsort(-v, kind="stable")
    ids, v = ids[order], v[order]
    p = np.exp(v - v[0])
    p /= p.sum()
    keep = len(p)
    if params.top_p < 1.0:
        # smallest prefix whose mass reaches top_p (at least one token)
        keep = min(keep, int(np.searchsorted(np.cumsum(p), params.top_p)) + 1)
    if params.min_p > 0.0:
        keep = min(keep, max(1, int(np.count_nonzero(p[:keep] >= params.min_p * p[0]))))
    ids, v = ids[:keep], v[:keep]
    p = np.exp((v - v[0]) / params.temperature)
    p /= p.sum()
    return ids, p


def sample_from(ids: np.ndarray, probs: np.ndarray, rng: np.random.Generator) -> int:
    c = np.cumsum(probs)
    i = int(np.searchsorted(c, rng.random() * c[-1], side="right"))
    return int(ids[min(i, len(ids) - 1)])


def prob_of(ids: np.ndarray, probs: np.ndarray, token: int) -> float:
    hit = np.flatnonzero(ids == token)
    return float(probs[hit[0]]) if hit.size else 0.0


def sample_residual(p_ids, p_probs, q_ids, q_probs, rng: np.random.Generator) -> int:
    """Sample from max(0, p - q) renormalised: the correction step of speculative sampling."""
    dense_q = np.zeros(int(max(p_ids.max(), q_ids.max())) + 1)
    dense_q[q_ids] = q_probs
    q_on_p = dense_q[p_ids]
    r = np.clip(p_probs - q_on_p, 0.0, None)
    if r.sum() <= 0.0:  # p == q: nothing to correct
        return sample_from(p_ids, p_probs, rng)
    return sample_from(p_ids, r / r.sum(), rng)
