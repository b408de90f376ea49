"""The MTP draft source: a Gemma 4 assistant drafter proposes k tokens, all at position n_past
(it reads the target's KV cache, which ends at n_past-1, and chains its own hidden rows,
starting from the target's hidden row that produced the newest token).

Greedy: each draft is the drafter's favourite (under a grammar, its favourite among what the
grammar allows, on a copy of the grammar's state).
Sampling: each draft is sampled from the drafter's distribution q, which verification needs
(see speculative.py).
"""

from __future__ import annotations

from ..local.grammar import GrammarError
from ..sampling import distribution, greedy_token, processed, sample_from
from typing import Generator

from .base import DecodeState, DraftRow


def draft(st: DecodeState, k: int) -> Generator[DraftRow, tuple, tuple[list[int], list | None]]:
    """Up to k drafts, and for sampling the distribution each was drawn from (a generator:
    each draft step is one row of a drafter batch, see base.py)."""
    p = st.params
    drafts: list[int] = []
    q_dists = [] if not p.greedy else None
    h = st.pending_h
    tok, pos0 = st.id_last, st.n_past
    dg = st.grammar.clone() if st.grammar is not None and p.greedy and k else None
    try:
        for _ in range(k):
            logits, h = yield DraftRow(tok, pos0, h)
            if dg is not None:
                try:
                    tok = dg.best(processed(logits, st.recent(drafts), p))
                    dg.accept(tok)
                except GrammarError:  # nothing allowed here: the target's own row will say so
                    break
            elif p.greedy:
                tok = greedy_token(logits, st.recent(drafts), p)
            else:
                q = distribution(logits, st.recent(drafts), p)
                tok = sample_from(*q, st.rng)
                q_dists.append(q)
            drafts.append(tok)
    finally:
        if dg is not None:
            dg.close()
    return drafts, q_dists
