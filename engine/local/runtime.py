"""Loaded models and their llama.cpp contexts: the code that owns their raw pointers (the
projector's are media.py's).

`Runtime` loads a target (any architecture llama.cpp knows) and optionally a Gemma 4 MTP
drafter whose context is linked to the target's (`ctx_other`) so it reads the target's KV
cache and hidden state. `TargetRunner` and `DrafterRunner` wrap the decode calls with
reusable batches (rows of several sequences) and buffers, and time the time spent inside llama.cpp.
"""

from __future__ import annotations

import ctypes
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import EngineError, MTPUnavailableError
from ..models.draft_head import ENV as DRAFT_HEAD_ENV
from ..models.draft_head import DraftHead, choose_head
from ..models.own_clusters import drafter_for_head
from ..models.fit import Placement, place
from ..models.gguf_info import GGUFInfo, check_drafter, check_target, read_gguf_info
from ..models.hardware import free_memory, physical_cores
from ..models.memory_plan import MemoryPlan, allocated_plan, outputs_max, plan_for_files
from .llama import clustered_head_built, ensure_backend, ext, lib, recording_allocations
from .options import KV_TYPES, MIN_CTX, LoadOptions

CTX_STEP = 256  # llama.cpp rounds every context up to a multiple of 256 (options.MIN_CTX)


THREADS_ENV = "TANDEM_THREADS"


def automatic_threads() -> int:
    """The threads "automatic" (0) means: $TANDEM_THREADS if set (as llama-server reads
    LLAMA_ARG_THREADS), else the physical cores. Tiny models want 1: their graphs are
    microseconds of work, so waking a thread team costs more than it saves."""
    raw = os.environ.get(THREADS_ENV, "").strip()
    if not raw:
        return physical_cores()
    cpus = os.cpu_count() or 1
    if not raw.isdigit() or not 1 <= int(raw) <= cpus:
        raise EngineError(f"{THREADS_ENV} must be a whole number from 1 to {cpus}, the CPUs of "
                          f"this machine (got {raw!r})")
    return int(raw)


