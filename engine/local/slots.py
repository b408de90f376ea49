"""The sequences that generate at once and the slots of the target's cache they run in.

Each slot is one sequence id of the target's cache and keeps what its last generation left
there (and checkpoints of its sliding-window layers), so a conversation's next request goes to
the slot with its longest reusable prefix. The cells of the (unified) cache are counted: a
request reserves its prompt and max_tokens, so no other can cut its reply short. Idle slots
keep their caches until another slot reads a long prompt (their cells would slow it: see
PARK_MIN) or the cells are needed; then they go to the host cache and come back from it when
their conversation does (prompt_cache.py).
A sequence's events reach its consumer through its queue (read by `EventStream`) or the job's
sink.
"""

from __future__ import annotations

import logging
import queue
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ..generation import GenerationConfig, GenerationEvent
from ..strategies.base import DecodeState, DecodeStrategy, Step
from ..gemma4.text import TextAssembler
from .prompt_cache import MIN_SAVED, PARK_MIN, CacheCounts, Checkpoint, HostCache, Saved, reuse, thin_checkpoints

log = logging.getLogger("tandem.prompt_cache")


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
    checkpoints: list[Checkpoint] = field(default_factory=list)  # of its sliding-window layers, oldest first
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
        self.marks: list[int] = []  # positions of the prompt where a checkpoint is taken, ascending
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


@dataclass
class Placement:
    """Where a prompt goes: its slot, the tokens of the slot's cache it keeps, the checkpoint
    restored first (or None) and the saved conversation put into the slot first (or None)."""

    slot: Slot
    keep: int
    checkpoint: Checkpoint | None = None
    saved: Saved | None = None
    from_disk: object = None  # the DiskEntry `saved` was read from


