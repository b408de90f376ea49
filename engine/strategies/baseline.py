"""Baseline: one target decode per token, no drafter."""

from __future__ import annotations

import time

from .base import DecodeState, DecodeStrategy, Step


class Baseline(DecodeStrategy):
    name = "baseline"

    def prepare(self, st: DecodeState) -> None:
        st.rt.target.set_hidden_output(False)

    def step(self, st: DecodeState, budget: int) -> Step:
        tgt = st.rt.target
        t0, cpu0 = time.perf_counter(), time.process_time()
        tgt.decode([st.id_last], st.n_past, outputs="last")
        st.n_past += 1
        tok = st.pick(tgt.logits(0))
        # what adaptive drafting compares against
        st.costs.record_batch(1, time.perf_counter() - t0, time.process_time() - cpu0)
        st.tokens.append(tok)
        st.stats.steps += 1
        return Step([tok], [False])
