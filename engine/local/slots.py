"""The sequences that generate at once and the slots of the target's cache they run in.

Each slot is one sequence id of the target's cache and keeps what its last generation left
there, so a conversation's next request goes to the slot with its longest cached prefix. The
cells of the (unified) cache are counted: a request reserves its prompt and max_tokens, so no
other can cut its reply short; idle slots' caches are forgotten, least recently used first,
when a new one needs their cells. A sequence's events reach its consumer through its queue
(read by `EventStream`) or the job's sink.
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from ..generation import GenerationConfig, GenerationEvent
from ..strategies.base import DecodeState, DecodeStrategy, Step
from ..gemma4.text import TextAssembler


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
        return EventStream(self)

    def put(self, item) -> None:
        """An event (or the error that ended it) to its consumer."""
        if self.job.sink is None:
            self.events.put(item)
            return
        try:
            self.job.sink(item)
        except Exception:  # a consumer that is gone (its event loop closed) stops the sequence
            self.cancelled = True


class EventStream:
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


class SlotTable:
    """The slots, what each holds in the target's cache, and the cells in use."""

    def __init__(self, rt, n_slots: int, reusable: Callable[[int, int], int]):
        self.rt = rt
        self.reusable = reusable  # (slot seq id, prefix length) -> how much of it can be reused
        self.slots = [Slot(i) for i in range(n_slots)]

    def place(self, prompt: list[int], free: list[Slot]) -> tuple[Slot, int]:
        """(slot, tokens of its cache kept) for a prompt: the free slot holding the longest
        reusable prefix of it where that is the slot's conversation going on, else an empty
        slot or the least recently used."""
        n = len(prompt)

        def reuse(slot):  # the last prompt token is always decoded again (its row gives the logits)
            return self.reusable(slot.seq, min(common_prefix(slot.cached, prompt), n - 1))
        slot = max(free, key=lambda s: (reuse(s), -s.used_at))
        if reuse(slot) < len(slot.cached) // 2:
            # not that slot's conversation going on (a shared system prompt, at most):
            # an empty slot, else the one used longest ago, keeps the others' caches
            slot = min(free, key=lambda s: (bool(s.cached), s.used_at))
        keep = reuse(slot)
        while 0 < keep < n and prompt[keep] < 0 and prompt[keep - 1] == prompt[keep]:
            keep -= 1  # never half an image: its positions are decoded together
        return slot, keep

    def make_room(self, slot: Slot, reserve: int, running: list[Sequence]) -> bool:
        """Whether a sequence reserving `reserve` cells fits in `slot` beside the running ones
        (idle slots' caches are forgotten to make room). What it gets alone, no other sequence
        may take from it: it waits for running ones to end instead."""
        over = self.cells(running, promised=True) - len(slot.cached) + reserve - self.rt.n_ctx
        if over > 0:
            self.evict(over, slot)
            if self.cells(running, promised=True) - len(slot.cached) + reserve > self.rt.n_ctx and running:
                return False  # alone, it fits: its prompt was checked against the context
        return True

    def take(self, slot: Slot, keep: int) -> None:
        """The slot is busy; its cache keeps its first `keep` tokens."""
        slot.busy = True
        if keep < len(slot.cached):
            self.rt.target.truncate(keep, slot.seq)
            del slot.cached[keep:]

    def free(self, slot: Slot, cached: list[int] | None, known: bool = True) -> None:
        """The slot is free again, holding `cached` (None: what it holds already); not `known`:
        after a failure, nothing."""
        if not known:
            try:
                self.rt.target.truncate(0, slot.seq)
            except Exception:
                pass
            slot.cached = []
        elif cached is not None:
            slot.cached = cached
        slot.busy = False
        slot.used_at = time.monotonic()

    def cells(self, running: list[Sequence], promised: bool = False) -> int:
        """Cells of the cache in use: what idle slots keep and what running sequences decoded
        (`promised`: what running sequences reserved, their prompt and max_tokens)."""
        idle = sum(len(s.cached) for s in self.slots if not s.busy)
        if promised:
            return idle + sum(seq.reserve for seq in running)
        return idle + sum(seq.pos if seq.todo else seq.st.n_past for seq in running if seq.st is not None)

    def evict(self, cells: int, keep_slot: Slot | None = None) -> None:
        """Forget idle slots' caches, least recently used first, until `cells` are free."""
        for slot in sorted((s for s in self.slots if not s.busy and s is not keep_slot and s.cached),
                           key=lambda s: s.used_at):
            if cells <= 0:
                return
            cells -= len(slot.cached)
            self.rt.target.truncate(0, slot.seq)
            slot.cached = []

    def forget_idle(self) -> None:
        """Drop what idle slots cached (the next prompts decode from scratch)."""
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


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    x, y = np.asarray(a[:n]), np.asarray(b[:n])
    diff = np.flatnonzero(x != y)
    return int(diff[0]) if diff.size else n
