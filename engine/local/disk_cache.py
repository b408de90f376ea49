"""Saved conversations on disk, so the first request after a restart (of `tandem serve` or the
window) does not read a long system prompt again.

One folder per model: its name is a hash of what makes a state valid (the target file's
name, size and modification time, the KV cache type, flash attention). One file per
conversation: a JSON header (the token count and checksums), the tokens, the state, the
checkpoints. Nothing read is trusted: a file whose header, sizes or checksums do not hold,
or that names another model, is removed and said in the log; llama.cpp checks the state
itself again when it is put back. Files are written by a thread of their own (a state may be
hundreds of MB), to a temporary name, then renamed; the folder is kept under its bound by
removing the files used longest ago.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .prompt_cache import CacheCounts, Checkpoint, Saved, common_prefix, reuse

log = logging.getLogger("tandem.prompt_cache")

MAGIC = b"TANDEMPC1\n"
MAX_HEADER = 1 << 20  # bytes of JSON header a file may have
DISK_SHARE = 0.1  # of the free disk space: the default bound...
DISK_MAX = 16 << 30  # ...at most 16 GiB


def cache_root() -> Path:
    """Where saved conversations go: $TANDEM_CACHE_DIR, else platformdirs' cache folder."""
    from platformdirs import user_cache_dir

    return Path(os.environ.get("TANDEM_CACHE_DIR") or user_cache_dir("Tandem", appauthor=False)) / "prompt-cache"


def model_key(target_path, kv_type: str, flash_attn: bool) -> str:
    """What a saved state depends on, hashed: another file, cache type or attention layout
    gives another folder (a state is never put back into another model)."""
    p = Path(target_path)
    st = p.stat()
    what = f"{p.resolve().name}|{st.st_size}|{st.st_mtime_ns}|{kv_type}|{int(flash_attn)}"
    return hashlib.sha256(what.encode()).hexdigest()[:24]


@dataclass
class DiskEntry:
    path: Path
    tokens: list[int]
    checkpoints: list[int]  # their n_tokens (their data is read with the rest)
    pos_min: int
    size: int


