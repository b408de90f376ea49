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
STARVED = 0.5  # a batch that got less than this share of the usual CPU time ran beside something else
OUTLIER, OUTLIER_RUN = 3.0, 3  # a sample 3x its size's median is a stall, unless 3 come in a row
IMPLAUSIBLE = 4.0  # a batch of n rows measured above 4 x n decodes was a stall, not its cost
REALITY_STEPS = 8  # drafted steps before what drafting achieves is checked against plain steps


@dataclass
class CostModel:
    """Seconds for a target batch of n rows and for one draft step, measured on this machine:
    the median of each size's recent samples. A desktop is busy with other programs, so one
    stall must not decide anything: a sample taken while this process got far less CPU than
    usual (its CPU time against the wall time) is dropped, and so is one far above its size's
    median, unless several in a row say the machine really got slower (then the size is
    measured anew from them). Also carries what the last reply's controllers learnt (`carry`),
    the starting point of the next reply."""

    window: int = 9
    batch: dict = field(default_factory=dict)  # rows -> recent seconds
    drafts: deque = field(default_factory=lambda: deque(maxlen=9))
    draft: float | None = None  # median seconds of one draft step
    carry: dict = field(default_factory=dict)
    dropped: int = 0  # samples left out as stalls
    reality_check: bool = True  # controllers check their choices against the speed achieved (off: costs given)
    last_dropped: bool = False  # the latest batch sample was a stall
    _medians: dict = field(default_factory=dict)  # rows -> median seconds
    _cpu: deque = field(default_factory=lambda: deque(maxlen=32))  # recent CPU/wall ratios
    _suspect: dict = field(default_factory=dict)  # rows -> slow samples in a row

    def record_batch(self, rows: int, seconds: float, cpu_seconds: float | None = None) -> None:
        self.last_dropped = False
        if rows not in self.batch:  # the first batch of a size also builds its graph: not typical
            self.batch[rows] = deque(maxlen=self.window)
            return
        if cpu_seconds is not None and seconds > 0:
            ratio = cpu_seconds / seconds
            starved = len(self._cpu) >= 4 and ratio < STARVED * statistics.median(self._cpu)
            self._cpu.append(ratio)
            if starved:  # the machine ran something else meanwhile: not what this batch costs
                self.dropped += 1
                self.last_dropped = True
                return
        median = self._medians.get(rows)
        if median is not None and seconds > OUTLIER * median:
            slow = self._suspect.setdefault(rows, [])
            slow.append(seconds)
            if len(slow) < OUTLIER_RUN:
                self.dropped += 1
                self.last_dropped = True
                return
            self.batch[rows].clear()  # several in a row: this size costs more now; measure it anew
            self.batch[rows].extend(slow)
            seconds = None
        self._suspect.pop(rows, None)
        if seconds is not None:
            self.batch[rows].append(seconds)
        self._medians[rows] = statistics.median(self.batch[rows])
        self._forget_implausible()

    def _forget_implausible(self) -> None:
        """A batch of n rows costs at most a few times n single decodes (a model spilling to
        system memory was measured at 1.5x): a size whose median says far more was measured
        while the machine was busy (and, looking expensive, would never be tried again to
        correct it). Forget it: it is guessed optimistically, tried, measured."""
        one = self._medians.get(1)
        if one is None:
            return
        for n in [n for n, c in self._medians.items() if n > 1 and c > IMPLAUSIBLE * n * one]:
            del self._medians[n]
            self.batch[n].clear()

    def record_draft(self, seconds_per_step: float) -> None:
        self.drafts.append(seconds_per_step)
        self.draft = statistics.median(self.drafts)

    def measured(self, rows: int) -> bool:
        return rows in self._medians

    def batch_cost(self, rows: int) -> float | None:
        """Measured, else the cost of the nearest smaller size measured: a batch never costs
        less than a smaller one, so this is the optimistic guess that gets a size tried (and
        then measured). Costs per row are far from linear (4 rows can cost little more than
        3 on a CPU, where SIMD lanes fill up), so guessing from a line misses the best k.
        With nothing smaller measured (several sequences always decode together), the
        nearest larger size's."""
        c = self._medians.get(rows)
        if c is not None:
            return c
        below = [n for n in self._medians if n < rows]
        if below:
            return self._medians[max(below)]
        return self._medians[min(self._medians)] if self._medians else None

    def ready(self, need_draft: bool = True) -> bool:
        return (self.draft is not None or not need_draft) and bool(self._medians)

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
                 decay: float = 0.95, start_k: int = 2, carry_key: str = "mtp", free_drafts: bool = False,
                 lengths: tuple[int, ...] | None = None):
        self.costs = costs
        self.k_max = k_max
        # the draft lengths it may choose (default 1..k_max); each one tried must be measured,
        # so a short list of the lengths that pay is learnt sooner than every length
        self.lengths = tuple(k for k in (lengths or range(1, k_max + 1)) if 1 <= k <= k_max)
        self.prior = prior
        self.prior_weight = prior_weight
        self.decay = decay
        self.start_k = start_k
        self.free_drafts = free_drafts  # lookup: proposing costs nothing next to a decode
        self.carry_key = carry_key
        self.real = {"drafted": [0.0, 0.0], "plain": [0.0, 0.0]}  # decayed tokens, seconds per kind of step
        self._last_drafted = False
        carry = costs.carry.setdefault(carry_key, {})
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

    def expected_tokens(self, k: int, acceptance: list[float] | None = None) -> float:
        """E(k): the tokens a step drafting k is expected to give (the target's own included)."""
        a = acceptance if acceptance is not None else self.acceptance()
        tokens, p = 1.0, 1.0
        for i in range(k):
            p *= a[i]
            tokens += p
        return tokens

    def expected_rates(self, k_max: int, acceptance: list[float] | None = None, others: int = 0,
                       others_tokens: float | None = None) -> list[float]:
        """E(k) / T(k), expected tokens per second, for k = 0..k_max (costs must be ready).
        `others`: rows the other sequences put in the same batch, expected to give
        `others_tokens` tokens (default one a row): the rate is the whole batch's, so extra rows
        pay where they cost little next to the batch — on a CPU drafting fades as the batch
        fills, until batches are large enough for the matrix kernels to pay per row again; on a
        GPU, where rows are nearly free, it stays."""
        a = acceptance if acceptance is not None else self.acceptance()
        draft = 0.0 if self.free_drafts else self.costs.draft or 0.0
        cost = self.costs.batch_cost
        base = float(others if others_tokens is None else others_tokens)
        rates, tokens, p = [(base + 1.0) / cost(others + 1)], 1.0, 1.0
        for k in range(1, k_max + 1):
            p *= a[k - 1]
            tokens += p
            rates.append((base + tokens) / (k * draft + cost(others + k + 1)))
        return rates

    def best_k(self, k_max: int, others: int = 0, others_tokens: float | None = None) -> int:
        """argmax over the allowed k (and 0) of E(k) / T(k); the shorter draft on a tie."""
        rates = self.expected_rates(k_max, others=others, others_tokens=others_tokens)
        allowed = [0] + [k for k in self.lengths if k <= k_max]
        if k_max < max(self.lengths, default=0):
            allowed.append(k_max)  # a proposal shorter than the longest length is checked whole
        return max(allowed, key=lambda k: (rates[k], -k))

    def choose(self, limit: int | None = None, others: int = 0, others_tokens: float | None = None) -> int:
        """k for the next step (at most `limit`: the token budget or context left); `others`:
        the rows other sequences add to the step's batch, and the tokens they should give."""
        k_max = self.k_max if limit is None else max(0, min(self.k_max, limit))
        if 0 < self.undrafted_run < self.probe_every and self.undrafted_run % PAUSED_AFTER:
            # paused: the acceptance has not changed since; look again every few steps only
            self.undrafted_run += 1
            return 0
        self.probing = False
        if not self.costs.ready(need_draft=not self.free_drafts):
            # not measured yet on this machine: a drafted step, then a plain one
            k = 0 if self._last_drafted else min(self.start_k, k_max)
        else:
            k = self.best_k(k_max, others, others_tokens)
            if k > 0 and self.drafting_loses():
                k = 0  # the cost model promises more than drafting achieves: plain steps, probes later
            if k == 0 and self.undrafted_run >= self.probe_every and k_max >= 1:
                k, self.probing = 1, True  # the cheapest look at whether drafts pay again
                self.paused_for = self.undrafted_run
            elif k > 0:
                self.probe_every = PROBE_FIRST
        self.undrafted_run = self.undrafted_run + 1 if k == 0 else 0
        self._last_drafted = k > 0
        self._carry()
        return k

    def drafting_loses(self) -> bool:
        """What drafted steps really achieved (tokens per second, decayed) is below what plain
        steps achieved in this reply (or, before there were enough of those, below the plain
        rate the costs predict): wrong costs cannot keep drafting that does not pay."""
        tok, sec = self.real["drafted"]
        if not self.costs.reality_check or tok < REALITY_STEPS or sec <= 0:
            return False
        ptok, psec = self.real["plain"]
        plain = ptok / psec if ptok >= REALITY_STEPS and psec > 0 else 1.0 / self.costs.batch_cost(1)
        return tok / sec < 0.9 * plain

    def observe(self, k: int, n_accepted: int, seconds: float | None = None) -> None:
        """After a step with k drafts of which the first n_accepted were taken (in `seconds`,
        the whole step). Evidence decays per drafted step; a probe after a long pause
        discounts it further."""
        if seconds is not None and seconds > 0 and not self.costs.last_dropped:  # a stall says nothing
            for kind in self.real.values():  # every step ages both kinds: old evidence fades either way
                kind[0] *= self.decay
                kind[1] *= self.decay
            tok_sec = self.real["drafted" if k else "plain"]
            tok_sec[0] += n_accepted + 1
            tok_sec[1] += seconds
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
        self.costs.carry[self.carry_key].update(accepted=self.accepted, seen=self.seen, probe_every=self.probe_every,
                                                undrafted_run=self.undrafted_run)

    @property
    def paused(self) -> bool:
        return self.undrafted_run >= PAUSED_AFTER

    def explain(self) -> str:
        return explain(self.costs, self.acceptance(), self.k_max)


