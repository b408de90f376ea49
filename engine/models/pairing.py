"""Find the MTP drafter that belongs to a Gemma 4 target among local files, by reading GGUF
headers (never by trusting file names), and say exactly why other files do not pair."""

from __future__ import annotations

from pathlib import Path

from ..errors import TandemError
from .gguf_info import GGUFInfo, check_drafter, read_gguf_info


def candidate_files(target: Path) -> list[Path]:
    """Where drafters usually live: an MTP/ subfolder, the same folder, the parent folder."""
    folder = target.parent
    out = []
    for d in (folder / "MTP", folder / "mtp", folder, folder.parent):
        if d.is_dir():
            out += sorted(p for p in d.glob("*.gguf") if p.resolve() != target.resolve() and p not in out)
    return out


def find_drafter(target: str | Path) -> tuple[Path | None, list[str]]:
    """Returns (the first matching drafter or None, one line per drafter file that does not
    pair). A target that is not Gemma 4 gets one line: no drafter can pair with it."""
    target = Path(target)
    tinfo = read_gguf_info(target)
    if not tinfo.is_gemma4_target:
        return None, [f"{target.name} is a {tinfo.arch} model; MTP drafters exist only for Gemma 4, "
                      "so it runs without the speed-up"]
    reasons = []
    for p in candidate_files(target):
        try:
            info = read_gguf_info(p)
        except TandemError as e:
            reasons.append(str(e))
            continue
        if not (info.is_drafter or "assistant" in info.arch):
            continue  # another target, a projector, another model: not worth a reason
        try:
            check_drafter(tinfo, info)
        except TandemError as e:
            reasons.append(str(e))
            continue
        return p, reasons
    return None, reasons


def pair_info(target: str | Path, drafter: str | Path | None) -> tuple[GGUFInfo, GGUFInfo | None]:
    """Read both headers and check they belong together (raises with the reason)."""
    t = read_gguf_info(target)
    if drafter is None:
        return t, None
    d = read_gguf_info(drafter)
    check_drafter(t, d)
    return t, d


def find_projector(target: str | Path) -> Path | None:
    """The multimodal projector (a 'clip' GGUF, usually named mmproj-*) next to a target."""
    target = Path(target)
    for p in candidate_files(target)[:64]:  # bounded: a folder of thousands of files is not read whole
        if "mmproj" not in p.name.lower():
            continue
        try:
            if read_gguf_info(p).arch == "clip":
                return p
        except TandemError:
            continue
    return None
