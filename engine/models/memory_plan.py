"""How much memory a Gemma 4 pair needs, part by part: the target's weights, the drafter's, the
KV cache (its sliding-window and KV-sharing layers at the chosen context and sequence count)
and llama.cpp's compute and output buffers. One set of sums for both callers: the
recommendation (from the catalog's shapes and sizes) and the loader (from a file's own header);
tests/engine/test_memory_plan.py (the real-vocabulary test pair) and tests/engine/test_sizes.py
(every size's shaped pair) check them against what llama.cpp allocates.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..generation import MAX_DRAFT, MAX_LOOKUP_RUN
from .gguf_info import GGUFInfo

# The logits rows a batch may return (llama.cpp's n_outputs_max): one sequence's verify of the
# longest draft, and for each further sequence a verify of auto's longest MTP draft. Each row
# is the whole vocabulary in f32: 1 MiB for Gemma's 262k tokens.
MAX_OUTPUTS = max(MAX_DRAFT, MAX_LOOKUP_RUN) + 1
SEQ_OUTPUTS = 9
# Rows of n_embd floats per token of a micro-batch that the compute graph keeps alive at once
# besides the logits and the mask (the residual, attention and MLP intermediates, which
# llama.cpp's allocator mostly reuses): measured 0-28 on the shaped pairs on the CPU (the
# 31B shape's 32 query heads the most); 64 leaves a margin for other backends' graphs, which
# these tests cannot see.
ACTIVATION_ROWS = 64


def outputs_max(n_seq: int) -> int:
    return MAX_OUTPUTS + (n_seq - 1) * SEQ_OUTPUTS


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes by part. `kv` holds the drafter's share too: it reads the target's cache.
    `projector`: the pictures' and sounds' encoder (mmproj) when one is loaded, its weights
    (its compute buffer is sized by the first picture it reads and not planned)."""

    weights: int
    drafter: int
    kv: int
    compute: int
    n_ctx: int
    projector: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.drafter + self.kv + self.compute + self.projector

    def describe(self) -> str:
        gb = 1e9
        parts = [f"weights {self.weights / gb:.2f}"]
        if self.drafter:
            parts.append(f"drafter {self.drafter / gb:.2f}")
        parts.append(f"KV cache {self.kv / gb:.2f} ({self.n_ctx:,} tokens)")
        parts.append(f"compute {self.compute / gb:.2f}")
        if self.projector:
            parts.append(f"projector {self.projector / gb:.2f}")
        return f"{self.total / gb:.2f} GB: " + ", ".join(parts)


def kv_cache_bytes(shape: dict, n_ctx: int, n_ubatch: int = 512, n_seq: int = 1, bytes_per_value: int = 2) -> int:
    """K and V cache of a Gemma 4 model for n_ctx tokens (F16 by default), as llama.cpp sizes it.

    Full-attention layers keep n_ctx cells. Sliding-window layers keep the window of every
    sequence (the cache is unified: n_swa x n_seq) plus one micro-batch, padded to 256, at most
    n_ctx. KV-sharing layers (E2B/E4B) store nothing of their own. Every `swa_every`-th layer
    with its own KV cache is a full-attention layer; `n_head_kv_full`, where a size has it, is
    the full-attention layers' KV head count (`n_head_kv` the sliding-window layers').
    """
    swa_cells = -(-min(n_ctx, shape["n_swa"] * n_seq + n_ubatch) // 256) * 256
    total = 0
    for i in range(shape["kv_layers"]):
        full = (i + 1) % shape["swa_every"] == 0
        cells = n_ctx if full else swa_cells
        head_dim = shape["head_dim_full"] if full else shape["head_dim_swa"]
        n_head_kv = shape.get("n_head_kv_full", shape["n_head_kv"]) if full else shape["n_head_kv"]
        total += 2 * cells * n_head_kv * head_dim * bytes_per_value
    return total


def compute_bytes(shape: dict, n_ctx: int, n_ubatch: int = 512, n_seq: int = 1, drafter: bool = True) -> int:
    """llama.cpp's compute and output buffers: the target's logits rows twice (the graph's
    result and the output buffer they are copied to), its f16 attention mask (n_ctx x n_ubatch),
    the activations of one micro-batch; the drafter's logits (one row per sequence) twice."""
    row = shape["n_vocab"] * 4
    target = 2 * outputs_max(n_seq) * row + n_ctx * n_ubatch * 2 + ACTIVATION_ROWS * n_ubatch * shape["n_embd"] * 4
    return target + (2 * n_seq * row if drafter else 0)


def plan(shape: dict, weights: int, drafter: int, n_ctx: int, n_seq: int = 1, n_ubatch: int = 512,
         projector: int = 0) -> MemoryPlan:
    return MemoryPlan(weights=weights, drafter=drafter, kv=kv_cache_bytes(shape, n_ctx, n_ubatch, n_seq),
                      compute=compute_bytes(shape, n_ctx, n_ubatch, n_seq, drafter > 0), n_ctx=n_ctx,
                      projector=projector)


def shape_of(info: GGUFInfo) -> dict:
    """The catalog's shape keys (resources/catalog.json) read from a Gemma 4 target's header."""
    kv_layers = info.n_layer - info.shared_kv_layers
    full = [i for i, swa in enumerate(info.swa_pattern[:kv_layers]) if not swa]
    kv_heads = dict(zip(info.swa_pattern, info.n_head_kv))  # sliding -> its layers' count, full -> theirs
    return {"n_layer": info.n_layer, "kv_layers": kv_layers, "swa_every": full[0] + 1 if full else kv_layers + 1,
            "n_swa": info.n_swa, "n_head_kv": kv_heads.get(True, 0), "n_head_kv_full": kv_heads.get(False, 0),
            "head_dim_swa": info.head_dim_swa[0], "head_dim_full": info.head_dim[0],
            "n_embd": info.n_embd, "n_vocab": info.n_vocab}


def plan_for_files(target: GGUFInfo, drafter: GGUFInfo | None, n_ctx: int, n_seq: int = 1,
                   n_ubatch: int = 512, projector: GGUFInfo | None = None) -> MemoryPlan:
    """The plan of a pair (and its projector) on disk: their tensors' bytes and the target's shape."""
    return plan(shape_of(target), target.tensor_bytes, drafter.tensor_bytes if drafter else 0, n_ctx, n_seq,
                n_ubatch, projector.tensor_bytes if projector else 0)


def allocated_plan(target_rows: list, drafter_rows: list, n_ctx: int, projector_rows: list = ()) -> MemoryPlan:
    """What llama.cpp said it allocated (local/llama.py's recording_allocations), as a plan.
    A "_REPACK" model buffer (the CPU's repacked copy of some quantized tensors) is not counted:
    the mapped file holds those tensors too, and their pages are never read again, so the
    system drops them first. The projector's vision and audio encoders each log the whole
    file's weights, of which each loads its own: counted once."""
    def part(rows, *what):
        return sum(n for w, backend, n in rows if w in what and not backend.endswith("_REPACK"))
    return MemoryPlan(weights=part(target_rows, "model"), drafter=part(drafter_rows, "model"),
                      kv=part(target_rows, "KV") + part(drafter_rows, "KV"),
                      compute=part(target_rows, "compute", "output") + part(drafter_rows, "compute", "output"),
                      n_ctx=n_ctx, projector=max((n for w, _, n in projector_rows if w == "model"), default=0)
                      + part(projector_rows, "compute"))