class SlotTable:
    """The slots, what each holds in the target's cache, and the cells in use; conversations
    that leave a slot go to the host cache (prompt_cache.py) and come back from it."""

    def __init__(self, rt, n_slots: int, host: HostCache | None = None, counts: CacheCounts | None = None):
        self.rt = rt
        self.host = host
        self.counts = counts if counts is not None else CacheCounts()
        self.slots = [Slot(i) for i in range(n_slots)]
        self.cold = False  # the next prompt reads nothing saved (after forget_idle: a measurement)

    def _reuse(self, slot: Slot, prompt: list[int]) -> tuple[int, Checkpoint | None]:
        if not slot.cached:
            return 0, None
        return reuse(slot.cached, slot.checkpoints, self.rt.target.pos_min(slot.seq), prompt, self.rt.n_swa)

    def place(self, prompt: list[int], free: list[Slot]) -> Placement:
        """A prompt's placement: the free slot holding the longest reusable prefix of it where
        that is the slot's conversation going on, else an empty slot or the least recently used
        (a short side request never takes a long conversation's slot while another can take
        it); a saved conversation that keeps more of it is put back into that slot."""
        scores = {id(s): self._reuse(s, prompt) for s in free}
        slot = max(free, key=lambda s: (scores[id(s)][0], -s.used_at))
        if scores[id(slot)][0] < len(slot.cached) // 2:
            # not that slot's conversation going on (a shared system prompt, at most): an
            # empty slot, else the one used longest ago, keeps the others' caches
            slot = min(free, key=lambda s: (bool(s.cached), s.used_at))
        keep, ck = scores[id(slot)]
        best = Placement(slot, keep, ck)
        cold, self.cold = self.cold, False
        if self.host is None or cold:
            return best
        into = min(free, key=lambda s: (bool(s.cached), s.used_at))  # where a saved one goes back
        saved, n = self.host.best(prompt, self.rt.n_swa)
        if saved is not None and n > best.keep:
            best = Placement(into, n, None, saved)
        disk = self.host.disk
        entry, n = disk.best(prompt, self.rt.n_swa) if disk is not None else (None, 0)
        if entry is not None and n > best.keep:
            saved = disk.load(entry)  # None: it did not hold its checks (and is gone)
            if saved is not None:
                best = Placement(into, n, None, saved, entry)
        return best

    def make_room(self, reserve: int, running: list[Sequence]) -> bool:
        """Whether a sequence reserving `reserve` cells (its prompt and max_tokens) may start
        beside the running ones: what they reserved, no other sequence may take from them (it
        waits for them to end instead). Idle slots' caches give way (`evict`); alone, it fits
        (its prompt was checked against the context)."""
        return not running or sum(seq.reserve for seq in running) + reserve <= self.rt.n_ctx

    def take(self, place: Placement, prompt: list[int], running: list[Sequence]) -> int:
        """The slot is busy; its cache keeps the placement's prefix of `prompt` (restored from
        a checkpoint or the host cache where the placement says). Returns the tokens kept."""
        slot = place.slot
        slot.busy = True
        if self.host is not None and len(prompt) - place.keep >= PARK_MIN:
            # first: a conversation put back from the host cache then takes the cells they
            # free, low in the cache (attention spans the cells up to the highest one in use)
            self.park_idle(slot)
        keep, ck = place.keep, place.checkpoint
        if place.saved is not None:
            keep, ck = self._put_back(slot, place, prompt, running)
        elif keep > 0:
            self.counts.events["slot_hits"] += 1
        if keep < len(slot.cached) and len(slot.cached) - keep >= MIN_SAVED:
            self._save(slot)  # an edit, or another conversation: this one may come back
        if ck is not None and not self.rt.target.load_state(slot.seq, ck.data, partial=True):
            self.counts.events["checkpoint_failures"] += 1
            keep, ck = 0, None
        elif ck is not None:
            self.counts.events["checkpoint_restores"] += 1
        while 0 < keep < len(prompt) and prompt[keep] < 0 and prompt[keep - 1] == prompt[keep]:
            keep -= 1  # never half an image: its positions are decoded together
        self._truncate(slot, keep)
        if keep == 0:
            self.counts.events["misses"] += 1
        return keep

    def park_idle(self, reading: Slot) -> None:
        """Idle slots' conversations into the host cache and out of the target's cache, while
        `reading` reads a long prompt (see PARK_MIN); they come back when their conversation does.
        One the host cache cannot keep (too short to be worth it, larger than its bound) stays."""
        for slot in self.slots:
            if slot is not reading and not slot.busy and slot.cached and self._save(slot):
                self._truncate(slot, 0)
                self.counts.events["idle_parked"] += 1

    def _put_back(self, slot: Slot, place: Placement, prompt: list[int], running: list[Sequence]):
        """A saved conversation into `slot` (what the slot held is saved first); its reuse."""
        saved = place.saved
        if len(slot.cached) >= MIN_SAVED:
            self._save(slot)
        self._truncate(slot, 0)
        self.evict(len(saved.tokens) - (self.rt.n_ctx - self.cells(running)), slot)
        self.host.take(saved)
        if not self.rt.target.load_state(slot.seq, saved.data, partial=False):
            self.counts.events["host_failures"] += 1
            if place.from_disk is not None:  # llama.cpp refused what the checks let through
                self.host.disk.refuse(place.from_disk, "llama.cpp refused its state")
            self._truncate(slot, 0)
            return 0, None
        self.counts.events["host_hits" if place.from_disk is None else "disk_restores"] += 1
        slot.cached, slot.checkpoints = list(saved.tokens), list(saved.checkpoints)
        return self._reuse(slot, prompt)

    def _save(self, slot: Slot) -> bool:
        """A copy of what the slot holds into the host cache (when there is one); whether it
        is kept there."""
        if self.host is None or len(slot.cached) < MIN_SAVED:
            return False
        try:
            data = self.rt.target.save_state(slot.seq, partial=False)
        except Exception:
            self.counts.events["host_failures"] += 1
            return False
        return self.host.put(Saved(list(slot.cached), data, list(slot.checkpoints), self.rt.target.pos_min(slot.seq)))

    def save_to_disk(self) -> None:
        """What every slot holds into the disk cache, and its writes finished (at close)."""
        disk = self.host.disk if self.host is not None else None
        if disk is None:
            return
        for slot in self.slots:
            if len(slot.cached) >= MIN_SAVED and min(slot.cached) >= 0:
                try:
                    disk.put(Saved(list(slot.cached), self.rt.target.save_state(slot.seq, partial=False),
                                   list(slot.checkpoints), self.rt.target.pos_min(slot.seq)))
                except Exception as e:
                    log.warning("prompt cache: a slot could not be saved: %s", e)
        disk.close()

    def _truncate(self, slot: Slot, keep: int) -> None:
        if keep < len(slot.cached) or keep == 0:
            self.rt.target.truncate(keep, slot.seq)
            del slot.cached[keep:]
        slot.checkpoints = [c for c in slot.checkpoints if c.n_tokens <= keep]

    def checkpoint(self, slot: Slot) -> None:
        """The sliding-window layers' state of the slot now (it holds slot.cached), kept for a
        later prompt that parts from this one after this point."""
        try:
            data = self.rt.target.save_state(slot.seq, partial=True)
        except Exception:
            self.counts.events["checkpoint_failures"] += 1
            return
        slot.checkpoints = [c for c in slot.checkpoints if c.n_tokens < len(slot.cached)]
        slot.checkpoints.append(Checkpoint(len(slot.cached), data))
        thin_checkpoints(slot.checkpoints)
        self.counts.events["checkpoints"] += 1

    def free(self, slot: Slot, cached: list[int] | None, known: bool = True) -> None:
        """The slot is free again, holding `cached` (None: what it holds already); not `known`:
        after a failure, nothing."""
        if not known:
            try:
                self.rt.target.truncate(0, slot.seq)
            except Exception:
                pass
            slot.cached, slot.checkpoints = [], []
        elif cached is not None:
            slot.cached = cached
            slot.checkpoints = [c for c in slot.checkpoints if c.n_tokens <= len(cached)]
        slot.busy = False
        slot.used_at = time.monotonic()

    def cells(self, running: list[Sequence]) -> int:
        """Cells of the cache in use: what idle slots keep and what running sequences decoded."""
        idle = sum(len(s.cached) for s in self.slots if not s.busy)
        return idle + sum(seq.pos if seq.todo else seq.st.n_past for seq in running if seq.st is not None)

    def evict(self, cells: int, keep_slot: Slot | None = None) -> None:
        """Free `cells` cells: idle slots' caches go to the host cache and leave the slots,
        least recently used first."""
        for slot in sorted((s for s in self.slots if not s.busy and s is not keep_slot and s.cached),
                           key=lambda s: s.used_at):
            if cells <= 0:
                return
            cells -= len(slot.cached)
            self._save(slot)
            self._truncate(slot, 0)
            self.counts.events["slot_evictions"] += 1

    def forget_idle(self) -> None:
        """Drop what idle slots and the host cache keep; the next prompt is decoded from scratch
        (what the disk keeps is not read for it: it stays for the next start)."""
        for slot in self.slots:
            if not slot.busy:
                self._truncate(slot, 0)
        if self.host is not None:
            self.host.clear()
        self.cold = True

    def forget_all(self) -> None:
        """After a failed decode the cache content is unknown: every slot starts empty."""
        for slot in self.slots:
            slot.cached, slot.checkpoints = [], []
        try:
            self.rt.target.clear()
        except Exception:
            pass
