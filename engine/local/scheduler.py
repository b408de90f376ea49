"""Continuous batching: the sequences that generate at once share the target's context, and
every step decodes ONE target batch holding each sequence's part — a plain row, a verify of
its drafts, or a chunk of a new prompt — after the drafter's rows of every drafting sequence
went through the drafter as batches of their own (one per draft position).

    scheduler = Scheduler(runtime, new_sequence_state, n_slots, reusable, costs, is_eog)
    seq = scheduler.submit(job)          # from any thread
    for ev in seq.stream(): ...          # GenerationEvents, made on the scheduler's thread

One thread (started with the first job, ended with `close`) owns every llama.cpp call on the
contexts while sequences run. Each slot is one sequence id of the target's cache and keeps
what its last generation left there, so a conversation's next request goes to the slot with
its longest cached prefix. A new prompt is decoded in chunks between the others' steps, so a
long prompt never stalls the replies already streaming. The cells of the (unified) cache are
counted: a request reserves its prompt and max_tokens, so no other can cut its reply short;
one that does not fit beside the running ones waits (idle slots are forgotten first).
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from ..errors import EngineError
from ..generation import GenerationConfig, GenerationEvent
from ..stats import GenerationStats
from ..strategies.base import DecodeState, DecodeStrategy, DraftRow, Rows, Step, TargetRows
from ..strategies.draft_control import AUTO_K_MAX
from ..gemma4.text import TextAssembler

# rows a prompt chunk may take while other sequences stream: small enough that their steps
# come often (a 512-row chunk costs ~10 decodes on a CPU), large enough to prefill quickly
CHUNK_SHARED = 128


@dataclass
class Job:
    """A generation as the engine prepared it: the prompt, its settings, its strategy."""

    prompt: list[int]
    config: GenerationConfig
    strategy: DecodeStrategy
    should_stop: Callable[[], bool]
    grammar: object = None
    text: TextAssembler | None = None
    # where its events go, called on the scheduler's thread (the server's: onto its event loop);
    # None: the sequence's own queue, read by `Sequence.stream()`
    sink: Callable[[object], None] | None = None


@dataclass
class Slot:
    seq: int  # the sequence id in the target's cache
    cached: list[int] = field(default_factory=list)  # tokens whose K/V it holds, in order
    used_at: float = 0.0
    busy: bool = False


class Sequence:
    """One generation in a slot: its decode state, the step it is in, its events."""

    def __init__(self, job: Job):
        self.job = job
        self.events: queue.SimpleQueue = queue.SimpleQueue()
        self.cancelled = False  # the consumer went away
        self.number = 0  # in the order submitted
        self.reserve = 0  # the cells it may come to need: its prompt and max_tokens (set when admitted)
        self.slot: Slot | None = None
        self.st: DecodeState | None = None
        self.todo: list[int] = []  # prompt tokens still to prefill
        self.pos = 0  # where the next prompt chunk goes
        self.step = None  # the running step (a generator) and what it asks for
        self.wants = None
        self.first: Step | None = None  # the first token, picked at the end of the prefill
        self.finish: str | None = None
        self.t_start = self.t_first = 0.0
        self.llama0 = self.draft0 = 0.0
        self.last_rows = self.last_tokens = 1  # its latest step's target rows and tokens

    def stream(self) -> Iterator[GenerationEvent]:
        return _Stream(self)

    def put(self, item) -> None:
        """An event (or the error that ended it) to its consumer."""
        if self.job.sink is None:
            self.events.put(item)
            return
        try:
            self.job.sink(item)
        except Exception:  # a consumer that is gone (its event loop closed) stops the sequence
            self.cancelled = True


class _Stream:
    """The consumer's side: an iterator over a sequence's events; dropping it (or `close`)
    stops the generation after its current step."""

    def __init__(self, seq: Sequence):
        self.seq = seq
        self.done = False

    def __iter__(self):
        return self

    def __next__(self) -> GenerationEvent:
        if self.done:
            raise StopIteration
        item = self.seq.events.get()
        if isinstance(item, BaseException):
            self.done = True
            raise item
        if item.finish_reason is not None:
            self.done = True
        return item

    def close(self) -> None:
        if not self.done:
            self.seq.cancelled = True
        self.done = True

    def __del__(self):
        self.close()


class Scheduler:
    def __init__(self, rt, prepare: Callable[[Sequence], None], n_slots: int, reusable: Callable[[int, int], int],
                 costs, is_eog: Callable[[int], bool]):
        self.rt = rt
        self.prepare = prepare  # makes a sequence's DecodeState (in the scheduler's thread)
        self.costs = costs  # the engine's CostModel: what batches and draft steps cost here
        self.is_eog = is_eog
        self.projector = None  # the engine's Projector, when pictures or sounds are loaded
        self.reusable = reusable  # (slot seq id, prefix length) -> how much of it can be reused
        self.n_slots = n_slots
        self.slots = [Slot(i) for i in range(n_slots)]
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self.lock = threading.Condition()  # guards waiting/running; the tick lock is `contexts`
        self.contexts = threading.RLock()  # held while llama.cpp runs on the contexts
        self.next_id = 0  # each sequence's number, in the order submitted
        self.cancel_below = 0  # sequences numbered below this were cancelled (engine.cancel())
        self.closed = False
        self.thread: threading.Thread | None = None

    # ---- from any thread ------------------------------------------------------------------
    def submit(self, job: Job) -> Sequence:
        seq = Sequence(job)
        with self.lock:
            if self.closed:
                raise EngineError("the engine is closed")
            seq.number = self.next_id
            self.next_id += 1
            self.waiting.append(seq)
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name="tandem-scheduler", daemon=True)
                self.thread.start()
            self.lock.notify_all()
        return seq

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
            for slot in self.slots:
                if not slot.busy:
                    self.rt.target.truncate(0, slot.seq)
                    slot.cached = []

    def forget_all(self) -> None:
        """After a failed decode the cache content is unknown: every slot starts empty."""
        for slot in self.slots:
            slot.cached = []
        try:
            self.rt.target.clear()
        except Exception:
            pass

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
                while not self.running and not self.waiting and not self.closed:
                    self.lock.wait()
                if self.closed and not self.running and not self.waiting:
                    self.thread = None
                    return
            with self.contexts:
                self._tick()

    def _tick(self) -> None:
        self._end_stopped()
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
        """Waiting prompts into free slots, in order: each to the free slot holding the longest
        reusable prefix of it where that is the slot's conversation going on (else to an empty
        slot or the least recently used), if its cells fit."""
        with self.lock:
            if not self.waiting:
                return
            free = [s for s in self.slots if not s.busy]
            while self.waiting and free:
                seq = self.waiting[0]
                prompt = seq.job.prompt
                n = len(prompt)

                def reuse(slot):  # the last prompt token is always decoded again (its row gives the logits)
                    return self.reusable(slot.seq, min(_common_prefix(slot.cached, prompt), n - 1))
                slot = max(free, key=lambda s: (reuse(s), -s.used_at))
                if reuse(slot) < len(slot.cached) // 2:
                    # not that slot's conversation going on (a shared system prompt, at most):
                    # an empty slot, else the one used longest ago, keeps the others' caches
                    slot = min(free, key=lambda s: (bool(s.cached), s.used_at))
                keep = reuse(slot)
                while 0 < keep < n and prompt[keep] < 0 and prompt[keep - 1] == prompt[keep]:
                    keep -= 1  # never half an image: its positions are decoded together
                # it reserves its prompt and its max_tokens: what it gets alone, no other
                # sequence may take from it (it waits for running ones to end instead)
                seq.reserve = min(self.rt.n_ctx, n + seq.job.config.max_tokens)
                over = self._cells(promised=True) - len(slot.cached) + seq.reserve - self.rt.n_ctx
                if over > 0:
                    self._evict(over, slot)
                    if self._cells(promised=True) - len(slot.cached) + seq.reserve > self.rt.n_ctx and self.running:
                        return  # alone, it fits: its prompt was checked against the context
                self.waiting.pop(0)
                free.remove(slot)
                slot.busy = True
                seq.slot = slot
                if keep < len(slot.cached):
                    self.rt.target.truncate(keep, slot.seq)
                    del slot.cached[keep:]
                try:
                    self._start(seq, keep)
                except BaseException as e:
                    self._fail(seq, e)
                    continue
                self.running.append(seq)

    def _evict(self, cells: int, keep_slot: Slot | None = None) -> None:
        """Forget idle slots' caches, least recently used first, until `cells` are free."""
        for slot in sorted((s for s in self.slots if not s.busy and s is not keep_slot and s.cached),
                           key=lambda s: s.used_at):
            if cells <= 0:
                return
            cells -= len(slot.cached)
            self.rt.target.truncate(0, slot.seq)
            slot.cached = []

    def _start(self, seq: Sequence, keep: int) -> None:
        seq.t_start = time.perf_counter()
        self.prepare(seq)
        st = seq.st
        st.seq = seq.slot.seq
        st.stats.reused_tokens = keep
        seq.todo = seq.job.prompt[keep:]
        seq.pos = keep
        st.stats.prefill_tokens = len(seq.todo)
        st.n_past = keep
        if seq.todo[-1] < 0:
            raise EngineError("a prompt cannot end with a picture or sound: text must follow it")
        seq.job.strategy.prepare(st)

    def _cells(self, promised: bool = False) -> int:
        """Cells of the cache in use: what idle slots keep and what running sequences decoded
        (`promised`: what running sequences reserved, their prompt and max_tokens)."""
        idle = sum(len(s.cached) for s in self.slots if not s.busy)
        if promised:
            return idle + sum(seq.reserve for seq in self.running)
        return idle + sum(seq.pos if seq.todo else seq.st.n_past for seq in self.running if seq.st is not None)

    def _decode(self) -> None:
        """One step of every running sequence: drafter batches, then one target batch."""
        rt, tgt = self.rt, self.rt.target
        decoders = [s for s in self.running if not s.todo]
        prefills = [s for s in self.running if s.todo]
        if not decoders and not prefills:
            return
        # the rows this batch may hold: with verify rows in it, one ubatch (rolling back a
        # verify never needs a recycled sliding-window cell); the output rows the context has
        # (a prompt's last chunk needs one)
        room = min(rt.n_ubatch, tgt.n_batch) if decoders else tgt.n_batch
        outputs = rt.n_outputs_max - len(prefills)
        cells = rt.n_ctx - self._cells()  # free cells: each row of the batch takes one
        if cells < len(decoders) + bool(prefills):
            self._evict(len(decoders) + bool(prefills) - cells)
            cells = rt.n_ctx - self._cells()
        joint = self._joint_mtp_k(decoders, min(room, outputs, cells))
        rows = 0
        for i, seq in enumerate(decoders):
            st = seq.st
            after = len(decoders) - i - 1  # a row each, at least, for the decoders still to choose
            left = min(room, outputs, cells) - rows - after
            if left < 1 or st.n_past + 1 > st.n_ctx:  # its context, or the shared one, is full
                self._finish(seq, "context")
                continue
            # what the others' rows will be: those chosen so far, and the rest as at their last
            # step (so each sequence's choice sees the batch the others make, drafts included)
            later = decoders[i + 1:]
            st.others = rows + sum(s.last_rows for s in later)
            st.others_tokens = sum(s.last_tokens for s in decoders if s is not seq)
            st.room, st.planned, st.mtp_k = left, 1, joint
            seq.step = seq.job.strategy.step(st, seq.job.config.max_tokens - st.stats.generated_tokens)
            self._advance(seq, None)
            rows += st.planned
            seq.last_rows = st.planned
        self._draft()
        tgt.begin()
        parts = []  # (sequence, its rows, a prompt chunk or None)
        for seq in decoders:
            if seq in self.running and seq.step is not None and isinstance(seq.wants, TargetRows):
                w = seq.wants
                parts.append((seq, tgt.add(w.tokens, w.pos0, seq.st.seq, w.outputs), None))
        for seq in prefills:
            free = min(room, cells) - tgt.n
            chunk = self._prefill_chunk(seq, min(free, CHUNK_SHARED) if decoders else free) if free > 0 else None
            if chunk and seq in self.running:
                last = len(chunk) == len(seq.todo)
                parts.append((seq, tgt.add(chunk, seq.pos, seq.st.seq, "last" if last else "none"), chunk))
        if not parts:
            return
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

    def _joint_mtp_k(self, decoders: list[Sequence], room: int) -> int | None:
        """One MTP draft length for every sequence drafting with auto, when there are several:
        the k whose whole batch gives the most expected tokens per second, from each sequence's
        own acceptance and the measured cost of the batch (a CPU's kernels cost per row very
        unevenly with the batch size, so each choosing alone against the others' rows drifts
        to sizes that pay for nobody). None: each sequence chooses alone (also where the best
        is not to draft: its controller then probes now and then)."""
        ctl = [s for s in decoders if getattr(s.job.strategy, "controller", None) is not None]
        if len(ctl) < 2 or not self.costs.ready():
            return None
        rest = [s for s in decoders if s not in ctl]
        others, others_tok = sum(s.last_rows for s in rest), sum(s.last_tokens for s in rest)
        acc = [s.job.strategy.controller.acceptance() for s in ctl]
        best, best_rate = 0, 0.0
        for k in range(0, AUTO_K_MAX + 1):
            rows = others + len(ctl) * (k + 1)
            if rows > room:
                break
            tokens = others_tok + sum(s.job.strategy.controller.expected_tokens(k, a) for s, a in zip(ctl, acc))
            rate = tokens / (self.costs.guess(rows) + k * len(ctl) * (self.costs.draft or 0.0))
            if rate > best_rate:
                best, best_rate = k, rate
            if not self.costs.measured(rows):
                # try one new size at a time, the next longer draft (a batch of 8 sequences
                # drafting 8 each is 72 rows, which a CPU takes seconds over)
                if k == 0:
                    return 0  # not even the plain batch is measured: a plain step measures it
                break
        return best or None

    def _draft(self) -> None:
        """The drafter's rows of every drafting sequence, one batch per draft position."""
        dr = self.rt.drafter
        while True:
            asking = [s for s in self.running if s.step is not None and isinstance(s.wants, DraftRow)]
            if not asking:
                return
            for i, seq in enumerate(asking):
                dr.h_rows[i] = seq.wants.h
            t0 = time.perf_counter()
            dr.step_rows([(s.wants.token, s.wants.pos, s.st.seq) for s in asking])
            for i, seq in enumerate(asking):
                self._advance(seq, (dr.logits(i), dr.h_out(i)))
            # per drafting sequence, Python's choice of each draft included: what one more
            # sequence's draft step adds to the batch (alone, the whole step)
            self.costs.record_draft((time.perf_counter() - t0) / len(asking))

    def _prefill_chunk(self, seq: Sequence, room: int) -> list[int] | None:
        """The next prompt chunk (at most `room` tokens) of a prefilling sequence; an image or a
        sound at its head is decoded first, by the projector, on its own."""
        st = seq.st
        todo = seq.todo
        while todo and todo[0] < 0:
            n = 1
            while n < len(todo) and todo[n] == todo[0]:
                n += 1
            proj = self.projector
            run = proj.run_for(todo[0]) if proj is not None else None
            if run is None or run.n_pos != n:
                self._fail(seq, EngineError("the prompt names a picture or sound that is not prepared"))
                return None
            st.stats.media_s += proj.decode(run, self.rt.target.ctx, seq.pos, self.rt.target.n_batch, st.seq)
            seq.slot.cached.extend(todo[:n])
            seq.pos += n
            del todo[:n]
        n = 0
        while n < min(room, len(todo)) and todo[n] >= 0:
            n += 1
        return todo[:n] if n else None

    def _prefilled(self, seq: Sequence, chunk: list[int], rows: Rows) -> None:
        st = seq.st
        seq.slot.cached.extend(chunk)
        seq.pos += len(chunk)
        del seq.todo[:len(chunk)]
        st.n_past = seq.pos
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
        """A sequence's finished step becomes its event: stop at end-of-generation or at the
        token budget; the text, the stats."""
        if seq.first is not None:
            step, seq.first = seq.first, None
            is_first = True
        elif seq.step is None and isinstance(seq.wants, Step):
            step, seq.wants, is_first = seq.wants, None, False
            seq.last_tokens = len(step.tokens)
        else:
            return
        st, job = seq.st, seq.job
        stats, config = st.stats, job.config
        finish = None
        keep = len(step.tokens)
        for i, tok in enumerate(step.tokens):
            if self.is_eog(tok):
                keep, finish = i, "stop"
                break
            if stats.generated_tokens + i + 1 >= config.max_tokens:
                keep, finish = i + 1, "length"
                break
        if keep < len(step.tokens):
            # The cache may hold tokens past the stop; drop them so that it holds exactly
            # tokens[:n_past] with the last kept token pending.
            drop = len(step.tokens) - keep
            n_tok = len(st.tokens) - drop + (1 if finish == "stop" else 0)
            del st.tokens[n_tok:]
            if st.n_past > len(st.tokens) - 1:
                st.n_past = len(st.tokens) - 1
                self.rt.target.truncate(st.n_past, st.seq)
        text = job.text
        pieces = [text.feed(t, d) for t, d in zip(step.tokens[:keep], step.drafted[:keep])]
        for piece in pieces:
            piece.source = step.source if piece.drafted else ""
        for piece, lp in zip(pieces, st.logprobs):  # recorded in the order the tokens were kept
            piece.logprob = lp
        st.logprobs.clear()
        answer = "".join(p.text for p in pieces if p.channel == "answer")
        thinking = "".join(p.text for p in pieces if p.channel == "thinking")
        now = time.perf_counter()
        if is_first:
            stats.ttft_s = now - seq.t_start
            seq.t_first = now
        stats.generated_tokens += keep
        stats.decode_s = now - seq.t_first
        # time inside llama.cpp while this sequence decoded (batches it shared with others count whole)
        llama, draft = self._llama_s()
        stats.llama_s, stats.draft_llama_s = llama - seq.llama0, draft - seq.draft0
        if finish is not None:
            a, th = text.flush()  # bytes of an unfinished character, as U+FFFD
            if pieces and (a or th):
                pieces[-1].text += a or th
            answer += a
            thinking += th
        stats.finish_reason = finish
        seq.put(GenerationEvent(pieces, answer, thinking, stats, finish))
        if finish is not None:
            self._release(seq, finish)
        elif st.n_past + 1 > st.n_ctx:
            self._finish(seq, "context")

    def _finish(self, seq: Sequence, finish: str) -> None:
        """An end that no step made (a stop, the context, a cancel while waiting): one last
        empty event."""
        stats = seq.st.stats if seq.st is not None else GenerationStats(prompt_tokens=len(seq.job.prompt))
        stats.finish_reason = finish
        seq.put(GenerationEvent([], "", "", stats, finish))
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
            if not cache_known:
                try:
                    self.rt.target.truncate(0, slot.seq)
                except Exception:
                    pass
                slot.cached = []
            elif st is not None and not seq.todo:  # mid-prompt, it holds the chunks decoded
                slot.cached = list(st.tokens[:st.n_past])
            slot.busy = False
            slot.used_at = time.monotonic()
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


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    x, y = np.asarray(a[:n]), np.asarray(b[:n])
    diff = np.flatnonzero(x != y)
    return int(diff[0]) if diff.size else n