class DiskCache:
    """The saved conversations of one model on disk, at most `budget` bytes."""

    def __init__(self, folder: Path, key: str, budget: int, counts: CacheCounts):
        self.folder = Path(folder)
        self.key = key
        self.budget = budget
        self.counts = counts
        self.entries: list[DiskEntry] = []
        self.lock = threading.Lock()
        self.writes: queue.Queue = queue.Queue()
        self.folder.mkdir(parents=True, exist_ok=True)
        self._scan()
        self.writer = threading.Thread(target=self._write_loop, name="tandem-prompt-cache", daemon=True)
        self.writer.start()

    # ---- reading ------------------------------------------------------------------------
    def _scan(self) -> None:
        for path in sorted(self.folder.glob("*.state")):
            try:
                entry = self._read_header(path)
            except Exception as e:
                self._drop(path, f"unreadable ({e})")
                continue
            self.entries.append(entry)
        for tmp in self.folder.glob("*.tmp"):  # a write that a crash cut short (not one under way)
            try:
                if time.time() - tmp.stat().st_mtime > 3600:
                    tmp.unlink()
            except OSError:
                pass
        self._count()

    def _read_header(self, path: Path) -> DiskEntry:
        with open(path, "rb") as f:
            return self._header(path, f)[0]

    def _header(self, path: Path, f) -> tuple[DiskEntry, dict]:
        """The file's entry and header, checked; `f` is left at its state's first byte."""
        if f.read(len(MAGIC)) != MAGIC:
            raise ValueError("not a Tandem prompt cache file")
        (n,) = struct.unpack("<I", f.read(4))
        if n > MAX_HEADER:
            raise ValueError("header too large")
        head = json.loads(f.read(n))
        if head.get("model") != self.key:
            raise ValueError("saved for other model files")
        n_tokens = int(head["n_tokens"])
        raw = f.read(4 * n_tokens)
        if len(raw) != 4 * n_tokens or zlib.crc32(raw) != head["tokens_crc"]:
            raise ValueError("its tokens do not match their checksum")
        size = path.stat().st_size
        parts = [int(head["data_len"])] + [int(c["len"]) for c in head["checkpoints"]]
        if size != len(MAGIC) + 4 + n + len(raw) + sum(parts):
            raise ValueError("its size is not the one its header gives")
        return DiskEntry(path, np.frombuffer(raw, dtype="<i4").tolist(),
                         [int(c["n_tokens"]) for c in head["checkpoints"]], int(head["pos_min"]), size), head

    def best(self, prompt: list[int], n_swa: int) -> tuple[DiskEntry | None, int]:
        """The entry that keeps most of `prompt`, and how much (0: none helps)."""
        with self.lock:
            entries = list(self.entries)
        best, most = None, 0
        for e in entries:
            cks = [Checkpoint(n, bytearray()) for n in e.checkpoints]  # only their positions count here
            n, _ = reuse(e.tokens, cks, e.pos_min, prompt, n_swa)
            if n > most:
                best, most = e, n
        return best, most

    def load(self, entry: DiskEntry) -> Saved | None:
        """The entry read back and checked (None, and the file removed, when it does not hold)."""
        try:
            with open(entry.path, "rb") as f:
                again, head = self._header(entry.path, f)
                if again.tokens != entry.tokens:
                    raise ValueError("it changed since it was read")
                data = bytearray(f.read(int(head["data_len"])))
                if zlib.crc32(data) != head["data_crc"]:
                    raise ValueError("its state does not match its checksum")
                cks = []
                for c in head["checkpoints"]:
                    blob = bytearray(f.read(int(c["len"])))
                    if zlib.crc32(blob) != c["crc"]:
                        raise ValueError("a checkpoint does not match its checksum")
                    cks.append(Checkpoint(int(c["n_tokens"]), blob))
        except Exception as e:
            self.refuse(entry, str(e))
            return None
        os.utime(entry.path)  # used now: the last to go
        self.counts.events["disk_hits"] += 1
        return Saved(list(entry.tokens), data, cks, entry.pos_min)

    def refuse(self, entry: DiskEntry, why: str) -> None:
        """An entry that did not hold (llama.cpp refused its state, or its checks failed)."""
        with self.lock:
            if entry in self.entries:
                self.entries.remove(entry)
        self._drop(entry.path, why)
        self._count()

    def _drop(self, path: Path, why: str) -> None:
        log.warning("prompt cache: %s removed: %s", path.name, why)
        self.counts.events["disk_refused"] += 1
        path.unlink(missing_ok=True)

    # ---- writing ------------------------------------------------------------------------
    def put(self, saved: Saved) -> None:
        """Write `saved` (on the writer thread; its data is never changed after it was saved)."""
        with self.lock:
            for e in self.entries:
                if len(e.tokens) >= len(saved.tokens) and common_prefix(e.tokens, saved.tokens) == len(saved.tokens):
                    return  # on disk already, or as part of a longer one
        self.writes.put(saved)

    def flush(self, timeout: float = 60.0) -> None:
        """Wait for the writes asked for so far (at close)."""
        done = threading.Event()
        self.writes.put(done)
        done.wait(timeout)

    def close(self) -> None:
        self.flush()
        self.writes.put(None)

    def _write_loop(self) -> None:
        while True:
            item = self.writes.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                self._write(item)
            except Exception as e:
                log.warning("prompt cache: could not write a saved conversation: %s", e)
                self.counts.events["disk_write_failures"] += 1

    def _write(self, saved: Saved) -> None:
        tokens = np.asarray(saved.tokens, dtype="<i4").tobytes()
        name = hashlib.sha256(tokens).hexdigest()[:32]
        head = json.dumps({"model": self.key, "n_tokens": len(saved.tokens), "tokens_crc": zlib.crc32(tokens),
                           "data_len": len(saved.data), "data_crc": zlib.crc32(saved.data),
                           "pos_min": saved.pos_min, "saved_at": time.time(),
                           "checkpoints": [{"n_tokens": c.n_tokens, "len": len(c.data), "crc": zlib.crc32(c.data)}
                                           for c in saved.checkpoints]}).encode()
        size = len(MAGIC) + 4 + len(head) + len(tokens) + saved.size
        if size > self.budget:
            return
        path = self.folder / f"{name}.state"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(MAGIC + struct.pack("<I", len(head)) + head + tokens)
            f.write(saved.data)
            for c in saved.checkpoints:
                f.write(c.data)
        os.replace(tmp, path)
        entry = DiskEntry(path, list(saved.tokens), [c.n_tokens for c in saved.checkpoints], saved.pos_min, size)
        with self.lock:
            # the entries this one goes on from are not needed any more
            for old in [e for e in self.entries if e.path == path or
                        common_prefix(e.tokens, entry.tokens) == len(e.tokens)]:
                self.entries.remove(old)
                if old.path != path:
                    old.path.unlink(missing_ok=True)
            self.entries.append(entry)
            self.counts.events["disk_saves"] += 1
            while sum(e.size for e in self.entries) > self.budget and len(self.entries) > 1:
                oldest = min(self.entries, key=_used_at)
                self.entries.remove(oldest)
                oldest.path.unlink(missing_ok=True)
                self.counts.events["disk_evictions"] += 1
        self._count()

    def _count(self) -> None:
        with self.lock:
            self.counts.disk_bytes = sum(e.size for e in self.entries)
            self.counts.disk_entries = len(self.entries)


def _used_at(e: DiskEntry) -> float:
    try:
        return e.path.stat().st_mtime
    except OSError:
        return 0.0


def default_disk_budget(folder: Path) -> int:
    """DISK_SHARE of the free space where the folder is, at most DISK_MAX."""
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    return int(min(DISK_MAX, shutil.disk_usage(folder).free * DISK_SHARE))
