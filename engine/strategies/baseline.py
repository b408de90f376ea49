"""Baseline: one target decode per token, no drafter."""

from __future__ import annotations

from ..sampling import distribution, greedy_token, sample_from
from .base import DecodeState, DecodeStrategy, Step


class Baseline(DecodeStrategy):
    name = "baseline"

    def prepare(self, st: DecodeState) -> None:
        st.rt.target.set_hidden_output(False)

    def step(self, st: DecodeState, budget: int) -> Step:
        tgt = st.rt.target
        tgt.decode([st.id_last], st.n_past, outputs="last")
        st.n_past += 1
        logits = tgt.logits(0)
        if st.params.greedy:
            tok = greedy_token(logits, st.recent(), st.params)
        else:
            ids, probs = distribution(logits, st.recent(), st.params)
            tok = sample_from(ids, probs, st.rng)
        st.tokens.append(tok)
        st.stats.steps += 1
        return Step([tok], [False])
