"""What a sequence's finished step becomes for its consumer: one `GenerationEvent` (the
tokens kept, cut at end-of-generation or the token budget; their text; the stats)."""

from __future__ import annotations

import time
from typing import Callable

from ..generation import GenerationEvent
from ..stats import GenerationStats
from ..strategies.base import Step
from .slots import Sequence


def take_step(seq: Sequence) -> tuple[Step | None, bool]:
    """The step a sequence finished, if any, taken from it: (step, whether it is the first
    token, which the prefill picked); (None, False) while its step still runs."""
    if seq.first is not None:
        step, seq.first = seq.first, None
        return step, True
    if seq.step is None and isinstance(seq.wants, Step):
        step, seq.wants = seq.wants, None
        seq.last_tokens = len(step.tokens)
        return step, False
    return None, False


def step_event(seq: Sequence, step: Step, is_first: bool, is_eog: Callable[[int], bool],
               llama_s: tuple[float, float], target) -> GenerationEvent:
    """A finished step as its event: stop at end-of-generation or at the token budget (the
    target's cache is cut back to what is kept), the text, the stats (`llama_s`: seconds inside
    llama.cpp so far, target + drafter and drafter). The event carries a snapshot of the stats."""
    st, text = seq.st, seq.job.text
    keep, finish = _cut(seq, step, is_eog, target)
    pieces = [text.feed(t, d) for t, d in zip(step.tokens[:keep], step.drafted[:keep])]
    for piece in pieces:
        piece.source = step.source if piece.drafted else ""
    for piece, lp in zip(pieces, st.logprobs):  # recorded in the order the tokens were kept
        piece.logprob = lp
    st.logprobs.clear()
    answer = "".join(p.text for p in pieces if p.channel == "answer")
    thinking = "".join(p.text for p in pieces if p.channel == "thinking")
    _time(seq, keep, is_first, llama_s)
    if finish is not None:
        a, th = text.flush()  # bytes of an unfinished character, as U+FFFD
        if pieces and (a or th):
            pieces[-1].text += a or th
        answer += a
        thinking += th
    st.stats.finish_reason = finish
    return GenerationEvent(pieces, answer, thinking, st.stats.snapshot(), finish)


def _cut(seq: Sequence, step: Step, is_eog: Callable[[int], bool], target) -> tuple[int, str | None]:
    """(tokens of the step kept, why the generation finishes or None). Past a stop the cache
    may hold tokens: they are dropped, so that it holds exactly tokens[:n_past] with the last
    kept token pending."""
    st, max_tokens = seq.st, seq.job.config.max_tokens
    generated = st.stats.generated_tokens
    keep, finish = len(step.tokens), None
    for i, tok in enumerate(step.tokens):
        if is_eog(tok):
            keep, finish = i, "stop"
            break
        if generated + i + 1 >= max_tokens:
            keep, finish = i + 1, "length"
            break
    if keep < len(step.tokens):
        drop = len(step.tokens) - keep
        n_tok = len(st.tokens) - drop + (1 if finish == "stop" else 0)
        del st.tokens[n_tok:]
        if st.n_past > len(st.tokens) - 1:
            st.n_past = len(st.tokens) - 1
            target.truncate(st.n_past, st.seq)
    return keep, finish


def _time(seq: Sequence, keep: int, is_first: bool, llama_s: tuple[float, float]) -> None:
    """The stats' token count and clocks after a step that kept `keep` tokens."""
    stats = seq.st.stats
    now = time.perf_counter()
    if is_first:
        stats.ttft_s = now - seq.t_start
        seq.t_first = now
    stats.generated_tokens += keep
    stats.decode_s = now - seq.t_first
    # time inside llama.cpp while this sequence decoded (batches it shared with others count whole)
    llama, draft = llama_s
    stats.llama_s, stats.draft_llama_s = llama - seq.llama0, draft - seq.draft0


def end_event(seq: Sequence, finish: str) -> GenerationEvent:
    """An end that no step made (a stop, the context, a cancel while waiting): one last empty
    event."""
    stats = seq.st.stats if seq.st is not None else GenerationStats(prompt_tokens=len(seq.job.prompt))
    stats.finish_reason = finish
    return GenerationEvent([], "", "", stats.snapshot(), finish)
