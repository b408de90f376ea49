"""MTP speculative decoding with a Gemma 4 assistant drafter.

Per step: the drafter proposes k tokens, all at position n_past (it reads the target's KV
cache, which ends at n_past-1, and chains its own hidden rows); the target verifies
[id_last, d_0 .. d_{k-1}] in one batch; the longest agreeing prefix is kept plus one token
of the target's own; rejected positions are removed from the cache.

Greedy: accept while the target's argmax equals the draft, so the output is the baseline's.
Sampling: accept d_i with probability min(1, p(d_i)/q(d_i)) and on rejection sample from
normalised max(0, p - q) — the standard speculative-sampling rule, which leaves the output
distributed exactly as the target's.
Under a grammar the target's choice at row i is constrained by the grammar state after the
tokens kept before it (p is the constrained distribution). Greedy, the drafter drafts within
the grammar too, on a copy of its state; sampling, it drafts freely and a draft the grammar
rules out is simply rejected. Only kept tokens reach the target's grammar.
"""

from __future__ import annotations

import time

import numpy as np

from ..generation import AUTO
from ..runtime import MAX_OUTPUTS
from ..sampling import distribution, greedy_token, prob_of, processed, sample_from, sample_residual
from .base import DecodeState, DecodeStrategy, Step
from .draft_control import AUTO_K_MAX, DraftController


class MTP(DecodeStrategy):
    name = "mtp"
    needs_drafter = True

    def __init__(self, draft_max: int | str = 3):
        if draft_max == AUTO:
            self.draft_max, self.adaptive = AUTO_K_MAX, True
        elif isinstance(draft_max, int) and draft_max >= 1:
            self.draft_max, self.adaptive = draft_max, False
        else:
            raise ValueError("draft length must be at least 1, or 'auto'")
        self.controller: DraftController | None = None

    @property
    def draft_label(self) -> int | str:
        """What the stats call this draft length: 'auto' or the fixed number."""
        return AUTO if self.adaptive else self.draft_max

    def prepare(self, st: DecodeState) -> None:
        st.rt.target.set_hidden_output(True)
        if self.adaptive:
            self.controller = DraftController(st.costs, self.draft_max)

    def step(self, st: DecodeState, budget: int) -> Step:
        rt, p = st.rt, st.params
        tgt, dr = rt.target, rt.drafter
        # the verify batch writes positions n_past .. n_past+k, which must fit the context
        # and one ubatch (see Runtime: rollback safety of the sliding-window cache)
        limit = min(budget - 1, st.n_ctx - st.n_past - 1, rt.n_ubatch - 1, MAX_OUTPUTS - 1)
        if self.controller is not None:
            k = self.controller.choose(limit)
        else:
            k = max(0, min(self.draft_max, limit))
        pos0 = st.n_past
        t0 = time.perf_counter()

        drafts: list[int] = []
        q_dists = []
        dr.h[:] = st.pending_h
        tok = st.id_last
        # greedy under a grammar: the drafter drafts within it too (a copy of its state), so its
        # drafts are ones the target may keep; where no allowed token is cheap to find the draft
        # ends there, as a whole-vocabulary check costs more than the drafts could save
        dg = st.grammar.clone() if st.grammar is not None and p.greedy and k else None
        for _ in range(k):
            logits = dr.step(tok, pos0)
            if dg is not None:
                tok = dg.best(processed(logits, st.recent(drafts), p), full=False)
                if tok < 0:
                    break
                dg.accept(tok)
            elif p.greedy:
                tok = greedy_token(logits, st.recent(drafts), p)
            else:
                q = distribution(logits, st.recent(drafts), p)
                tok = sample_from(*q, st.rng)
                q_dists.append(q)
            drafts.append(tok)

        if dg is not None:
            dg.close()
            k = len(drafts)
        t1 = time.perf_counter()
        tgt.decode([st.id_last] + drafts, pos0, outputs="all")

        n_acc = 0
        if p.greedy and p.plain and st.grammar is None and st.top_logprobs < 0:
            best = np.argmax(tgt.logits_rows(k + 1), axis=1)
            while n_acc < k and best[n_acc] == drafts[n_acc]:
                n_acc += 1
            bonus = int(best[n_acc])
        elif p.greedy:
            while True:
                t = st.pick(tgt.logits(n_acc), drafts[:n_acc])
                if n_acc < k and t == drafts[n_acc]:
                    n_acc += 1
                    continue
                bonus = t
                break
        else:
            bonus = None
            while n_acc < k:
                pd = st.distribution(tgt.logits(n_acc), drafts[:n_acc])  # within the grammar, if any
                d = drafts[n_acc]
                q = q_dists[n_acc]
                ratio = prob_of(*pd, d) / prob_of(*q, d)
                if st.rng.random() < ratio:
                    st.keep(d, tgt.logits(n_acc), drafts[:n_acc])
                    n_acc += 1
                    continue
                bonus = sample_residual(*pd, *q, st.rng)
                st.keep(bonus, tgt.logits(n_acc), drafts[:n_acc])
                break
            if bonus is None:
                bonus = st.pick(tgt.logits(k), drafts)

        # the hidden row that produced `bonus` seeds the next step's first draft
        tgt.hidden(n_acc, st.pending_h)
        new = drafts[:n_acc] + [bonus]
        st.tokens.extend(new)
        st.n_past = pos0 + 1 + n_acc
        if n_acc < k:
            tgt.truncate(st.n_past)

        # wall time, Python included: what a choice of k really costs on this machine
        st.costs.record_batch(k + 1, time.perf_counter() - t1)
        if k:
            st.costs.record_draft((t1 - t0) / k)
        s = st.stats
        s.steps += 1
        s.draft_tokens += k
        s.accepted_tokens += n_acc
        s.undrafted_steps += k == 0
        s.k_now = k
        s.count_positions(k, n_acc)
        if self.controller is not None:
            self.controller.observe(k, n_acc)
            s.paused = self.controller.paused
        return Step(new, [True] * n_acc + [False])
