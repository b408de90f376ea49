"""Speculative decoding from the draft sources a model has: MTP (a Gemma 4 assistant drafter,
mtp.py) and lookup (text the reply copies from the prompt or itself, lookup.py). Each step
drafts from one source — with auto, the one and the length with the most expected tokens per
second, from the costs measured on this machine and each source's own acceptance by
position — and the target verifies [id_last, d_0 .. d_{k-1}] in one batch; the longest
agreeing prefix is kept plus one token of the target's own; rejected positions are removed
from the cache.

Greedy: accept while the target's choice equals the draft, so the output is the baseline's.
Sampling: accept d_i with probability min(1, p(d_i)/q(d_i)) and on rejection sample from
normalised max(0, p - q), which leaves the output distributed exactly as the target's. A
lookup proposal is a point distribution (q = 1 on its token).
Under a grammar the target's choice at row i is constrained by the grammar state after the
tokens kept before it (p is the constrained distribution); only kept tokens reach it. Tokens
the grammar forces are drafted first, free (counted as lookup drafts: text known in advance),
and lookup proposals are cut where the grammar rejects them.

The choice of source and length depends only on what happened before the step, never on the
step's own logits, so greedy output stays the baseline's and sampling stays exact.
"""

from __future__ import annotations

import time

import numpy as np

from ..generation import AUTO
from ..models.memory_plan import MAX_OUTPUTS
from ..sampling import prob_of, sample_residual
from . import mtp
from .base import DecodeState, DecodeStrategy, Step, StepRun, TargetRows
from .draft_control import AUTO_K_MAX, DraftController
from .lookup import MAX_RUN, NgramIndex

SOURCES = ("mtp", "lookup")
# The lookup lengths auto chooses among. Every length tried must be measured before the cost
# model knows it, and on a CPU a verify of a multiple of 4 rows costs little more than one row
# fewer (SIMD lanes fill up: 8 rows cost less than 7 on Gemma 3 270M here), so these few are
# learnt quickly and lose nothing; a shorter proposal is checked whole.
LOOKUP_LENGTHS = (1, 3, 7, 11, 15, 23, 31, 47)


class Speculative(DecodeStrategy):
    def __init__(self, sources: tuple[str, ...] = ("mtp",), draft_max: int | str = 3):
        if not sources or any(s not in SOURCES for s in sources):
            raise ValueError(f"draft sources are {', '.join(SOURCES)}")
        if draft_max == AUTO:
            self.draft_max, self.adaptive = AUTO_K_MAX, True
        elif isinstance(draft_max, int) and draft_max >= 1:
            self.draft_max, self.adaptive = draft_max, False
        else:
            raise ValueError("draft length must be at least 1, or 'auto'")
        self.needs_drafter, self.use_lookup = "mtp" in sources, "lookup" in sources  # MTP drafts need the drafter
        self.name = "hybrid" if self.needs_drafter and self.use_lookup else sources[0]
        self.controller: DraftController | None = None  # MTP's
        self.lookup_controller: DraftController | None = None
        self.index: NgramIndex | None = None

    @property
    def draft_label(self) -> int | str:
        """What the stats call this draft length: 'auto' or the fixed number."""
        return AUTO if self.adaptive else self.draft_max

    def prepare(self, st: DecodeState) -> None:
        if self.adaptive and self.needs_drafter:
            self.controller = DraftController(st.costs, self.draft_max)
        if self.use_lookup:
            self.index = NgramIndex()
            if self.adaptive:
                self.lookup_controller = DraftController(st.costs, MAX_RUN, carry_key="lookup", free_drafts=True,
                                                         lengths=LOOKUP_LENGTHS)

    def _choose(self, st: DecodeState, limit: int, proposal: list[int]) -> tuple[str, int]:
        """(source, length) for this step; ("", 0) is a plain step."""
        if not self.adaptive:
            if proposal:
                return "lookup", min(self.draft_max, len(proposal))
            return ("mtp", min(self.draft_max, limit)) if self.needs_drafter and limit > 0 else ("", 0)
        if self.controller is None:
            k_m = 0
        elif st.mtp_k is not None:  # chosen with the other sequences drafting in the same step
            k_m = min(st.mtp_k, limit)
        else:
            k_m = self.controller.choose(limit, st.others, st.others_tokens)
        k_l = self.lookup_controller.choose(len(proposal), st.others, st.others_tokens) if proposal else 0
        if k_l and k_m and st.costs.ready(need_draft=True):
            r_m = self.controller.expected_rates(k_m, others=st.others, others_tokens=st.others_tokens)[k_m]
            r_l = self.lookup_controller.expected_rates(k_l, others=st.others, others_tokens=st.others_tokens)[k_l]
            return ("lookup", k_l) if r_l >= r_m else ("mtp", k_m)
        if k_l:
            return "lookup", k_l
        return ("mtp", k_m) if k_m else ("", 0)

    def step(self, st: DecodeState, budget: int) -> StepRun:
        rt = st.rt
        # the verify batch writes positions n_past .. n_past+k, which must fit the context
        # and one ubatch (see Runtime: rollback safety of the sliding-window cache), and the
        # rows the scheduler leaves this sequence in the step's batch
        limit = max(0, min(budget - 1, st.n_ctx - st.n_past - 1, rt.n_ubatch - 1, MAX_OUTPUTS - 1, st.room - 1))
        t0 = time.perf_counter()
        # tokens a grammar forces next (a fixed key, a closing brace) are drafts for free, sure to
        # be kept: proposed whole, ahead of any source; other proposals are cut where the grammar
        # would reject them, before they cost a verify row
        forced = st.grammar.forced()[:limit] if st.grammar is not None and limit > 0 else []
        if forced:
            proposal, (source, k) = forced, ("lookup", len(forced))
        else:
            proposal = self.index.propose(st.tokens, min(limit, MAX_RUN)) if self.index is not None else []
            if st.grammar is not None and proposal:
                proposal = proposal[:st.grammar.valid_prefix(proposal)]
            source, k = self._choose(st, limit, proposal)
        st.planned = k + 1
        q_dists = None
        if source == "mtp":
            drafts, q_dists = yield from mtp.draft(st, k)
        else:
            drafts = proposal[:k]
        n_acc, new = yield from verify(st, drafts, q_dists, self.needs_drafter)
        k = len(drafts)
        s = st.stats
        s.steps += 1
        s.draft_tokens += k
        s.accepted_tokens += n_acc
        s.undrafted_steps += k == 0
        s.k_now = k
        seconds = time.perf_counter() - t0
        if source == "lookup":
            s.lookup_draft_tokens += k
            s.lookup_accepted_tokens += n_acc
        s.count_positions(k, n_acc)  # every draft, whatever proposed it: one acceptance on every surface
        # each source learns from its own drafts; a plain step is every source's yardstick
        for ctl, mine in ((self.controller, source == "mtp"), (self.lookup_controller, source == "lookup")):
            if ctl is not None and (mine or k == 0) and not forced:  # forced drafts say nothing of a source
                ctl.observe(k, n_acc, seconds)
        if self.controller is not None:
            s.paused = self.controller.paused and source != "lookup"
        return Step(new, [True] * n_acc + [False], source if k else "")


