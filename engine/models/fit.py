"""The context and GPU layers a pair loads with when the user chose neither: the memory plan
(memory_plan.py) against the memory this machine has free, in llama.cpp's order (its
`--fit`, on by default in llama-server): all layers on the GPU if the plan fits, else a
smaller context (never below 4096 tokens), else fewer layers on the GPU. What the user set is
kept. The result says what was chosen and why, in one line, for `tandem serve` and the window.

llama.cpp's own fitting (common/fit.cpp, a dry run of the load) is in libcommon, which
llama-cpp-python does not ship, so it cannot be called from here; this follows its rules
(its 1 GiB margin per GPU too) from the plan, which tests hold within 10 % of what llama.cpp
allocates on the CPU. On a GPU the split of a partial offload is an estimate: the input
embeddings (Gemma 4's 262k-row table, E2B/E4B's per-layer embeddings) stay in system memory,
so counting all weights as the GPU's errs on the safe side.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..generation import AUTO  # a context or GPU layer count left to this module
from .gguf_info import GGUFInfo
from .memory_plan import MemoryPlan, plan_for_files

# the context an automatic one starts from: coding agents' first request is large (Claude
# Code's ~20k tokens with its tools, Codex's ~6k) and asks for up to 32000 tokens back
AUTO_CTX = 32768
CTX_PER_SEQUENCE = 4096  # and at least this much for each sequence decoded together
MIN_AUTO_CTX = 4096  # llama.cpp's --fit-ctx default: the least context it shrinks to
GPU_MARGIN = 1 << 30  # llama.cpp's --fit-target default: what stays free on the GPU
ALL = -1  # llama.cpp's n_gpu_layers for "every layer" (runtime.py loads -1 as 999)


@dataclass(frozen=True)
class Placement:
    n_ctx: int
    target_gpu_layers: int
    drafter_gpu_layers: int
    plan: MemoryPlan
    # "Chose …": what was chosen and why, then what the user should know of their own values
    # (a context past the model's, GPU layers without a GPU, swapping); "" when nothing to say
    note: str
    warnings: tuple[str, ...] = ()  # the second part alone: what the user asked for that cannot be


def wanted_context(n_seq: int) -> int:
    return max(AUTO_CTX, CTX_PER_SEQUENCE * n_seq)


def _contexts(want: int, auto: bool, train: int) -> list[int]:
    """The contexts to try, largest first: the one asked for (at most the model's trained
    length), then halves of it down to MIN_AUTO_CTX when it is left to us."""
    top = min(want, train) if train > 0 else want
    out = [top]
    while auto and out[-1] > MIN_AUTO_CTX:
        out.append(max(MIN_AUTO_CTX, out[-1] // 2))
    return out


def _context_words(n_ctx: int, want: int, top: int, top_plan: MemoryPlan, n_seq: int) -> str:
    """Why an automatic context is what it is: the memory, the model's trained length, or the default."""
    words = f"a context of {n_ctx:,} tokens"
    if n_ctx < top:
        return words + f" (at {top:,} the pair needs {_gb(top_plan.total)}: more than there is)"
    if top < want:
        return words + f" (the model's trained length; {want:,} wanted for {n_seq} sequences)"
    return words + (f" (4,096 for each of {n_seq} sequences)" if want > AUTO_CTX else
                    " (the default, for coding agents' long prompts; it fits)")


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def place(target: GGUFInfo, drafter: GGUFInfo | None, n_ctx, target_gpu_layers, drafter_gpu_layers,
          n_seq: int, n_ubatch: int, gpu_free: int, ram_free: int, gpu_name: str = "the GPU",
          projector: GGUFInfo | None = None) -> Placement:
    """Where the pair goes. Each of `n_ctx`, `target_gpu_layers` and `drafter_gpu_layers`: the
    user's value (layers: a count or ALL), or AUTO. `gpu_free` 0: no GPU llama.cpp can use.
    The projector, when there is one, goes where the target's layers go (as runtime.py loads it)."""
    ctx_auto = n_ctx == AUTO
    want = wanted_context(n_seq) if ctx_auto else n_ctx
    ctxs = _contexts(want, ctx_auto, target.context_length)
    plans = [plan_for_files(target, drafter, c, n_seq, n_ubatch, projector) for c in ctxs]
    layers_auto = target_gpu_layers == AUTO
    drafter_auto = drafter_gpu_layers == AUTO
    budget = gpu_free - GPU_MARGIN if gpu_free > 0 else 0
    chosen, said = [], []  # what was chosen for the user; what the user should know of their own choice
    if budget > 0 and layers_auto:
        p = next((p for p in plans if p.total <= budget), None)
        if p is not None:
            layers, d_layers = ALL, ALL if drafter_auto else drafter_gpu_layers
            chosen.append(f"every layer on {gpu_name} (the pair needs {_gb(p.total)}, {_gb(gpu_free)} free)")
        else:
            p = plans[-1]
            # the drafter first (it is small and runs once per drafted token), then as many of
            # the target's layers as the rest holds, each with its part of the KV cache
            d_on_gpu = drafter_auto and p.drafter + p.compute + p.projector <= budget
            room = budget - p.compute - p.projector - (p.drafter if d_on_gpu else 0)
            per_layer = p.weights / (target.n_layer + 1) + p.kv / target.n_layer
            layers = max(0, min(target.n_layer, int(room // per_layer)))
            d_layers = (ALL if d_on_gpu else 0) if drafter_auto else drafter_gpu_layers
            chosen.append(f"{layers} of {target.n_layer} layers on {gpu_name} (the pair needs {_gb(p.total)}, "
                          f"{_gb(gpu_free)} free), the rest on the CPU")
    else:
        layers = 0 if layers_auto else target_gpu_layers
        d_layers = 0 if drafter_auto else drafter_gpu_layers
        # on the CPU the whole plan is in system memory
        p = next((p for p in plans if p.total <= ram_free), plans[-1]) if layers == 0 else plans[0]
        if layers_auto or drafter_auto:
            chosen.append(f"the CPU ({'no GPU that llama.cpp can use; ' if gpu_free <= 0 else ''}"
                          f"the pair needs {_gb(p.total)}, {_gb(ram_free)} available)")
        if gpu_free <= 0 and (layers != 0 or d_layers not in (0, AUTO)):
            said.append("no GPU that llama.cpp can use: the GPU layers asked for run on the CPU")
    if ctx_auto:
        chosen.append(_context_words(p.n_ctx, want, ctxs[0], plans[0], n_seq))
    elif p.n_ctx < want:
        said.append(f"a context of {p.n_ctx:,} tokens, not the {want:,} asked for: the model was trained for "
                    f"{p.n_ctx:,}")
    if layers == 0 and p.total > ram_free:
        said.append(f"the pair needs {_gb(p.total)} and {_gb(ram_free)} is available: expect swapping")
    note = "; ".join((["Chose " + "; ".join(chosen)] if chosen else []) + said)
    note = note[:1].upper() + note[1:]
    return Placement(p.n_ctx, layers, d_layers, p, note, tuple(w[:1].upper() + w[1:] for w in said))
