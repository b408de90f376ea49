"""Telling the files of a Gemma 4 GGUF repository apart by name: targets of a quantization,
MTP drafters, vision projectors. Repositories name drafters differently (ggml-org: root
`mtp-gemma-4-E2B-it-Q8_0.gguf`; unsloth: `MTP/mtp-...` or `MTP/...-Q8_0-MTP.gguf`; community:
`...-assistant-...`), so no single pattern is relied on: a drafter is any .gguf whose name says
mtp or assistant, and the GGUF header decides after download."""

from __future__ import annotations

import re
SPLIT_RE = re.compile(r"-\d{5}-of-\d{5}\.gguf$")
# closest to Q8_0 first: the drafter is small, and its precision is its acceptance rate
DRAFTER_PRECISION = ["q8_0", "q6_k", "f16", "bf16", "q5_k_m", "q5_k_s", "q5_0", "q4_k_m", "q4_0"]


def base(path: str) -> str:
    return path.rsplit("/", 1)[-1].lower()


def has_quant(path: str, quant: str) -> bool:
    """`Q4_K_M` in `gemma-4-E2B-it-Q4_K_M.gguf` or `gemma-4-31B_q4_k_m-it.gguf`, but not `Q4_0`
    in `...-Q4_0_4_4.gguf`."""
    return re.search(rf"(?<![a-z0-9]){re.escape(quant.lower())}(?![a-z0-9]|_[0-9a-z])", base(path)) is not None


def is_projector(path: str) -> bool:
    return "mmproj" in base(path)


def is_drafter_name(path: str) -> bool:
    b = base(path)
    return b.endswith(".gguf") and ("mtp" in b or "assistant" in b) and not is_projector(path)


def is_qat(path: str) -> bool:
    return "qat" in path.lower()


def pick_target(files: list, quant: str):
    """The single-file target of `quant` (split files are not supported), shortest name first:
    `model-Q4_K_M.gguf` before `model-UD-Q4_K_M.gguf`."""
    hits = [f for f in files if base(f.path).endswith(".gguf") and not is_drafter_name(f.path)
            and not is_projector(f.path) and not SPLIT_RE.search(base(f.path)) and has_quant(f.path, quant)]
    return min(hits, key=lambda f: (len(f.path), f.path)) if hits else None


def precision_rank(path: str) -> int:
    for i, q in enumerate(DRAFTER_PRECISION):
        if has_quant(path, q):
            return i
    return len(DRAFTER_PRECISION)


def drafter_files(files: list, drafter_only_repo: bool = False) -> list:
    """Drafter candidates of one repository. In a repository of drafters any .gguf but a
    projector counts (their names need not say so)."""
    return [f for f in files if is_drafter_name(f.path) or (
        drafter_only_repo and base(f.path).endswith(".gguf") and not is_projector(f.path))]
