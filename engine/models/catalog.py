"""The Gemma 4 catalog (resources/catalog.json) and what fits on this machine."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

DEFAULT_QUANT = "Q4_K_M"
COMPUTE_OVERHEAD = 300 * 2**20  # compute buffers, logits and scratch: a conservative flat allowance


@dataclass(frozen=True)
class CatalogModel:
    name: str
    title: str
    summary: str
    context_length: int
    draft_max: int
    target_repo: str
    target_pattern: str
    quants: dict  # quant -> approximate target bytes
    drafter_sources: list  # [{"repo", "pattern"}], tried in order
    drafter_bytes: int
    shape: dict

    def target_glob(self, quant: str) -> str:
        return self.target_pattern.replace("{quant}", quant)


def load_catalog() -> list[CatalogModel]:
    data = json.loads(resources.files("resources").joinpath("catalog.json").read_text("utf-8"))
    out = []
    for m in data["models"]:
        out.append(CatalogModel(
            name=m["name"], title=m["title"], summary=m.get("summary", ""),
            context_length=int(m["context_length"]), draft_max=int(m["draft_max"]),
            target_repo=m["target"]["repo"], target_pattern=m["target"]["pattern"],
            quants={q: int(b) for q, b in m["target"]["quants"].items()},
            drafter_sources=list(m["drafter"]), drafter_bytes=int(m["drafter_bytes"]), shape=dict(m["shape"])))
    return out


def find(name: str, catalog: list[CatalogModel] | None = None) -> CatalogModel:
    catalog = catalog if catalog is not None else load_catalog()
    for m in catalog:
        if m.name == name.lower():
            return m
    raise ValueError(f"unknown model {name!r}; known: {', '.join(m.name for m in catalog)}")


def kv_cache_bytes(shape: dict, n_ctx: int, n_ubatch: int = 512, bytes_per_value: int = 2) -> int:
    """K and V cache of a Gemma 4 model for n_ctx tokens (F16 by default).

    Sliding-window layers keep only n_swa + n_ubatch cells (llama.cpp pads this to 256);
    full-attention layers keep n_ctx. KV-sharing layers (E2B/E4B) store nothing of their own.
    Every `swa_every`-th layer with its own KV cache is a full-attention layer.
    """
    swa_cells = min(n_ctx, -(-(shape["n_swa"] + n_ubatch) // 256) * 256)
    total = 0
    for i in range(shape["kv_layers"]):
        full = (i + 1) % shape["swa_every"] == 0
        cells = n_ctx if full else swa_cells
        head_dim = shape["head_dim_full"] if full else shape["head_dim_swa"]
        total += 2 * cells * shape["n_head_kv"] * head_dim * bytes_per_value
    return total


def memory_needed(model: CatalogModel, quant: str, n_ctx: int) -> int:
    """Bytes for target weights + drafter weights + KV cache + compute buffers.
    The drafter shares the target's KV cache, so it adds only weights."""
    return model.quants[quant] + model.drafter_bytes + kv_cache_bytes(model.shape, n_ctx) + COMPUTE_OVERHEAD


@dataclass(frozen=True)
class Recommendation:
    model: CatalogModel
    quant: str
    needed: int
    budget: int
    device: str  # "GPU" or "CPU"
    spills: bool  # True: does not fit the device; a GPU would spill to system RAM

    def explain(self) -> str:
        gb = 1e9
        s = (f"{self.model.title} {self.quant} + MTP drafter needs about {self.needed / gb:.1f} GB "
             f"({self.device} has {self.budget / gb:.1f} GB usable)")
        if self.spills:
            s += ("; it does not fit, and on GPUs that silently spill to system memory MTP becomes "
                  "slower than plain decoding")
        return s


def recommend(budget_bytes: int, device: str, n_ctx: int = 8192,
              catalog: list[CatalogModel] | None = None, quant: str = DEFAULT_QUANT) -> Recommendation:
    """The largest pair whose weights, drafter, KV cache and buffers fit in budget_bytes."""
    catalog = catalog if catalog is not None else load_catalog()
    fitting = [m for m in catalog if quant in m.quants and memory_needed(m, quant, n_ctx) <= budget_bytes]
    if fitting:
        best = max(fitting, key=lambda m: m.quants[quant])
        return Recommendation(best, quant, memory_needed(best, quant, n_ctx), budget_bytes, device, False)
    smallest = min(catalog, key=lambda m: m.quants[quant])
    return Recommendation(smallest, quant, memory_needed(smallest, quant, n_ctx), budget_bytes, device, True)


def check_fit(model: CatalogModel, quant: str, budget_bytes: int, device: str, n_ctx: int = 8192) -> Recommendation:
    needed = memory_needed(model, quant, n_ctx)
    return Recommendation(model, quant, needed, budget_bytes, device, needed > budget_bytes)
