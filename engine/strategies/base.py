"""The one interface every decoding strategy implements.

A strategy advances a `DecodeState` by one step and returns the tokens it produced.
Invariant kept by every step: the target's KV cache holds exactly `tokens[:n_past]`, and
`tokens[-1]` (the newest token, `id_last`) is not yet decoded, so n_past == len(tokens) - 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..grammar import Grammar
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
    grammar: "Grammar | None" = None  # constrained decoding: the target chooses only what it allows

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
        """The target's own choice from one logits row (greedy or sampled), within the grammar,
        which then advances over it: a strategy picks only tokens it keeps."""
        g = self.grammar
        if self.params.greedy:
            tok = greedy_token(logits, self.recent(extra), self.params)
            if g is not None and not g.allows(tok):  # the unconstrained best is usually allowed: check it first
                tok = greedy_token(g.constrain(logits), self.recent(extra), self.params)
        else:
            tok = sample_from(*self.distribution(logits, extra), self.rng)
        self.keep(tok)
        return tok

    def distribution(self, logits: np.ndarray, extra=()):
        """The target's sampling distribution for one row, within the grammar: (ids, probs)."""
        if self.grammar is not None:
            logits = self.grammar.constrain(logits)
        return distribution(logits, self.recent(extra), self.params)

    def keep(self, tok: int) -> None:
        """A token is kept (a picked one, or an accepted draft): the grammar advances over it."""
        if self.grammar is not None:
            self.grammar.accept(tok)


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
