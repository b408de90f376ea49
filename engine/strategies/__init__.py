"""Decoding strategies, one module each, behind `DecodeStrategy` (see base.py).

Adding a draft source = one new module proposing drafts + its place in speculative.py.
"""

from .base import DecodeState, DecodeStrategy, Step
from ..generation import AUTO
from .draft_control import AUTO_K_MAX, CostModel, DraftController
from .baseline import Baseline
from .speculative import Speculative


def make_strategy(name: str, draft_max: int | str = 3) -> DecodeStrategy:
    """baseline; mtp (the drafter), lookup (the text so far) or hybrid (both, chosen per step)."""
    if name == "baseline":
        return Baseline()
    if name in ("mtp", "lookup"):
        return Speculative((name,), draft_max)
    if name == "hybrid":
        return Speculative(("mtp", "lookup"), draft_max)
    raise ValueError(f"unknown decoding strategy {name!r}")


__all__ = ["DecodeState", "DecodeStrategy", "Step", "Baseline", "Speculative", "make_strategy",
           "AUTO", "AUTO_K_MAX", "CostModel", "DraftController"]
