"""Continuous batching: the sequences that generate at once share the target's context, and
every step decodes ONE target batch holding each sequence's part — a plain row, a verify of
its drafts, or a chunk of a new prompt — after the drafter's rows of every drafting sequence
went through the drafter as batches of their own (one per draft position).

    scheduler = Scheduler(runtime, new_sequence_state, n_slots, costs, is_eog, host_cache, turn_token)
    seq = scheduler.submit(job)          # from any thread
    for ev in seq.stream(): ...          # GenerationEvents, made on the scheduler's thread

One thread (started with the first job, ended with `close`) makes every llama.cpp computation
on the contexts: the sequences' steps, and what the engine runs alone (`call`: its warm-up and
measurements). llama.cpp's CPU backend (OpenMP) gives each thread that computes a team of
worker threads that stay; a second team on a 2-core machine halved every later decode.

Each slot is one sequence id of the target's cache and keeps
what its last generation left there, so a conversation's next request goes to the slot with
its longest cached prefix (or comes back from the host cache: prompt_cache.py). A new prompt
is decoded in chunks between the others' steps, so a long prompt never stalls the replies
already streaming; a chunk ends where a checkpoint of the sliding-window layers is taken. The
cells of the (unified) cache are counted: a request reserves its prompt and max_tokens, so no
other can cut its reply short; one that does not fit beside the running ones waits.

This module keeps the thread and the step loop; slots.py holds the sequences, the slots and
the cells, batch.py builds a step's batches, output.py turns finished steps into events.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Callable

from ..errors import EngineError
from ..strategies.base import Rows, Step
from .batch import batch_room, draft_rows, joint_k, prefill_chunk, start_step, target_parts
from .output import end_event, step_event, take_step
from .prompt_cache import CacheCounts, HostCache, checkpoint_marks
from .slots import Job, Sequence, Slot, SlotTable

__all__ = ["Job", "Scheduler", "Sequence", "Slot"]


class Scheduler:
    """The sequences' queue and the thread that decodes them together (see the module)."""

    def __init__(self, rt, prepare: Callable[[Sequence], None], n_slots: int, costs, is_eog: Callable[[int], bool],
                 host: HostCache | None = None, turn_token: int | None = None, counts: CacheCounts | None = None):
        self.rt = rt
        self.prepare = prepare  # makes a sequence's DecodeState (in the scheduler's thread)
        self.costs = costs  # the engine's CostModel: what batches and draft steps cost here
        self.is_eog = is_eog
        self.projector = None  # the engine's Projector, when pictures or sounds are loaded
        self.n_slots = n_slots
        self.turn_token = turn_token  # the token that starts a chat turn (checkpoints go before it)
        self.table = SlotTable(rt, n_slots, host, counts)  # the slots, the cells in use, the host cache
        self.slots = self.table.slots
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self.lock = threading.Condition()  # guards waiting/running; the tick lock is `contexts`
        self.contexts = threading.RLock()  # held while llama.cpp runs on the contexts
        self.next_id = 0  # each sequence's number, in the order submitted
        self.cancel_below = 0  # sequences numbered below this were cancelled (engine.cancel())
        self.closed = False
        self.thread: threading.Thread | None = None
        self.calls: list[tuple[Callable, Future]] = []  # `call`s waiting for the running sequences to end

    # ---- from any thread ------------------------------------------------------------------
    def submit(self, job: Job) -> Sequence:
        seq = Sequence(job)
        with self.lock:
            self._check_open()
            seq.number = self.next_id
            self.next_id += 1
            self.waiting.append(seq)
            self._wake()
        return seq

    def call(self, fn: Callable):
        """fn() on the scheduler's thread, once no sequence runs (none is admitted meanwhile),
        holding the contexts; returns what it returns or raises what it raises."""
        if threading.current_thread() is self.thread:
            return fn()
        done: Future = Future()
        with self.lock:
            self._check_open()
            self.calls.append((fn, done))
            self._wake()
        return done.result()

    def _check_open(self) -> None:
        if self.closed:
            raise EngineError("the engine is closed")

    def _wake(self) -> None:
        """With the lock held: the thread, started if it is not running, sees the new work."""
        if self.thread is None:
            self.thread = threading.Thread(target=self._loop, name="tandem-scheduler", daemon=True)
            self.thread.start()
        self.lock.notify_all()

    def counts(self) -> tuple[int, int]:
        """(generating, waiting for a slot)."""
        with self.lock:
            return len(self.running), len(self.waiting)

    def idle(self, timeout: float | None = None) -> bool:
        """Wait until no sequence runs or waits."""
        end = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while self.running or self.waiting:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self.lock.wait(left if left is not None else 0.5)
            return True

    def forget_idle(self) -> None:
        """Drop what idle slots cached (the next prompts decode from scratch)."""
        with self.contexts, self.lock:
            self.table.forget_idle()

    def forget_all(self) -> None:
        """After a failed decode the cache content is unknown: every slot starts empty."""
        self.table.forget_all()

    def cancel_all(self) -> None:
        """Every generation submitted so far stops after its current step (later ones run)."""
        with self.lock:
            self.cancel_below = self.next_id

    def close(self) -> None:
        with self.lock:
            self.cancel_below = self.next_id
            self.closed = True
            self.lock.notify_all()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join()

    # ---- the scheduler's thread -----------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self.lock:
                while not self.running and not self.waiting and not self.calls and not self.closed:
                    self.lock.wait()
                calls, self.calls = (self.calls, []) if not self.running else ([], self.calls)
                if self.closed and not self.running and not self.waiting and not calls:
                    self.thread = None
                    return
            with self.contexts:
                for fn, done in calls:
                    try:
                        done.set_result(fn())
                    except BaseException as e:
                        done.set_exception(e)
                if not calls:
                    self._tick()

    def _tick(self) -> None:
        self._end_stopped()
        if not self.calls:  # a call waits for the running sequences alone
            self._admit()
        try:
            self._decode()
        except BaseException as e:  # a decode failed: the cache is unknown, every sequence ends
            self.forget_all()
            for seq in list(self.running):
                self._fail(seq, e)
            if not isinstance(e, Exception):
                raise
        with self.lock:
            self.lock.notify_all()

    def _end_stopped(self) -> None:
        with self.lock:
            waiting = list(self.waiting)
        for seq in waiting:  # a consumer that left (or a cancel) before its prompt ran
            if self._stops(seq):
                with self.lock:
                    self.waiting.remove(seq)
                self._finish(seq, "cancelled")
        for seq in list(self.running):
            if seq.step is None and self._stops(seq):
                self._finish(seq, "cancelled")

    def _stops(self, seq: Sequence) -> bool:
        if seq.cancelled or seq.number < self.cancel_below:
            return True
        try:
            return bool(seq.job.should_stop())
        except Exception:
            return True

    def _admit(self) -> None:
        """Waiting prompts into free slots, in order, each to the slot that keeps most of its
        prefix (SlotTable.place), if its cells fit beside the running ones (else it waits)."""
        with self.lock:
            if not self.waiting:
                return
            free = [s for s in self.slots if not s.busy]
            while self.waiting and free:
                seq = self.waiting[0]
                # it reserves its prompt and its max_tokens
                seq.reserve = min(self.rt.n_ctx, len(seq.job.prompt) + seq.job.config.max_tokens)
                if not self.table.make_room(seq.reserve, self.running):
                    return
                place = self.table.place(seq.job.prompt, free)
                self.waiting.pop(0)
                free.remove(place.slot)
                seq.slot = place.slot
                seq.t_start = time.perf_counter()  # a restore of its cache is part of its prefill
                try:
                    keep = self.table.take(place, seq.job.prompt, self.running)
                    self._start(seq, keep)
                except BaseException as e:
                    self._fail(seq, e)
                    continue
                self.running.append(seq)

    def _start(self, seq: Sequence, keep: int) -> None:
        self.prepare(seq)
        st = seq.st
        st.seq = seq.slot.seq
        st.stats.reused_tokens = keep
        seq.todo = seq.job.prompt[keep:]
        seq.pos = keep
        if self.rt.n_swa > 0:  # without sliding-window layers any prefix is reusable as it is
            seq.marks = checkpoint_marks(seq.job.prompt, keep, self.turn_token)
        st.stats.prefill_tokens = len(seq.todo)
        st.n_past = keep
        if seq.todo[-1] < 0:
            raise EngineError("a prompt cannot end with a picture or sound: text must follow it")
        seq.job.strategy.prepare(st)

    def _decode(self) -> None:
        """One step of every running sequence: drafter batches, then one target batch."""
        decoders = [s for s in self.running if not s.todo]
        prefills = [s for s in self.running if s.todo]
        if not decoders and not prefills:
            return
        room, outputs = batch_room(self.rt, bool(decoders), len(prefills))
        cells = self.rt.n_ctx - self.table.cells(self.running)  # free cells: each row of the batch takes one
        if cells < len(decoders) + bool(prefills):
            self.table.evict(len(decoders) + bool(prefills) - cells)
            cells = self.rt.n_ctx - self.table.cells(self.running)
        self._start_steps(decoders, min(room, outputs, cells))
        draft_rows(self.running, self.rt.drafter, self.costs, self._advance)
        parts = target_parts(self.rt.target, decoders, prefills, self.running, room, cells, self._prefill_chunk)
        if parts:
            self._submit(parts)

    def _start_steps(self, decoders: list[Sequence], limit: int) -> None:
        """Each decoder's step begins and runs until it asks for rows; `limit`: the rows the
        target batch may hold. Auto's MTP drafters draft one joint length (batch.joint_k)."""
        joint = joint_k(decoders, self.costs, limit)
        rows = 0
        for i, seq in enumerate(decoders):
            st = seq.st
            left = limit - rows - (len(decoders) - i - 1)  # a row each, at least, for the decoders still to choose
            if left < 1 or st.n_past + 1 > st.n_ctx:  # its context, or the shared one, is full
                self._finish(seq, "context")
                continue
            start_step(seq, decoders, i, rows, left, joint)
            self._advance(seq, None)
            rows += st.planned
            seq.last_rows = st.planned

    def _submit(self, parts: list[tuple]) -> None:
        """The target batch is decoded; each part's sequence gets its rows."""
        tgt = self.rt.target
        # the hidden rows the drafter reads, when any sequence of the batch drafts with it
        tgt.set_hidden_output(any(seq.job.strategy.needs_drafter for seq, _, _ in parts))
        n_rows = tgt.n
        t0, cpu0 = time.perf_counter(), time.process_time()
        tgt.submit()
        for seq, (at, out_at), chunk in parts:
            if chunk is not None:
                self._prefilled(seq, chunk, Rows(tgt, at, out_at))
            else:
                self._advance(seq, Rows(tgt, at, out_at))
        # wall time, Python included: what a batch of this many rows really costs here (and the
        # process's CPU time, which tells a stall of the machine from the cost of the batch)
        if all(chunk is None for _, _, chunk in parts):
            self.costs.record_batch(n_rows, time.perf_counter() - t0, time.process_time() - cpu0)
        for seq, _, _ in parts:
            if seq in self.running:
                self._after_step(seq)

    def _advance(self, seq: Sequence, value) -> None:
        """Run a sequence's step until it asks for something (seq.wants) or is done."""
        try:
            seq.wants = seq.step.send(value) if value is not None else next(seq.step)
        except StopIteration as done:
            seq.step, seq.wants = None, done.value
        except BaseException as e:
            seq.step = None
            self._fail(seq, e)

    def _prefill_chunk(self, seq: Sequence, room: int) -> list[int] | None:
        return prefill_chunk(seq, room, self.projector, self.rt.target, self._fail,
                             seq.marks[0] if seq.marks else None)

    def _prefilled(self, seq: Sequence, chunk: list[int], rows: Rows) -> None:
        st = seq.st
        seq.slot.cached.extend(chunk)
        seq.pos += len(chunk)
        del seq.todo[:len(chunk)]
        st.n_past = seq.pos
        while seq.marks and seq.marks[0] <= seq.pos:
            if seq.marks.pop(0) == seq.pos and seq.todo:
                self.table.checkpoint(seq.slot)
        if seq.todo:
            return
        # the prompt's last row: the first token (as llama.cpp's own generate does) and, for MTP,
        # the hidden state the first draft starts from
        row = len(chunk) - 1
        if seq.job.strategy.needs_drafter:
            rows.hidden(row, st.pending_h)
        st.n_past = len(seq.job.prompt)
        try:
            tok = st.pick(rows.logits(row))
        except BaseException as e:
            self._fail(seq, e)
            return
        st.tokens.append(tok)
        seq.first = Step([tok], [False])
        st.stats.prefill_s = time.perf_counter() - seq.t_start
        seq.llama0, seq.draft0 = self._llama_s()

    def _llama_s(self) -> tuple[float, float]:
        """Seconds inside llama.cpp so far: (target + drafter, drafter)."""
        d = self.rt.drafter.llama_s if self.rt.drafter else 0.0
        return self.rt.target.llama_s + d, d

    def _after_step(self, seq: Sequence) -> None:
        """A sequence's finished step becomes its event (output.step_event); it ends at a stop,
        at its token budget or when its context is full."""
        step, is_first = take_step(seq)
        if step is None:
            return
        ev = step_event(seq, step, is_first, self.is_eog, self._llama_s(), self.rt.target)
        seq.put(ev)
        if ev.finish_reason is not None:
            self._release(seq, ev.finish_reason)
        elif seq.st.n_past + 1 > seq.st.n_ctx:
            self._finish(seq, "context")

    def _finish(self, seq: Sequence, finish: str) -> None:
        """An end that no step made (a stop, the context, a cancel while waiting): one last
        empty event."""
        seq.put(end_event(seq, finish))
        self._release(seq, finish)

    def _release(self, seq: Sequence, finish: str, cache_known: bool = True) -> None:
        """The sequence ends: its grammar is freed, its slot keeps exactly tokens[:n_past] (or,
        after a failure, nothing) and is free for the next."""
        if seq.job.grammar is not None:
            seq.job.grammar.close()
        slot, st = seq.slot, seq.st
        if st is not None:
            st.stats.finish_reason = finish
        if slot is not None:
            # mid-prompt, it holds the chunks decoded (as its slot says already)
            cached = list(st.tokens[:st.n_past]) if st is not None and not seq.todo else None
            self.table.free(slot, cached, cache_known)
        seq.step = None
        with self.lock:
            if seq in self.running:
                self.running.remove(seq)
            self.lock.notify_all()

    def _fail(self, seq: Sequence, error: BaseException) -> None:
        """A sequence's own error (its grammar, a picture), or a failed batch: it ends with the
        error, its slot emptied."""
        seq.put(error)
        self._release(seq, "error", cache_known=False)

