"""Which Gemma 4 model to run here: memory fit and an estimate of decoding speed.

Decoding one token reads every weight the token passes through once (for the MoE only its
active experts, for E2B/E4B one row of their per-layer embeddings), so tokens/s is about
memory bandwidth / bytes read per token. A model that does not fit the GPU runs its spilled
layers from system memory at the CPU's bandwidth, which dominates the time. The estimate is
for plain decoding; MTP's gain comes on top and depends on the hardware.
"""

from __future__ import annotations

from dataclasses import dataclass

from .catalog import DEFAULT_QUANT, CatalogModel, load_catalog, memory_needed
from .hardware import Machine

USABLE_TPS = 10.0  # below this a chat feels slow
EFFICIENCY = {"GPU": 0.7, "CPU": 1.0}  # share of the GPU's peak bandwidth decoding reaches; the CPU
# figure is already measured as what decoding reaches (hardware.cpu_bandwidth)
N_CTX = 8192


@dataclass(frozen=True)
class Recommendation:
    model: CatalogModel
    quant: str
    needed: int
    budget: int
    device: str  # "GPU" or "CPU"
    spills: bool  # does not fit the device; on a GPU the rest spills to system RAM
    tps: float  # estimated decode tokens/s without MTP

    def explain(self) -> str:
        gb = 1e9
        s = (f"{self.model.title} {self.quant} + MTP drafter needs about {self.needed / gb:.1f} GB "
             f"({self.device} has {self.budget / gb:.1f} GB usable); about {self.tps:.0f} tok/s here "
             "before MTP (estimate)")
        if self.spills:
            s += ("; it does not fit, and on GPUs that silently spill to system memory MTP becomes "
                  "slower than plain decoding")
        elif self.tps < USABLE_TPS:
            s += "; that is slow for a chat"
        if self.model.mtp_note:
            s += f". {self.model.mtp_note}"
        return s


def bytes_per_token(model: CatalogModel, quant: str) -> float:
    return model.quants[quant] * model.active_fraction


def estimate_tps(model: CatalogModel, quant: str, machine: Machine, n_ctx: int = N_CTX) -> float:
    """Decode tokens/s from bandwidth. On a GPU the weights that do not fit (after the KV
    cache, drafter and buffers) are read from system memory."""
    per_token = bytes_per_token(model, quant)
    if machine.gpu_budget <= 0:
        return EFFICIENCY["CPU"] * machine.cpu_bandwidth / per_token
    weights = model.quants[quant]
    other = memory_needed(model, quant, n_ctx) - weights
    on_gpu = min(1.0, max(0.0, (machine.gpu_budget - other) / weights))
    seconds = (per_token * on_gpu / (EFFICIENCY["GPU"] * machine.gpu_bandwidth)
               + per_token * (1 - on_gpu) / (EFFICIENCY["CPU"] * machine.cpu_bandwidth))
    return 1.0 / seconds


def check_fit(model: CatalogModel, quant: str, machine: Machine, n_ctx: int = N_CTX) -> Recommendation:
    needed = memory_needed(model, quant, n_ctx)
    return Recommendation(model, quant, needed, machine.budget, machine.device, needed > machine.budget,
                          estimate_tps(model, quant, machine, n_ctx))


def recommend(machine: Machine, catalog: list[CatalogModel] | None = None, quant: str = DEFAULT_QUANT,
              n_ctx: int = N_CTX) -> Recommendation:
    """The best model (the catalog is ordered from smallest to best) that fits and runs at a
    usable speed; if none is fast enough, the fastest that fits; if none fits, the smallest."""
    catalog = catalog if catalog is not None else load_catalog()
    options = [check_fit(m, quant, machine, n_ctx) for m in catalog if quant in m.quants]
    fitting = [r for r in options if not r.spills]
    usable = [r for r in fitting if r.tps >= USABLE_TPS]
    if usable:
        return usable[-1]
    if fitting:
        return max(fitting, key=lambda r: r.tps)
    return min(options, key=lambda r: r.needed)