class TargetRunner:
    """Decodes token batches on the target context with one reusable batch."""

    def __init__(self, ctx, n_batch: int, n_vocab: int, n_embd: int):
        self.ctx = ctx
        self.n_batch = n_batch
        self.n_vocab = n_vocab
        self.n_embd = n_embd
        self.batch = lib.llama_batch_init(n_batch, 0, 1)
        nb = n_batch
        self._tok = np.ctypeslib.as_array(self.batch.token, shape=(nb,))
        self._pos = np.ctypeslib.as_array(self.batch.pos, shape=(nb,))
        self._out = np.ctypeslib.as_array(
            ctypes.cast(self.batch.logits, ctypes.POINTER(ctypes.c_int8)), shape=(nb,))
        self._rows = np.arange(nb, dtype=self._pos.dtype)  # row offsets, reused every decode
        np.ctypeslib.as_array(self.batch.n_seq_id, shape=(nb,))[:] = 1
        # each row's sequence id: llama_batch_init gives every row its own small array; they are
        # pointed into one numpy array instead (set per batch without a Python loop) and put
        # back before llama_batch_free
        self._seq = np.zeros(nb, dtype=np.int32)
        self._seq_ptr = type(self.batch.seq_id[0])
        # addresses, not the pointer objects: those are views of the array being rewritten
        self._own_seq_ptrs = [ctypes.cast(self.batch.seq_id[i], ctypes.c_void_p).value for i in range(nb)]
        base = self._seq.ctypes.data
        for i in range(nb):
            self.batch.seq_id[i] = ctypes.cast(base + 4 * i, self._seq_ptr)
        self.n = 0  # rows of the batch being built
        self.n_out = 0  # of which flagged for output
        self.memory = lib.llama_get_memory(ctx)
        self.llama_s = 0.0  # seconds spent inside llama_decode (+ sync)
        self.n_decodes = 0  # llama_decode calls, and the sequences in them all told (/metrics)
        self.n_busy = 0
        self.h_enabled = False

    def set_hidden_output(self, on: bool) -> None:
        """Expose the post-norm hidden state of every batch row (what the drafter reads)."""
        if on != self.h_enabled:
            ext.llama_set_embeddings_nextn(self.ctx, on, False)
            self.h_enabled = on

    def decode(self, tokens, start_pos: int, outputs: str = "none", seq: int = 0) -> None:
        """Decode tokens of one sequence at start_pos.. ; outputs: 'none', 'last' or 'all' logits rows."""
        self.begin()
        self.add(tokens, start_pos, seq, outputs)
        self.submit()

    def begin(self) -> None:
        """Start building a batch (rows of any sequences, added with `add`)."""
        self.n = self.n_out = 0

    @property
    def room(self) -> int:
        return self.n_batch - self.n

    def add(self, tokens, start_pos: int, seq: int, outputs: str = "none") -> tuple[int, int]:
        """Append one sequence's rows at positions start_pos.. ; returns (first batch row, first
        output row): logits and hidden rows are read by batch row, a block of logits by output row."""
        n, at = len(tokens), self.n
        if n < 1 or n > self.room:
            raise ValueError("batch too large")
        end = at + n
        self._tok[at:end] = tokens
        np.add(self._rows[:n], start_pos, out=self._pos[at:end])
        self._seq[at:end] = seq
        self._out[at:end] = 1 if outputs == "all" else 0
        if outputs == "last":
            self._out[end - 1] = 1
        out_at = self.n_out
        self.n_out += n if outputs == "all" else int(outputs == "last")
        self.n = end
        return at, out_at

    def submit(self) -> None:
        """Decode the batch built since `begin`."""
        b = self.batch
        b.n_tokens = self.n
        t0 = time.perf_counter()
        rc = lib.llama_decode(self.ctx, b)
        lib.llama_synchronize(self.ctx)
        self.llama_s += time.perf_counter() - t0
        if rc != 0:
            raise EngineError(f"llama_decode failed on the target (code {rc})")
        self.n_decodes += 1
        self.n_busy += int(np.unique(self._seq[:self.n]).size)

    def logits(self, i: int) -> np.ndarray:
        """Logits row i of the last decode (a view: copy before the next decode)."""
        return np.ctypeslib.as_array(lib.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,))

    def logits_rows(self, n: int, first: int = 0) -> np.ndarray:
        """n output rows of the last decode from output row `first`, as one (n, n_vocab) view."""
        return np.ctypeslib.as_array(lib.llama_get_logits(self.ctx), shape=(first + n, self.n_vocab))[first:]

    def hidden(self, i: int, out: np.ndarray) -> None:
        """Copy the hidden state of batch row i of the last decode into `out`."""
        ptr = ext.llama_get_embeddings_nextn_ith(self.ctx, i)
        if not ptr:
            raise EngineError("the target returned no hidden state for the drafter")
        out[:] = np.ctypeslib.as_array(ptr, shape=(self.n_embd,))

    def truncate(self, n_keep: int, seq: int = 0) -> None:
        """Drop every cached position >= n_keep of a sequence (n_keep 0: all of it)."""
        lib.llama_memory_seq_rm(self.memory, seq, n_keep, -1)

    def pos_min(self, seq: int = 0) -> int:
        """The oldest position a sequence still has in the cache (-1: none)."""
        return lib.llama_memory_seq_pos_min(self.memory, seq)

    def save_state(self, seq: int, partial: bool) -> bytearray:
        """A sequence's cached state, as llama.cpp serialises it: `partial`, only the
        sliding-window layers' cells (a checkpoint); else every layer's (the whole prompt).
        The drafter shares this cache and keeps nothing of its own, so this is the pair's state."""
        flags = lib.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY if partial else lib.LLAMA_STATE_SEQ_FLAGS_NONE
        size = lib.llama_state_seq_get_size_ext(self.ctx, seq, flags)
        data = bytearray(size)  # filled in place: a whole prompt's state may be hundreds of MB
        n = lib.llama_state_seq_get_data_ext(self.ctx, (ctypes.c_uint8 * size).from_buffer(data), size, seq, flags)
        if n != size:
            raise EngineError(f"llama.cpp saved {n} of the {size} bytes of a sequence's state")
        return data

    def load_state(self, seq: int, data: bytearray, partial: bool) -> bool:
        """Put a `save_state` back into a sequence (what it held in those layers is replaced);
        False when llama.cpp refused it (then those layers of the sequence hold nothing)."""
        flags = lib.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY if partial else lib.LLAMA_STATE_SEQ_FLAGS_NONE
        if not data:
            return False
        buf = (ctypes.c_uint8 * len(data)).from_buffer(data)
        return lib.llama_state_seq_set_data_ext(self.ctx, buf, len(data), seq, flags) == len(data)

    def clear(self) -> None:
        lib.llama_memory_clear(self.memory, True)

    def free(self) -> None:
        if self.batch is not None:
            for i, addr in enumerate(self._own_seq_ptrs):
                self.batch.seq_id[i] = ctypes.cast(addr, self._seq_ptr)
            lib.llama_batch_free(self.batch)
            self.batch = None


