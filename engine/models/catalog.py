"""The Gemma 4 catalog (resources/catalog.json) and the memory a model needs."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources

from .memory_plan import plan

DEFAULT_QUANT = "Q4_K_M"


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
    # the drafter's published checkpoint (safetensors), where its clustered head's centroids are
    # (E2B, E4B: engine/models/centroids.py); "": the drafter has none
    assistant: str = ""

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
            active_fraction=float(m.get("active_fraction", 1.0)), mtp_note=m.get("mtp_note", ""),
            assistant=m.get("assistant", "")))
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


def memory_needed(model: CatalogModel, quant: str, n_ctx: int) -> int:
    """Bytes for target weights + drafter weights + KV cache + compute buffers (memory_plan.py).
    The drafter shares the target's KV cache, so it adds only weights and its logits."""
    return plan(model.shape, model.quants[quant], model.drafter_bytes, n_ctx).total
