"""Adaptive draft length: each MTP step picks k in 0..k_max (0 = a plain target step) to
maximise the expected tokens per second.

    expected tokens  E(k) = 1 + a0 + a0*a1 + ... + a0*...*a(k-1)
    expected time    T(k) = k * draft_step + verify(k + 1 rows)        (T(0) = one decode)

`a_i` is the chance that draft i is accepted once drafts 0..i-1 were, estimated from what
the target accepted, with counts that decay every drafted step so the estimate follows the
text (a code block, then prose). A new reply starts from what the last one learnt.

When drafting does not pay, the controller still drafts one token now and then (a probe) to
notice when the text becomes predictable: soon again after an accepted probe, ever more
rarely (up to every 128 steps) after rejected ones. Evidence from before a long pause
counts less at the next probe, so a changed text shows quickly.

The costs are wall-clock times measured on this machine (`CostModel`, kept by the engine):
a verify row is nearly free on a GPU and costs half a decode or more on a small CPU, which
is why no fixed k suits both. A batch size never measured is assumed to cost what the
nearest smaller measured size costs (optimism that gets it tried, and then measured).

The choice of k depends only on what happened before the step, never on the step's own
logits, so greedy output stays the baseline's and speculative sampling stays exact.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

AUTO_K_MAX = 8  # the longest draft auto chooses
PAUSED_AFTER = 3  # undrafted steps in a row before the live stats say "paused"
PROBE_FIRST, PROBE_MAX = 16, 128  # undrafted steps before a probe; doubles after each rejected one
PAUSE_HALF_LIFE = 16  # paused steps over which old acceptance evidence loses another decay step


@dataclass
class CostModel:
    """Seconds for a target batch of n rows and for one draft step, measured on this machine:
    the median of each size's recent samples (one slow sample, such as llama.cpp building a
    graph for a new batch size, must not decide anything). Also carries what the last reply's
    controller learnt (`carry`), the starting point of the next reply."""

    window: int = 9
    batch: dict = field(default_factory=dict)  # rows -> recent seconds
    drafts: deque = field(default_factory=lambda: deque(maxlen=9))
    draft: float | None = None  # median seconds of one draft step
    carry: dict = field(default_factory=dict)
    _medians: dict = field(default_factory=dict)  # rows -> median seconds

    def record_batch(self, rows: int, seconds: float) -> None:
        if rows not in self.batch:  # the first batch of a size also builds its graph: not typical
            self.batch[rows] = deque(maxlen=self.window)
            return
        self.batch[rows].append(seconds)
        self._medians[rows] = statistics.median(self.batch[rows])

    def record_draft(self, seconds_per_step: float) -> None:
        self.drafts.append(seconds_per_step)
        self.draft = statistics.median(self.drafts)

    def measured(self, rows: int) -> bool:
        return rows in self._medians

    def batch_cost(self, rows: int) -> float | None:
        """Measured, else the cost of the nearest smaller size measured: a batch never costs
        less than a smaller one, so this is the optimistic guess that gets a size tried (and
        then measured). Costs per row are far from linear (4 rows can cost little more than
        3 on a CPU, where SIMD lanes fill up), so guessing from a line misses the best k."""
        c = self._medians.get(rows)
        if c is not None:
            return c
        below = [n for n in self._medians if n < rows]
        return self._medians[max(below)] if below else None

    def ready(self) -> bool:
        return self.draft is not None and 1 in self._medians

    def ceiling(self, k_max: int, measured_only: bool = False) -> float | None:
        """The best speed-up MTP could reach here if every draft were accepted. Sizes not
        measured yet count at their optimistic guess (so 'below 1' is a safe verdict), or
        are left out with measured_only."""
        if not self.ready():
            return None
        one = self.batch_cost(1)
        ks = [k for k in range(1, k_max + 1) if not measured_only or self.measured(k + 1)]
        return max(((k + 1) * one / (k * self.draft + self.batch_cost(k + 1)) for k in ks), default=None)


class DraftController:
    """Chooses k for each step of one reply; `observe` feeds back what the target accepted."""

    def __init__(self, costs: CostModel, k_max: int = AUTO_K_MAX, prior: float = 0.6, prior_weight: float = 1.0,
                 decay: float = 0.95, start_k: int = 2):
        self.costs = costs
        self.k_max = k_max
        self.prior = prior
        self.prior_weight = prior_weight
        self.decay = decay
        self.start_k = start_k
        carry = costs.carry
        self.accepted = list(carry.get("accepted", [0.0] * k_max))  # decayed counts per position
        self.seen = list(carry.get("seen", [0.0] * k_max))
        self.probe_every = carry.get("probe_every", PROBE_FIRST)
        self.undrafted_run = carry.get("undrafted_run", 0)
        self.probing = False
        self.paused_for = 0

    def acceptance(self) -> list[float]:
        """Estimated a_i; a position seen rarely leans on the one before it."""
        out, prev = [], self.prior
        for acc, seen in zip(self.accepted, self.seen):
            a = (acc + prev * self.prior_weight) / (seen + self.prior_weight)
            out.append(a)
            prev = a
        return out

    def expected_rates(self, k_max: int, acceptance: list[float] | None = None) -> list[float]:
        """E(k) / T(k), expected tokens per second, for k = 0..k_max (costs must be ready)."""
        a = acceptance if acceptance is not None else self.acceptance()
        draft = self.costs.draft or 0.0
        rates, tokens, p = [1.0 / self.costs.batch_cost(1)], 1.0, 1.0
        for k in range(1, k_max + 1):
            p *= a[k - 1]
            tokens += p
            rates.append(tokens / (k * draft + self.costs.batch_cost(k + 1)))
        return rates

    def best_k(self, k_max: int) -> int:
        """argmax over k of E(k) / T(k); the shorter draft on a tie."""
        rates = self.expected_rates(k_max)
        return max(range(k_max + 1), key=lambda k: (rates[k], -k))

    def choose(self, limit: int | None = None) -> int:
        """k for the next step (at most `limit`: the token budget or context left)."""
        k_max = self.k_max if limit is None else max(0, min(self.k_max, limit))
        if 0 < self.undrafted_run < self.probe_every and self.undrafted_run % PAUSED_AFTER:
            # paused: the acceptance has not changed since; look again every few steps only
            self.undrafted_run += 1
            return 0
        self.probing = False
        if not self.costs.ready():
            # not measured yet on this machine: a drafted step, then a plain one
            k = min(self.start_k, k_max) if self.costs.draft is None else 0
        else:
            k = self.best_k(k_max)
            if k == 0 and self.undrafted_run >= self.probe_every and k_max >= 1:
                k, self.probing = 1, True  # the cheapest look at whether drafts pay again
                self.paused_for = self.undrafted_run
            elif k > 0:
                self.probe_every = PROBE_FIRST
        self.undrafted_run = self.undrafted_run + 1 if k == 0 else 0
        self._carry()
        return k

    def observe(self, k: int, n_accepted: int) -> None:
        """After a step with k drafts of which the first n_accepted were taken. Evidence
        decays per drafted step; a probe after a long pause discounts it further."""
        if k == 0:
            return
        decay = self.decay
        if self.probing:
            self.probe_every = PROBE_FIRST if n_accepted == k else min(self.probe_every * 2, PROBE_MAX)
            decay **= 1 + self.paused_for / PAUSE_HALF_LIFE
        for i in range(self.k_max):
            self.accepted[i] *= decay
            self.seen[i] *= decay
        for i in range(min(k, n_accepted + 1)):  # position n_accepted was the first rejected
            self.seen[i] += 1
            self.accepted[i] += i < n_accepted
        self._carry()

    def _carry(self) -> None:
        """What the next reply starts from (same model, same machine, likely similar text)."""
        self.costs.carry.update(accepted=self.accepted, seen=self.seen, probe_every=self.probe_every,
                                undrafted_run=self.undrafted_run)

    @property
    def paused(self) -> bool:
        return self.undrafted_run >= PAUSED_AFTER

    def explain(self) -> str:
        return explain(self.costs, self.acceptance(), self.k_max)


def explain(costs: CostModel, acceptance: list[float], k_max: int, mean_k: float | None = None) -> str:
    """Why auto drafts what it drafts: the costs measured here and the acceptance seen."""
    if not costs.ready():
        return "no costs measured yet on this machine"
    one = costs.batch_cost(1)
    rows = ", ".join(f"{n} rows {costs.batch_cost(n) * 1e3:.2f} ms ({costs.batch_cost(n) / one:.2f}x)"
                     + ("" if costs.measured(n) else " guessed") for n in (2, 3, 4, 5))
    acc = ", ".join(f"{x * 100:.0f}%" for x in acceptance[:4]) or "-"
    text = (f"one decode {one * 1e3:.2f} ms; verify {rows}; draft step {costs.draft * 1e3:.2f} ms "
            f"({costs.draft / one:.2f}x). Drafts accepted by position: {acc}")
    best = costs.ceiling(k_max, measured_only=True)
    if best is not None:
        text += f". With every draft accepted, the lengths measured could reach {best:.2f}x here"
    if mean_k is not None:
        text += f"; auto drafted {mean_k:.2f} tokens per step on average"
    return text + "."