class DrafterRunner:
    """Draft steps: rows of (token, position, sequence, hidden row) -> each row's next-token
    logits and the drafter's own next hidden row. One row per drafting sequence: the drafts
    of several sequences are one batch (each at its own sequence's position)."""

    def __init__(self, ctx, n_vocab: int, n_embd_out: int, n_rows: int = 1):
        self.ctx = ctx
        self.n_vocab = n_vocab
        self.n_embd = n_embd_out
        # llama_batch_init allocates `embd` but not `token` when n_embd > 0: we attach our own
        # token array and detach it again before llama_batch_free.
        self.batch = lib.llama_batch_init(n_rows, n_embd_out, 1)
        self._tok_arr = (lib.llama_token * n_rows)()
        self.batch.token = ctypes.cast(self._tok_arr, ctypes.POINTER(lib.llama_token))
        self.batch.n_tokens = 1
        for i in range(n_rows):
            self.batch.pos[i] = 0
            self.batch.n_seq_id[i] = 1
            self.batch.seq_id[i][0] = 0
            self.batch.logits[i] = 1
        self.h_rows = np.ctypeslib.as_array(self.batch.embd, shape=(n_rows, n_embd_out))  # input rows
        self.llama_s = 0.0

    def step_rows(self, rows: list[tuple[int, int, int]]) -> None:
        """One draft step for several sequences: rows of (token, position, sequence), whose
        input hidden rows are in `h_rows[:len(rows)]`. Read the results with `logits(i)` and
        `h_out(i)` before the next step."""
        for i, (tok, pos, seq) in enumerate(rows):
            self._tok_arr[i] = tok
            self.batch.pos[i] = pos
            self.batch.seq_id[i][0] = seq
        self._run(len(rows))

    def _run(self, n: int) -> None:
        self.batch.n_tokens = n
        t0 = time.perf_counter()
        rc = lib.llama_decode(self.ctx, self.batch)
        lib.llama_synchronize(self.ctx)
        self.llama_s += time.perf_counter() - t0
        if rc != 0:
            raise EngineError(f"llama_decode failed on the drafter (code {rc})")

    def logits(self, i: int) -> np.ndarray:
        return np.ctypeslib.as_array(lib.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,))

    def h_out(self, i: int) -> np.ndarray:
        hp = ext.llama_get_embeddings_nextn_ith(self.ctx, i)
        if not hp:
            raise EngineError("the drafter returned no hidden state")
        return np.ctypeslib.as_array(hp, shape=(self.n_embd,))

    def free(self) -> None:
        if self.batch is not None:
            self.batch.token = ctypes.cast(None, ctypes.POINTER(lib.llama_token))
            lib.llama_batch_free(self.batch)
            self.batch = None


def _context_params(opts: LoadOptions, n_ctx: int, n_threads: int):
    p = lib.llama_context_default_params()
    p.n_ctx = n_ctx
    p.n_batch = opts.n_batch
    p.n_ubatch = opts.n_ubatch
    # Several sequences share one pool of n_ctx cells (unified): one sequence alone may use the
    # whole context, as before, and the memory does not grow with the number of sequences
    p.n_seq_max = opts.n_seq
    p.kv_unified = True
    p.n_threads = n_threads
    p.n_threads_batch = n_threads
    # Set explicitly and identically on both contexts: the drafter views the target's V
    # cache and picks its layout from its own flash-attn flag; a mismatch corrupts drafts.
    p.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED if opts.flash_attn else lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
    p.type_k = KV_TYPES[opts.kv_type]
    p.type_v = KV_TYPES[opts.kv_type]
    p.swa_full = False
    p.embeddings = False
    p.no_perf = True
    # At most MAX_OUTPUTS logits rows per batch (a verify step needs its drafts + 1): 48 MiB of
    # logits for Gemma's 262k vocabulary. llama.cpp otherwise reserves logits for a whole
    # ubatch: 512 x 262k floats = 512 MiB.
    p.n_outputs_max = outputs_max(opts.n_seq)
    return p


