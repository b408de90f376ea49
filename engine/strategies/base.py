"""The one interface every decoding strategy implements.

A strategy advances a `DecodeState` (one sequence) by one step and returns the tokens it
produced. A step is a generator: it yields what it needs decoded — `DraftRow`s for the
drafter, then one `TargetRows` for the target — and is sent the results back; the scheduler
(scheduler.py) puts the requests of every sequence into one batch per model, so several
sequences decode together. Invariant kept by every step: the target's KV cache holds exactly
`tokens[:n_past]` of the sequence, and `tokens[-1]` (the newest token, `id_last`) is not yet
decoded, so n_past == len(tokens) - 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generator

import numpy as np

from ..local.grammar import Grammar
from ..local.runtime import Runtime
from ..sampling import SamplingParams, distribution, log_softmax, processed, sample_from, truncated
from ..stats import GenerationStats
from ..gemma4.text import TokenLogprob
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
    top_logprobs: int = -1  # >= 0: record each kept token's log-probability and this many alternatives
    logprobs: list = field(default_factory=list)  # TokenLogprob per kept token, in order (the engine takes them)
    seq: int = 0  # the sequence's id in the target's cache
    room: int = 1 << 30  # the most target rows this step may add to the batch (set per step)
    others: int = 0  # target rows the other sequences add to this step's batch (what extra rows cost)
    others_tokens: float | None = None  # the tokens those rows should give (None: one a row)
    planned: int = 1  # the target rows this step will ask for (set by the step before it drafts)
    mtp_k: int | None = None  # auto's MTP draft length, when the scheduler chose one for several sequences

    @property
    def id_last(self) -> int:
        return self.tokens[-1]

    def recent(self, extra=()) -> np.ndarray:
        """The last repeat_last_n tokens (for the repetition penalty), plus `extra`."""
        n = self.params.repeat_last_n
        if not self.params.penalized or n <= 0:
            return _EMPTY
        seq = [t for t in self.tokens[-n:] if t >= 0] + list(extra)  # not the positions of media
        return np.asarray(seq[-n:], dtype=np.int64)

    def pick(self, logits: np.ndarray, extra=()) -> int:
        """The target's own choice from one logits row (greedy or sampled), within the grammar,
        which then advances over it: a strategy picks only tokens it keeps."""
        g = self.grammar
        if self.params.greedy:
            x = processed(logits, self.recent(extra), self.params)
            tok = g.best(x) if g is not None else int(np.argmax(x))
        else:
            tok = sample_from(*self.distribution(logits, extra), self.rng)
        self.keep(tok, logits, extra)
        return tok

    def distribution(self, logits: np.ndarray, extra=()):
        """The target's sampling distribution for one row, within the grammar: (ids, probs)."""
        if self.grammar is None:
            return distribution(logits, self.recent(extra), self.params)
        x = processed(logits, self.recent(extra), self.params)
        return truncated(self.grammar.constrain(x, top_k=self.params.top_k), self.params)

    def keep(self, tok: int, logits: np.ndarray | None = None, extra=()) -> None:
        """A token is kept (a picked one, or an accepted draft, chosen from the row `logits`):
        its log-probabilities are recorded if asked for, and the grammar advances over it."""
        if self.top_logprobs >= 0 and logits is not None:
            self.logprobs.append(self._logprob(logits, extra, tok))
        if self.grammar is not None:
            self.grammar.accept(tok)

    def _logprob(self, logits: np.ndarray, extra, tok: int) -> TokenLogprob:
        """The distribution the target chose from (bias, penalties and grammar applied, before
        temperature and truncation, as OpenAI reports it)."""
        x = processed(logits, self.recent(extra), self.params)
        if self.grammar is not None:
            x = self.grammar.constrain(x)
        lp = log_softmax(x)
        n = min(self.top_logprobs, lp.shape[0])
        top = np.argpartition(-lp, n - 1)[:n] if n else np.zeros(0, dtype=np.int64)
        top = top[np.argsort(-lp[top], kind="stable")]
        # alternatives the grammar rules out (probability 0, -inf) are not alternatives: listed,
        # they are also not JSON (a 500 at every API)
        return TokenLogprob(float(lp[tok]), [(int(i), float(lp[i])) for i in top if np.isfinite(lp[i])])


_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass
class TargetRows:
    """Asked by a step: decode these tokens of the sequence at pos0.. in this step's target batch.
    Sent back: the `Rows` they became."""

    tokens: list[int]
    pos0: int
    outputs: str = "all"  # "all" or "last"


@dataclass
class DraftRow:
    """Asked by a step: one drafter row (a token at a position, with its input hidden row).
    Sent back: (logits, next hidden row), views valid until the next drafter batch."""

    token: int
    pos: int
    h: np.ndarray


class Rows:
    """One sequence's rows of a decoded target batch (indices relative to its first row)."""

    def __init__(self, target, at: int, out_at: int):
        self.target, self.at, self.out_at = target, at, out_at

    def logits(self, i: int) -> np.ndarray:
        return self.target.logits(self.at + i)

    def block(self, n: int) -> np.ndarray:
        """The first n rows' logits as one (n, n_vocab) view (every row was an output)."""
        return self.target.logits_rows(n, self.out_at)

    def hidden(self, i: int, out: np.ndarray) -> None:
        self.target.hidden(self.at + i, out)


StepRun = Generator["TargetRows | DraftRow", object, "Step"]


@dataclass
class Step:
    tokens: list[int]
    drafted: list[bool] = field(default_factory=list)  # True = a draft the target accepted
    source: str = ""  # where this step's drafts came from: "mtp", "lookup" ("" = none)


class DecodeStrategy:
    """Base class; subclasses set `name` and implement `step`."""

    name = "?"
    needs_drafter = False
    # auto's MTP DraftController (made by `prepare`), None without one: the scheduler gives the
    # sequences that have one a joint draft length (draft_control.joint_draft_length)
    controller = None

    def prepare(self, st: DecodeState) -> None:
        """Called once before the first step (e.g. to make its draft controllers)."""

    def step(self, st: DecodeState, budget: int) -> StepRun:
        """Produce 1..budget tokens (a generator, see the module's docstring). On return
        st.tokens and st.n_past include them."""
        raise NotImplementedError
