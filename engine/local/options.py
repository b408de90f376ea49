"""How a local pair is loaded (`LoadOptions`): plain values, no llama.cpp, so the app's
records (app.core) can hold them without loading the library."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..generation import AUTO  # also the context and GPU layers left to engine/models/fit.py
from ..models.draft_head import check_head

KV_TYPES = {"f16": 1, "q8_0": 8, "f32": 0}  # llama.cpp's ggml types for the KV cache
MAX_SEQ = 64  # sequences one context holds (llama.cpp's limit is 256)
# llama.cpp rounds every context up to a multiple of 256 and caps the batch at the size asked
# for; below 256 a "context" cannot hold a chat template and a reply anyway.
MIN_CTX = 256
MAX_CTX = 1 << 20


@dataclass(frozen=True)
class LoadOptions:
    # the context in tokens, or AUTO: fit.AUTO_CTX (or 4096 per sequence, if more) where the
    # memory plan fits, else less, never below 4096
    n_ctx: int | str = 4096
    n_batch: int = 512
    n_ubatch: int = 512
    n_threads: int = 0  # 0 = physical cores
    # layers on the GPU: a count, -1 for all, or AUTO: all where the memory plan fits, else fewer
    # (0 on a machine without a GPU)
    target_gpu_layers: int | str = AUTO
    drafter_gpu_layers: int | str = AUTO
    flash_attn: bool = True
    kv_type: str = "f16"
    verbose: bool = False
    n_seq: int = 1  # sequences decoded together (tandem serve --parallel, plus the window's own)
    # the host cache of conversations out of the slots (engine/local/prompt_cache.py), in MiB:
    # -1, a share of the memory available at load; 0, none
    cache_ram_mib: int = -1
    # the same conversations on disk (engine/local/disk_cache.py), so a restart reads nothing
    # again, in MiB: -1, a share of the free disk space; 0, none (the default of the Python API;
    # tandem serve and the window turn it on)
    cache_disk_mib: int = 0
    # the drafter's head (engine/models/draft_head.py): auto, full or clustered
    draft_head: str = AUTO

    def validate(self) -> None:
        """Refuse sizes llama.cpp would assert on (a native abort kills the whole app)."""
        check_head(self.draft_head)
        cpus = os.cpu_count() or 1
        if self.n_ctx != AUTO and not (_count(self.n_ctx) and MIN_CTX <= self.n_ctx <= MAX_CTX):
            raise ValueError(f"context size must be {AUTO!r} or between {MIN_CTX} and {MAX_CTX} tokens "
                             f"(got {self.n_ctx!r})")
        for what, n in (("GPU layers", self.target_gpu_layers), ("drafter GPU layers", self.drafter_gpu_layers)):
            if n != AUTO and not (_count(n) and n >= -1):
                raise ValueError(f"{what} must be {AUTO!r}, -1 (all) or a count (got {n!r})")
        if not 0 <= self.n_threads <= cpus:
            raise ValueError(f"threads must be between 0 (automatic) and {cpus}, the CPUs of this "
                             f"machine (got {self.n_threads})")
        if self.n_batch < 1 or self.n_ubatch < 1:
            raise ValueError(f"batch sizes must be at least 1 (got {self.n_batch}, {self.n_ubatch})")
        if not 1 <= self.n_seq <= MAX_SEQ:
            raise ValueError(f"parallel sequences must be between 1 and {MAX_SEQ} (got {self.n_seq})")
        if self.cache_ram_mib < -1 or self.cache_disk_mib < -1:
            raise ValueError(f"the prompt cache size must be -1 (automatic), 0 (off) or a size in MiB "
                             f"(got {self.cache_ram_mib})")
        if self.kv_type not in KV_TYPES:
            raise ValueError(f"kv_type must be one of {', '.join(KV_TYPES)}")


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