def joint_draft_length(controllers: list, costs: CostModel, room: int, others: int = 0,
                       others_tokens: float = 0) -> int | None:
    """One MTP draft length for several sequences drafting with auto in the same batch: the k
    whose whole batch gives the most expected tokens per second, from each controller's own
    acceptance and the measured cost of the batch (a CPU's kernels cost per row very unevenly
    with the batch size, so each choosing alone against the others' rows drifts to sizes that
    pay for nobody). `controllers`: the drafting sequences' (anything with `acceptance()` and
    `expected_tokens(k, acceptance)`); `room`: the most rows the batch may hold; `others`,
    `others_tokens`: the rows the batch's other sequences add and the tokens they should give.
    None: each sequence chooses alone (fewer than two, costs not measured yet, or where the
    best is not to draft: each controller then probes now and then)."""
    if len(controllers) < 2 or not costs.ready():
        return None
    acc = [c.acceptance() for c in controllers]
    best, best_rate, new_size = 0, 0.0, False
    for k in range(0, AUTO_K_MAX + 1):
        rows = others + len(controllers) * (k + 1)
        if rows > room:
            break
        if not costs.measured(rows):
            if k == 0:
                return 0  # not even the plain batch is measured: a plain step measures it
            if new_size:
                # one new size at a time, the shortest draft's, at its optimistic cost (a batch of
                # 8 sequences drafting 8 each is 72 rows, which a CPU takes seconds over: tried
                # one size after another, each only while it still may pay); longer ones
                # measured still count. Guessing on from the cost per row of the two largest
                # sizes measured was measured to stall: on a mixture of experts 9 rows cost 18 %
                # more than 8, 12 rows 4 % more than 9, and auto at 4 clients never left k=1
                continue
            new_size = True
        tokens = others_tokens + sum(c.expected_tokens(k, a) for c, a in zip(controllers, acc))
        rate = tokens / (costs.batch_cost(rows) + k * len(controllers) * (costs.draft or 0.0))
        if rate > best_rate:
            best, best_rate = k, rate
    return best or None


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
