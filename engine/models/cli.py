"""`tandem models list | download | import | verify | cluster`."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import TandemError
from .catalog import DEFAULT_QUANT, find, load_catalog
from .download import Downloader, Progress
from .gguf_info import read_gguf_info
from .library import Library
from .pairing import find_drafter


class ProgressPrinter:
    """Download progress on stderr: tqdm bars on a terminal; when stderr is a file or a pipe,
    one line per finished file (bars redrawn with \r would garble a log)."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.bars: dict = {}
        self.finished: set = set()

    def __call__(self, p: Progress) -> None:
        key = (p.label, p.filename)
        if self.tty:
            from tqdm import tqdm

            bar = self.bars.get(key)
            if bar is None:
                bar = self.bars[key] = tqdm(total=p.total, desc=f"{p.label} {Path(p.filename).name}", unit="B",
                                            unit_scale=True, unit_divisor=1024, file=self.stream, leave=True)
            bar.update(p.done - bar.n)
            if p.done >= p.total:
                bar.close()
        elif p.done >= p.total and key not in self.finished:
            self.finished.add(key)
            self.stream.write(f"{p.label}: {Path(p.filename).name} {p.total / 1e6:,.1f} MB done "
                              f"({p.speed / 1e6:.1f} MB/s)\n")


def cmd_list(args) -> int:
    from .hardware import this_machine
    from .recommend import check_fit, recommend

    machine = this_machine()
    print(f"This machine: {machine.description}\n")
    lib = Library()
    have = {e.name for e in lib.entries()}
    catalog = load_catalog()
    best = recommend(machine, catalog)
    print(f"  {'model':<18} {'':<22} {'Q4_K_M':>9} {'fit':<8} {'tok/s':>6}  k")
    for m in catalog:
        fit = check_fit(m, DEFAULT_QUANT, machine)
        mark = "fits" if not fit.spills else "too big"
        tags = (["recommended"] if m is best.model else []) + (["downloaded"] if m.name in have else [])
        print(f"  {m.name:<18} {m.title:<22} {fit.needed / 1e9:6.1f} GB {mark:<8} {fit.tps:6.1f}  {m.draft_max}"
              f"  {' '.join(f'[{t}]' for t in tags)} {m.summary}")
        if m.mtp_note:
            print(f"  {'':<18} note: {m.mtp_note}")
    print("\nSizes: target + drafter + KV cache for 8K tokens + buffers. tok/s: plain decoding estimated from "
          "memory bandwidth (MTP adds to it where the drafter is accepted).")
    others = [e for e in lib.entries() if e.name not in {m.name for m in catalog}]
    if others:
        print("\nImported:")
        for e in others:
            print(f"  {e.name:<30} {e.target}" + (f"\n  {'':<30} drafter {e.drafter}" if e.drafter else ""))
    return 0


def cmd_download(args) -> int:
    d = Downloader(folder=args.dir)
    if "/" in args.name:  # a repository, as llama.cpp's -hf takes it
        repo, _, quant = args.name.partition(":")
        plan, model = d.plan_repo(repo, quant or args.quant)
        name = model.name if model else repo
    else:
        model = find(args.name)
        plan, name = d.plan(model, args.quant), model.name
    res = d.download_plan(plan, ProgressPrinter(), vision=not args.no_vision)
    for note in res.notes:
        sys.stderr.write(f"note: {note}\n")
    Library().add(name, res.target, res.drafter, "download", res.projector)
    print(f"target:    {res.target}\ndrafter:   {res.drafter or 'none (MTP is off for this model)'}\n"
          f"projector: {res.projector or 'none (no pictures)'}")
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


def cmd_cluster(args) -> int:
    from .draft_head import clusters_problem
    from .own_clusters import default_clusters, kept_path, made_before, with_own_clusters

    src = Path(args.drafter)
    info = read_gguf_info(src)
    if not info.is_drafter:
        raise TandemError(f"{src.name} is not an MTP drafter (a gemma4-assistant GGUF)")
    if info.head_tensors:
        problem = clusters_problem(info)
        if problem:
            raise TandemError(f"{src.name} has a clustered head, but it is unusable: {problem}")
        print(f"{src.name} has a clustered head already: nothing to do")
        return 0
    n = args.clusters or default_clusters(info.n_vocab)
    if not args.clusters and args.top_k * 4 > n:
        raise TandemError(f"{src.name}'s head of {info.n_vocab:,} tokens is too small to gain from clusters "
                          "(give --clusters and --top-k to cluster it anyway)")
    if n < 2 or info.n_vocab % n:
        raise TandemError(f"--clusters must divide the {info.n_vocab:,} tokens evenly (got {n})")
    if not 1 <= args.top_k <= n:
        raise TandemError(f"--top-k must be between 1 and the {n:,} clusters (got {args.top_k})")
    out = Path(args.out) if args.out else kept_path(src, "kmeans")
    if made_before(out, n, args.top_k):
        print(f"drafter: {out.resolve()} (made before)")
        return 0
    print(f"clustering {info.n_vocab:,} head rows of {info.n_embd} into {n:,} clusters "
          "(k-means; one to two minutes on 2 cores)...", file=sys.stderr, flush=True)
    try:
        path = with_own_clusters(src, args.clusters, args.top_k, out=out,
                                 progress=lambda i, of: print(f"  pass {i} of {of}", file=sys.stderr, flush=True))
    except ValueError as e:
        raise TandemError(f"{src.name}: {e}") from None
    print(f"drafter: {path.resolve()}")
    return 0


def run(args) -> int:
    return {"list": cmd_list, "download": cmd_download, "import": cmd_import,
            "verify": cmd_verify, "cluster": cmd_cluster}[args.models_command](args)
