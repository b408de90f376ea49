"""The one interface every decoding strategy implements.

A strategy advances a `DecodeState` by one step and returns the tokens it produced.
Invariant kept by every step: the target's KV cache holds exactly `tokens[:n_past]`, and
`tokens[-1]` (the newest token, `id_last`) is not yet decoded, so n_past == len(tokens) - 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..runtime import Runtime
from ..sampling import SamplingParams, distribution, greedy_token, sample_from
from ..stats import GenerationStats
from .draft_control import CostModel


@dataclass
class DecodeState:
    rt: Runtime
    params: SamplingParams
    rng: np.random.Generator
    stats: GenerationStats
    tokens: list[int]  # prompt + generated; the last one is not in the cache yet
    n_past: int
    pending_h: np.ndarray | None = None  # target hidden row at n_past-1 (MTP only)
    n_ctx: int = 0
    costs: CostModel = field(default_factory=CostModel)  # measured step costs, kept by the engine

    @property
    def id_last(self) -> int:
        return self.tokens[-1]

    def recent(self, extra=()) -> np.ndarray:
        """The last repeat_last_n tokens (for the repetition penalty), plus `extra`."""
        n = self.params.repeat_last_n
        if self.params.repeat_penalty == 1.0 or n <= 0:
            return _EMPTY
        seq = [t for t in self.tokens[-n:] if t >= 0] + list(extra)  # not the positions of media
        return np.asarray(seq[-n:], dtype=np.int64)

    def pick(self, logits: np.ndarray, extra=()) -> int:
        """The target's own choice from one logits row (greedy or sampled)."""
        if self.params.greedy:
            return greedy_token(logits, self.recent(extra), self.params)
        return sample_from(*distribution(logits, self.recent(extra), self.params), self.rng)


_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass
class Step:
    tokens: list[int]
    drafted: list[bool] = field(default_factory=list)  # True = drafter's token accepted


class DecodeStrategy:
    """Base class; subclasses set `name` and implement `step`."""

    name = "?"
    needs_drafter = False

    def prepare(self, st: DecodeState) -> None:
        """Called once before the first step (e.g. to switch hidden-state output on)."""

    def step(self, st: DecodeState, budget: int) -> Step:
        """Produce 1..budget tokens. On return st.tokens and st.n_past include them."""
        raise NotImplementedError