class Runtime:
    """Target (+ optional drafter) models and contexts. Free with close()."""

    def __init__(self, target_path, drafter_path=None, options: LoadOptions = LoadOptions(),
                 progress: Callable[[str, float], bool] | None = None, projector_path=None):
        """`projector_path`: the mmproj the engine attaches after loading (media.py), for the
        memory plan and the placement."""
        options.validate()
        self.options = options
        self.target_info: GGUFInfo = read_gguf_info(target_path)
        check_target(self.target_info)
        self.drafter_info: GGUFInfo | None = None
        self.draft_head: DraftHead | None = None
        if drafter_path is not None:
            self.drafter_info = read_gguf_info(drafter_path)
            check_drafter(self.target_info, self.drafter_info)
            # a drafter without a clustered head may have Tandem's own (engine/models/own_clusters.py)
            own = drafter_for_head(self.drafter_info, options.draft_head, progress and (
                lambda done, of: progress("drafter (clustering its head, once)", done / of)))
            if own != self.drafter_info.path:
                self.drafter_info = read_gguf_info(own)
                check_drafter(self.target_info, self.drafter_info)
            self.draft_head = choose_head(options.draft_head, self.drafter_info, clustered_head_built())
        self.projector_info = read_gguf_info(projector_path) if projector_path else None
        ensure_backend(options.verbose)
        # what was left to us (AUTO), chosen from the memory plan; its note says what and why,
        # and what the user should know of their own values
        gpu_free, gpu_name, ram_free = free_memory()
        self.placement: Placement = place(self.target_info, self.drafter_info, options.n_ctx,
                                          options.target_gpu_layers, options.drafter_gpu_layers, options.n_seq,
                                          options.n_ubatch, gpu_free, ram_free, gpu_name, self.projector_info)
        p = self.placement
        self.options = options = replace(options, n_ctx=p.n_ctx, target_gpu_layers=p.target_gpu_layers,
                                         drafter_gpu_layers=p.drafter_gpu_layers)

        self.target_model = self.drafter_model = None
        self.target_ctx = self.drafter_ctx = None
        self.target: TargetRunner | None = None
        self.drafter: DrafterRunner | None = None
        self._progress_refs = []
        # what llama.cpp allocated for each model, by what (model, KV, compute, output) and
        # backend: the memory plan is checked against these (engine/models/memory_plan.py)
        self.allocated: dict[str, list[tuple[str, str, int]]] = {"target": [], "drafter": [], "projector": []}
        try:
            with recording_allocations() as self.allocated["target"]:
                self._load(progress)
        except BaseException:
            self.close()
            raise

    def _load_model(self, path: Path, gpu_layers: int, label: str, progress):
        mp = lib.llama_model_default_params()
        mp.n_gpu_layers = gpu_layers if gpu_layers >= 0 else 999
        if progress is not None:
            @lib.llama_progress_callback
            def cb(frac, _user):
                try:
                    return bool(progress(label, float(frac)) is not False)
                except Exception:
                    return True
            self._progress_refs.append(cb)
            mp.progress_callback = cb
        model = lib.llama_model_load_from_file(str(path).encode(), mp)
        if not model:
            raise EngineError(f"llama.cpp could not load {path.name} (see the log for details)")
        return model

    def _load(self, progress) -> None:
        o = self.options
        ti = self.target_info
        self.n_threads = o.n_threads or automatic_threads()
        self.target_model = self._load_model(ti.path, o.target_gpu_layers, "target", progress)
        self.vocab = lib.llama_model_get_vocab(self.target_model)
        self.n_vocab = lib.llama_vocab_n_tokens(self.vocab)
        self.n_embd = lib.llama_model_n_embd(self.target_model)
        train_ctx = lib.llama_model_n_ctx_train(self.target_model)
        n_ctx = min(o.n_ctx, train_ctx) if train_ctx > 0 else o.n_ctx
        # llama.cpp pads the context to a multiple of 256 but caps n_batch at the unpadded
        # size; asking for the padded size keeps the two consistent.
        n_ctx = max(MIN_CTX, -(-n_ctx // CTX_STEP) * CTX_STEP)
        cp = _context_params(o, n_ctx, self.n_threads)
        self.target_ctx = lib.llama_init_from_model(self.target_model, cp)
        if not self.target_ctx:
            raise EngineError("llama.cpp could not create the target context (out of memory?)")
        self.n_ctx = lib.llama_n_ctx(self.target_ctx)
        # The sizes llama.cpp actually chose: a batch above n_batch is a native abort, and a
        # verify batch must fit one ubatch (so rolling back rejected drafts never needs a
        # sliding-window cell that was recycled).
        self.n_batch = lib.llama_n_batch(self.target_ctx)
        self.n_ubatch = lib.llama_n_ubatch(self.target_ctx)
        self.n_swa = lib.llama_model_n_swa(self.target_model)
        self.target = TargetRunner(self.target_ctx, self.n_batch, self.n_vocab, self.n_embd)
        self.n_seq = o.n_seq
        self.n_outputs_max = cp.n_outputs_max

        if self.drafter_info is None:
            return
        di = self.drafter_info
        with recording_allocations() as self.allocated["drafter"]:
            self._load_drafter(di, progress)

    def _load_drafter(self, di: GGUFInfo, progress) -> None:
        o = self.options
        # the patched graph reads the head at load (engine/models/draft_head.py)
        before = os.environ.get(DRAFT_HEAD_ENV)
        os.environ[DRAFT_HEAD_ENV] = self.draft_head.kind
        try:
            self.drafter_model = self._load_model(di.path, o.drafter_gpu_layers, "drafter", progress)
        finally:
            if before is None:
                os.environ.pop(DRAFT_HEAD_ENV, None)
            else:
                os.environ[DRAFT_HEAD_ENV] = before
        d_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self.drafter_model))
        d_out = lib.llama_model_n_embd_out(self.drafter_model)
        if d_out != self.n_embd or d_vocab != self.n_vocab:
            raise MTPUnavailableError(
                f"{di.path.name}: drafter (width {d_out}, vocab {d_vocab}) does not match "
                f"target (width {self.n_embd}, vocab {self.n_vocab})")
        dp = _context_params(o, self.n_ctx, self.n_threads)
        dp.n_batch = dp.n_ubatch = o.n_seq  # one row per drafting sequence: tiny compute buffers
        dp.ctx_type = lib.LLAMA_CONTEXT_TYPE_MTP
        dp.ctx_other = self.target_ctx
        dp.n_rs_seq = 0
        self.drafter_ctx = lib.llama_init_from_model(self.drafter_model, dp)
        if not self.drafter_ctx:
            raise EngineError("llama.cpp could not create the drafter context")
        if ext.llama_get_ctx_other(self.drafter_ctx) != self.target_ctx:
            raise EngineError("the drafter context is not linked to the target context")
        ext.llama_set_embeddings_nextn(self.drafter_ctx, True, True)
        self.drafter = DrafterRunner(self.drafter_ctx, self.n_vocab, d_out, o.n_seq)

    @property
    def has_drafter(self) -> bool:
        return self.drafter is not None

    def memory(self) -> tuple[MemoryPlan, MemoryPlan]:
        """(planned, allocated): the memory plan of the loaded files at this context, and what
        llama.cpp said it allocated, part by part."""
        o = self.options
        planned = plan_for_files(self.target_info, self.drafter_info, self.n_ctx, o.n_seq, self.n_ubatch,
                                 self.projector_info if self.allocated["projector"] else None)
        return planned, allocated_plan(self.allocated["target"], self.allocated["drafter"], self.n_ctx,
                                       self.allocated["projector"])

    def close(self) -> None:
        """Free in dependency order: the drafter holds raw pointers into the target's cache."""
        for runner in (self.drafter, self.target):
            if runner is not None:
                runner.free()
        self.drafter = self.target = None
        if self.drafter_ctx:
            lib.llama_free(self.drafter_ctx)
            self.drafter_ctx = None
        if self.target_ctx:
            lib.llama_free(self.target_ctx)
            self.target_ctx = None
        if self.drafter_model:
            lib.llama_model_free(self.drafter_model)
            self.drafter_model = None
        if self.target_model:
            lib.llama_model_free(self.target_model)
            self.target_model = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
