"""`tandem models list | download | import | verify`."""

from __future__ import annotations

import sys
from pathlib import Path

from .catalog import check_fit, find, load_catalog
from .download import Downloader, Progress
from ..errors import TandemError
from .gguf_info import read_gguf_info
from .library import Library
from .pairing import find_drafter


def _fmt_progress(p: Progress) -> str:
    eta = f", {p.eta_s:.0f} s left" if p.eta_s is not None else ""
    return (f"\r{p.label:<8} {p.filename[-40:]:<40} {p.fraction * 100:5.1f}%  "
            f"{p.done / 1e6:,.1f}/{p.total / 1e6:,.1f} MB  {p.speed / 1e6:.1f} MB/s{eta}   ")


def cmd_list(args) -> int:
    from .hardware import memory_budget

    budget, device, desc = memory_budget()
    print(f"This machine: {desc}\n")
    lib = Library()
    have = {e.name for e in lib.entries()}
    for m in load_catalog():
        fit = check_fit(m, "Q4_K_M", budget, device)
        mark = "downloaded" if m.name in have else ("fits" if not fit.spills else "too big")
        print(f"  {m.name:<18} {m.title:<24} Q4_K_M ~{fit.needed / 1e9:5.1f} GB  k={m.draft_max}  [{mark}]  {m.summary}")
    others = [e for e in lib.entries() if e.name not in {m.name for m in load_catalog()}]
    if others:
        print("\nImported:")
        for e in others:
            print(f"  {e.name:<30} {e.target}" + (f"\n  {'':<30} drafter {e.drafter}" if e.drafter else ""))
    return 0


def cmd_download(args) -> int:
    model = find(args.name)
    d = Downloader(folder=args.dir)
    t, dr = d.download_pair(model, args.quant, lambda p: sys.stderr.write(_fmt_progress(p)))
    sys.stderr.write("\n")
    Library().add(model.name, t, dr, "download")
    print(f"target:  {t}\ndrafter: {dr}")
    return 0


def cmd_import(args) -> int:
    p = Path(args.path)
    targets = sorted(p.glob("*.gguf")) if p.is_dir() else [p]
    lib = Library()
    imported = 0
    for t in targets:
        info = read_gguf_info(t)
        if info.is_drafter or info.arch == "gemma4_assistant":
            continue
        drafter, reasons = find_drafter(t)
        lib.add(t.stem, t, drafter, "import")
        imported += 1
        print(f"{t.name}: imported ({info.arch})" + (f" with drafter {drafter.name}" if drafter else ", no drafter"))
        for r in reasons:
            print(f"  not paired: {r}")
    if not imported:
        raise TandemError(f"{p}: no chat model GGUF found there")
    return 0


def cmd_verify(args) -> int:
    results = Library().verify()
    if not results:
        print("No models yet: `tandem models download NAME` or `tandem models import PATH`.")
        return 0
    bad = 0
    for e, problem in results:
        print(f"{e.name:<30} {'ok' if problem is None else 'PROBLEM: ' + problem}")
        bad += problem is not None
    return 2 if bad else 0


def run(args) -> int:
    return {"list": cmd_list, "download": cmd_download, "import": cmd_import,
            "verify": cmd_verify}[args.models_command](args)
