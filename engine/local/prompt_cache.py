"""What lets a conversation's next request decode only its new tokens, whatever came between.

Gemma 4's sliding-window layers keep only the newest positions of a sequence (their cells
are recycled as it grows, or as other sequences need them), so a cached prefix can be reused
as is only while the window before its end is still there. Three things keep it usable:

* checkpoints: the sliding-window layers' state of a sequence (llama.cpp's
  `llama_state_seq_*_ext` with PARTIAL_ONLY, as llama-server's context checkpoints), taken
  while a prompt is read: every CHECKPOINT_EVERY tokens, at the start of each turn and a few
  tokens before the prompt's end. A prompt that parts from the cached one anywhere restores the
  nearest checkpoint before the parting point and decodes from there (the full-attention
  layers still hold everything before it).
* the host cache: a slot's whole state (every layer, its tokens and checkpoints) saved to
  memory when its slot is taken for another conversation or its cells are needed, and put
  back into a slot when that conversation returns. Bounded in bytes, least recently used out.
* the disk cache (disk_cache.py): the same entries on disk, so a restart reads nothing again.

The drafter shares the target's cache and keeps no state of its own: the target's state is
the pair's. Its hidden row comes from the token decoded after the restored prefix (at least
one always is).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

CHECKPOINT_EVERY = 2048  # a long prompt (a system prompt with tools) is checkpointed this often
CHECKPOINT_MIN_STEP = 256  # ...and at turn starts at least this far apart
CHECKPOINT_BEFORE_END = 4  # a retry of the same prompt restores here (one token is always decoded)
MAX_CHECKPOINTS = 16  # per slot; beyond, they are thinned (thin_checkpoints)
MIN_SAVED = 256  # a slot's cache shorter than this is cheaper to read again than to keep
# A prompt with at least this many tokens to read sends the idle slots' conversations to the
# host cache first: every cell of the unified cache widens each step's attention (llama.cpp's
# CPU kernel scans the mask of every cell, per head), so an idle 12k-token conversation made
# another 12k-token prompt read 1.6x slower; llama-server clears idle slots the same way
# (--cache-idle-slots). A retry or a short turn in its own slot keeps them where they are.
PARK_MIN = 256
HOST_SHARE = 0.25  # of the memory available at load: the host cache's default bound...
HOST_MAX = 8 << 30  # ...at most 8 GiB (llama-server's --cache-ram default)


@dataclass
class Checkpoint:
    n_tokens: int  # the sequence held positions [0, n_tokens) when it was taken
    data: bytearray  # its sliding-window layers' state


@dataclass
class Saved:
    """A conversation's whole cached state, out of the slots."""

    tokens: list[int]
    data: bytearray  # every layer's state (llama_state_seq_get_data_ext, no flags)
    checkpoints: list[Checkpoint]
    pos_min: int  # the oldest position its sliding-window layers held
    used_at: float = field(default_factory=time.monotonic)

    @property
    def size(self) -> int:
        return len(self.data) + sum(len(c.data) for c in self.checkpoints)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    x, y = np.asarray(a[:n]), np.asarray(b[:n])
    diff = np.flatnonzero(x != y)
    return int(diff[0]) if diff.size else n


def reuse(cached: list[int], checkpoints: list[Checkpoint], pos_min: int, prompt: list[int],
          n_swa: int) -> tuple[int, Checkpoint | None]:
    """(tokens of `cached` a prompt can keep, the checkpoint to restore first or None).

    The last prompt token is always decoded again (its row gives the first token's logits).
    The token after the kept prefix attends to the n_swa positions before it: where the
    sliding-window layers no longer hold them (`pos_min`, their oldest position, is past
    them), the newest checkpoint at or before the parting point is restored instead."""
    common = min(common_prefix(cached, prompt), len(prompt) - 1)
    if common <= 0:
        return 0, None
    if n_swa <= 0 or 0 <= pos_min <= max(0, common - n_swa):
        return common, None
    for ck in reversed(checkpoints):
        if ck.n_tokens <= common:
            return ck.n_tokens, ck
    return 0, None


def thin_checkpoints(checkpoints: list[Checkpoint], most: int = MAX_CHECKPOINTS) -> None:
    """Keep at most `most` checkpoints (ascending), spread over the whole prompt: the one
    whose neighbours are closest together goes first (the newest two always stay: a retry and
    the next turn restore there). Dropping the oldest instead would lose the early ones an edit
    of the first message needs, after a few turns of an agent."""
    while len(checkpoints) > max(most, 2):
        i = min(range(1, len(checkpoints) - 2),
                key=lambda j: checkpoints[j + 1].n_tokens - checkpoints[j - 1].n_tokens, default=0)
        del checkpoints[i]


