"""Building one step's batches: the rows the target batch may hold, the drafter's rows of every
drafting sequence (one drafter batch per draft position), and the target batch itself — each
decoding sequence's rows (a plain row or a verify of its drafts) and chunks of new prompts."""

from __future__ import annotations

import time
from typing import Callable

from ..errors import EngineError
from ..strategies.base import DraftRow, TargetRows
from ..strategies.draft_control import joint_draft_length
from .slots import Sequence

# rows a prompt chunk may take while other sequences stream: small enough that their steps
# come often (a 512-row chunk costs ~10 decodes on a CPU), large enough to prefill quickly
CHUNK_SHARED = 128


def batch_room(rt, decoding: bool, n_prefills: int) -> tuple[int, int]:
    """(rows, output rows) the step's target batch may hold: with verify rows in it (some
    sequence `decoding`), one ubatch (rolling back a verify never needs a recycled
    sliding-window cell); the output rows the context has (a prompt's last chunk needs one)."""
    room = min(rt.n_ubatch, rt.target.n_batch) if decoding else rt.target.n_batch
    return room, rt.n_outputs_max - n_prefills


def joint_k(decoders: list[Sequence], costs, room: int) -> int | None:
    """One MTP draft length for every sequence drafting with auto (draft_control's
    `joint_draft_length`), the others' rows as at their last step."""
    ctl = [s for s in decoders if s.job.strategy.controller is not None]
    rest = [s for s in decoders if s.job.strategy.controller is None]
    return joint_draft_length([s.job.strategy.controller for s in ctl], costs, room,
                              sum(s.last_rows for s in rest), sum(s.last_tokens for s in rest))


def start_step(seq: Sequence, decoders: list[Sequence], i: int, rows: int, left: int, joint: int | None) -> None:
    """The i-th decoder's step begins (a generator, not run yet): it may add `left` rows; the
    others' rows are those chosen so far (`rows`) and the rest as at their last step (so each
    sequence's choice sees the batch the others make, drafts included)."""
    st = seq.st
    st.others = rows + sum(s.last_rows for s in decoders[i + 1:])
    st.others_tokens = sum(s.last_tokens for s in decoders if s is not seq)
    st.room, st.planned, st.mtp_k = left, 1, joint
    seq.step = seq.job.strategy.step(st, seq.job.config.max_tokens - st.stats.generated_tokens)


def draft_rows(running: list[Sequence], drafter, costs, advance: Callable[[Sequence, object], None]) -> None:
    """The drafter's rows of every drafting sequence, one batch per draft position."""
    while True:
        asking = [s for s in running if s.step is not None and isinstance(s.wants, DraftRow)]
        if not asking:
            return
        for i, seq in enumerate(asking):
            drafter.h_rows[i] = seq.wants.h
        t0 = time.perf_counter()
        drafter.step_rows([(s.wants.token, s.wants.pos, s.st.seq) for s in asking])
        for i, seq in enumerate(asking):
            advance(seq, (drafter.logits(i), drafter.h_out(i)))
        # per drafting sequence, Python's choice of each draft included: what one more
        # sequence's draft step adds to the batch (alone, the whole step)
        costs.record_draft((time.perf_counter() - t0) / len(asking))


def target_parts(tgt, decoders: list[Sequence], prefills: list[Sequence], running: list[Sequence],
                 room: int, cells: int, chunk_of: Callable[[Sequence, int], list[int] | None]) -> list[tuple]:
    """The target batch, begun and filled: the decoders' rows that their steps ask for, then
    prompt chunks (`chunk_of(seq, room)`) in the rows left. Each part: (sequence, its first
    row and first output row, the prompt chunk or None)."""
    tgt.begin()
    parts = []
    for seq in decoders:
        if seq in running and seq.step is not None and isinstance(seq.wants, TargetRows):
            w = seq.wants
            parts.append((seq, tgt.add(w.tokens, w.pos0, seq.st.seq, w.outputs), None))
    for seq in prefills:
        free = min(room, cells) - tgt.n
        chunk = chunk_of(seq, min(free, CHUNK_SHARED) if decoders else free) if free > 0 else None
        if chunk and seq in running:
            last = len(chunk) == len(seq.todo)
            parts.append((seq, tgt.add(chunk, seq.pos, seq.st.seq, "last" if last else "none"), chunk))
    return parts


def prefill_chunk(seq: Sequence, room: int, projector, target,
                  fail: Callable[[Sequence, BaseException], None], stop_at: int | None = None) -> list[int] | None:
    """The next prompt chunk (at most `room` tokens, ending at position `stop_at` at the latest,
    where a checkpoint is taken) of a prefilling sequence; an image or a sound at its head is
    decoded first, by the projector, on its own (one it has not prepared fails the sequence,
    not the batch: None)."""
    st = seq.st
    todo = seq.todo
    while todo and todo[0] < 0:
        n = 1
        while n < len(todo) and todo[n] == todo[0]:
            n += 1
        run = projector.run_for(todo[0]) if projector is not None else None
        if run is None or run.n_pos != n:
            fail(seq, EngineError("the prompt names a picture or sound that is not prepared"))
            return None
        st.stats.media_s += projector.decode(run, target.ctx, seq.pos, target.n_batch, st.seq)
        seq.slot.cached.extend(todo[:n])
        seq.pos += n
        del todo[:n]
    if stop_at is not None and stop_at > seq.pos:
        room = min(room, stop_at - seq.pos)
    n = 0
    while n < min(room, len(todo)) and todo[n] >= 0:
        n += 1
    return todo[:n] if n else None