def verify(st: DecodeState, drafts: list[int], q_dists: list | None, need_h: bool):
    """The target checks [id_last] + drafts in one batch and keeps the longest agreeing prefix
    plus one token of its own (see the module's docstring). q_dists: the distribution each
    draft was sampled from; None for greedy drafts and lookup's point proposals. A generator
    (the rows go into the step's batch); returns the number accepted and the new tokens, with
    st and the cache updated."""
    p = st.params
    k, pos0 = len(drafts), st.n_past
    rows = yield TargetRows([st.id_last] + drafts, pos0, "all")

    n_acc = 0
    if p.greedy and p.plain and st.grammar is None and st.top_logprobs < 0:
        best = np.argmax(rows.block(k + 1), axis=1)
        while n_acc < k and best[n_acc] == drafts[n_acc]:
            n_acc += 1
        bonus = int(best[n_acc])
    elif p.greedy:
        while True:
            t = st.pick(rows.logits(n_acc), drafts[:n_acc])
            if n_acc < k and t == drafts[n_acc]:
                n_acc += 1
                continue
            bonus = t
            break
    else:
        bonus = None
        while n_acc < k:
            pd = st.distribution(rows.logits(n_acc), drafts[:n_acc])  # within the grammar, if any
            d = drafts[n_acc]
            q = q_dists[n_acc] if q_dists is not None else (np.array([d]), np.array([1.0]))
            if st.rng.random() < prob_of(*pd, d) / prob_of(*q, d):
                st.keep(d, rows.logits(n_acc), drafts[:n_acc])
                n_acc += 1
                continue
            bonus = sample_residual(*pd, *q, st.rng)
            st.keep(bonus, rows.logits(n_acc), drafts[:n_acc])
            break
        if bonus is None:
            bonus = st.pick(rows.logits(k), drafts)

    if need_h:  # the hidden row that produced `bonus` seeds the next step's first draft
        rows.hidden(n_acc, st.pending_h)
    new = drafts[:n_acc] + [bonus]
    st.tokens.extend(new)
    st.n_past = pos0 + 1 + n_acc
    if n_acc < k:
        st.rt.target.truncate(st.n_past, st.seq)
    return n_acc, new
