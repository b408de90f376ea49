"""Decoding strategies, one module each, behind `DecodeStrategy` (see base.py).

Adding a drafter type = one new module with a DecodeStrategy subclass + its line in make_strategy.
"""

from .base import DecodeState, DecodeStrategy, Step
from ..generation import AUTO
from .draft_control import AUTO_K_MAX, CostModel, DraftController
from .baseline import Baseline
from .mtp import MTP


def make_strategy(name: str, draft_max: int | str = 3) -> DecodeStrategy:
    if name == "baseline":
        return Baseline()
    if name == "mtp":
        return MTP(draft_max)
    raise ValueError(f"unknown decoding strategy {name!r}")


__all__ = ["DecodeState", "DecodeStrategy", "Step", "Baseline", "MTP", "make_strategy",
           "AUTO", "AUTO_K_MAX", "CostModel", "DraftController"]