def checkpoint_marks(prompt: list[int], keep: int, turn_token: int | None) -> list[int]:
    """Where a prompt read from `keep` on is checkpointed (positions, ascending): every
    CHECKPOINT_EVERY tokens, before each turn's first token (an edit of a message restores at
    its turn), always before the last turn's (the generation prompt, which the next request
    renders otherwise: Gemma 4 without thinking adds an empty thought channel there), and
    CHECKPOINT_BEFORE_END tokens before the end (a retry). Never inside a picture's positions
    (negative tokens: they are decoded whole). None in a prompt shorter than MIN_SAVED: it is
    cheaper to read again (and a short prompt is decoded in one batch, as llama.cpp's own
    generate does, not split at a checkpoint)."""
    n = len(prompt)
    if n < MIN_SAVED:
        return []
    marks = set(range((keep // CHECKPOINT_EVERY + 1) * CHECKPOINT_EVERY, n, CHECKPOINT_EVERY))
    if turn_token is not None:
        at = np.flatnonzero(np.asarray(prompt[keep + 1:n - 1]) == turn_token) + keep + 1
        last = keep
        for p in at.tolist():
            if p - last >= CHECKPOINT_MIN_STEP:
                marks.add(p)
                last = p
        if at.size:
            marks.add(int(at[-1]))
    marks.add(n - CHECKPOINT_BEFORE_END)
    return sorted(p for p in marks if keep < p < n and prompt[p] >= 0 and prompt[p - 1] >= 0)


@dataclass
class CacheCounts:
    """What the cache did, for /metrics."""

    events: Counter = field(default_factory=Counter)  # slot_hits, checkpoint_restores, host_hits, ...
    host_bytes: int = 0
    host_entries: int = 0
    disk_bytes: int = 0
    disk_entries: int = 0


class HostCache:
    """Saved conversations in memory, at most `budget` bytes, least recently used out."""

    def __init__(self, budget: int, counts: CacheCounts, disk=None):
        self.budget = budget
        self.counts = counts
        self.disk = disk  # DiskCache or None: what is saved here is written there too
        self.entries: list[Saved] = []
        self.lock = threading.Lock()  # /metrics reads the sizes from the event loop

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries)

    def put(self, entry: Saved) -> bool:
        """Keep `entry` (one that repeats a kept one, or is a prefix of it, replaces it or is
        left out); older ones go when the bound is passed. False: it is larger than the bound."""
        if entry.size > self.budget:
            self.counts.events["host_too_large"] += 1
            return False
        with self.lock:
            for old in list(self.entries):
                shared = common_prefix(old.tokens, entry.tokens)
                if shared == len(entry.tokens) and len(old.tokens) >= len(entry.tokens):
                    old.used_at = time.monotonic()
                    return True  # it holds this one already
                if shared == len(old.tokens):
                    self.entries.remove(old)  # this one goes on from it
            self.entries.append(entry)
            self.counts.events["host_saves"] += 1
            while self.size > self.budget:
                oldest = min(self.entries, key=lambda e: e.used_at)
                self.entries.remove(oldest)
                self.counts.events["host_evictions"] += 1
            self._count()
        if self.disk is not None and min(entry.tokens) >= 0:  # pictures' ids are this session's
            self.disk.put(entry)
        return True

    def best(self, prompt: list[int], n_swa: int) -> tuple[Saved | None, int]:
        """The entry that keeps most of `prompt`, and how much (0: none helps)."""
        with self.lock:
            entries = list(self.entries)
        best, most = None, 0
        for e in entries:
            n, _ = reuse(e.tokens, e.checkpoints, e.pos_min, prompt, n_swa)
            if n > most:
                best, most = e, n
        return best, most

    def take(self, entry: Saved) -> None:
        """`entry` goes back into a slot: it lives there now."""
        with self.lock:
            if entry in self.entries:
                self.entries.remove(entry)
            self._count()

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self._count()

    def _count(self) -> None:
        self.counts.host_bytes = self.size
        self.counts.host_entries = len(self.entries)


def default_host_budget() -> int:
    """HOST_SHARE of the memory available now, at most HOST_MAX."""
    from ..models.hardware import system_ram

    try:
        available, _ = system_ram()
    except Exception:
        return 1 << 30
    return int(min(HOST_MAX, available * HOST_SHARE))
