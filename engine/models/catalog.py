"""The Gemma 4 catalog (resources/catalog.json) and the memory a model needs."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources

DEFAULT_QUANT = "Q4_K_M"
COMPUTE_OVERHEAD = 300 * 2**20  # compute buffers, logits and scratch: a conservative flat allowance


@dataclass(frozen=True)
class Source:
    repo: str
    qat: bool = False  # quantization-aware-trained files
    drafter_only: bool = False  # a repository of drafters (community conversions)


@dataclass(frozen=True)
class CatalogModel:
    name: str
    title: str
    summary: str
    context_length: int
    draft_max: int
    quants: dict  # quant -> approximate target bytes
    sources: tuple  # Source, in order of preference
    drafter_bytes: int
    shape: dict
    active_fraction: float = 1.0  # share of the target's bytes read per generated token
    mtp_note: str = ""  # said to the user where MTP gains little

    def target_sources(self) -> list[Source]:
        return [s for s in self.sources if not s.drafter_only]


REPO_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")


def load_catalog() -> list[CatalogModel]:
    data = json.loads(resources.files("resources").joinpath("catalog.json").read_text("utf-8"))
    out = []
    for m in data["models"]:
        sources = tuple(Source(s["repo"], bool(s.get("qat", False)), bool(s.get("drafter_only", False)))
                        for s in m["sources"])
        assert all(REPO_RE.fullmatch(s.repo) for s in sources), m["name"]
        out.append(CatalogModel(
            name=m["name"], title=m["title"], summary=m.get("summary", ""),
            context_length=int(m["context_length"]), draft_max=int(m["draft_max"]),
            quants={q: int(b) for q, b in m["quants"].items()}, sources=sources,
            drafter_bytes=int(m["drafter_bytes"]), shape=dict(m["shape"]),
            active_fraction=float(m.get("active_fraction", 1.0)), mtp_note=m.get("mtp_note", "")))
    return out


def find(name: str, catalog: list[CatalogModel] | None = None) -> CatalogModel:
    catalog = catalog if catalog is not None else load_catalog()
    for m in catalog:
        if m.name == name.lower():
            return m
    raise ValueError(f"unknown model {name!r}; known: {', '.join(m.name for m in catalog)}, "
                     "or a repository as owner/name[:QUANT]")


def model_for_repo(repo: str, catalog: list[CatalogModel] | None = None) -> CatalogModel | None:
    """The catalog model one of whose sources is `repo` (Hub names are case-insensitive)."""
    catalog = catalog if catalog is not None else load_catalog()
    for m in catalog:
        if any(s.repo.lower() == repo.lower() for s in m.sources):
            return m
    return None


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
