"""Baseline: one target decode per token, no drafter."""

from __future__ import annotations

from .base import DecodeState, DecodeStrategy, Step, StepRun, TargetRows


class Baseline(DecodeStrategy):
    name = "baseline"

    def step(self, st: DecodeState, budget: int) -> StepRun:
        rows = yield TargetRows([st.id_last], st.n_past, "last")
        st.n_past += 1
        tok = st.pick(rows.logits(0))
        st.tokens.append(tok)
        st.stats.steps += 1
        return Step([tok], [False])
