"""The code-edit benchmark of lookup drafting, side by side in one run: Tandem without drafting,
with lookup, with MTP and with auto (both), and llama.cpp's own n-gram drafting
(`llama-speculative-simple --spec-type ngram-mod` and `ngram-map-k`, built from the sources
llama-cpp-python vendors, the same llama.cpp as Tandem's engine), on the same prompts:
`tandem bench --suite edits`'s code edits, and prose and an explanation of code as the control.

    .venv/bin/python scripts/bench_edits.py -m gemma-3-270m-q4_k_m.gguf [-d drafter.gguf] [--max-tokens 256]
        [--json docs/figures/edits.json]

Greedy everywhere. Prints tok/s and the ratio to Tandem's baseline per group; Tandem's rows
also say whether the text was the baseline's (identical or a near-tie).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.bench.side_by_side import run_bench  # noqa: E402
from engine.bench.edit_suite import SUITE_CTX, edit_groups  # noqa: E402
from engine.local.engine import Engine  # noqa: E402
from engine.local.runtime import LoadOptions  # noqa: E402
from scripts.figures import provenance, save  # noqa: E402

DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
ACCEPT = re.compile(r"n_drafted\s*=\s*(\d+).*?n_accept\s*=\s*(\d+)", re.S)


def llama_tool() -> str:
    out = subprocess.run(["bash", str(ROOT / "packaging/build-llama-server.sh"), "llama-speculative-simple"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def llama_ngram(tool: str, model: str, prompts: list[dict], spec: str, n: int, threads: int, ctx: int) -> dict:
    decoded = seconds = drafted = accepted = 0
    for p in prompts:
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(p["prompt"])
        r = subprocess.run([tool, "-m", model, "-f", f.name, "-n", str(n), "-c", str(ctx), "-b", str(ctx),
                            "-t", str(threads), "--temp", "0", "--spec-type", spec],
                           capture_output=True, text=True)
        Path(f.name).unlink()
        log = r.stdout + r.stderr
        m = DECODED.search(log)
        if r.returncode != 0 or not m:
            raise RuntimeError(f"llama-speculative-simple --spec-type {spec} failed:\n{log[-2000:]}")
        decoded, seconds = decoded + int(m.group(1)), seconds + float(m.group(2))
        a = ACCEPT.search(log)
        if a:
            drafted, accepted = drafted + int(a.group(1)), accepted + int(a.group(2))
    # llama.cpp counts every token its last draft added, past -n too
    return {"tps": decoded / seconds, "accept": accepted / drafted if drafted else None,
            "per_prompt": decoded / len(prompts)}


def markdown(data: dict) -> str:
    """The speed page's table of a run written with --json (tests/unit/test_figures.py checks it)."""
    theirs = ("ngram-mod", "ngram-map-k")
    lines = ["| prompts | Tandem baseline | " + " | ".join(f"Tandem {m['spec']}" for m in
                                                         next(iter(data["tandem"].values()))["mtp"])
             + " | " + " | ".join(f"llama.cpp `{s}`" for s in theirs) + " |"]
    lines.append("|---|---|" + "---|" * (len(next(iter(data["tandem"].values()))["mtp"]) + len(theirs)))
    for title, res in data["tandem"].items():
        base = res["baseline"]["decode_tps"]
        cells = [f"{title} ({data['prompts'][title]})", f"{base:.1f} tok/s"]
        for m in res["mtp"]:
            acc = f", {m['acceptance_rate'] * 100:.0f} % accepted" if m["acceptance_rate"] is not None else ""
            cells.append(f"{m['decode_tps']:.1f} tok/s, **{m['decode_tps'] / base:.2f}x**{acc}, "
                         f"{m['identical'] + m['near_ties']}/{m['prompts']} as baseline")
        cells += [f"{data['llama'][title][s]['tps']:.1f}, {data['llama'][title][s]['tps'] / base:.2f}x" for s in theirs]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-d", "--drafter")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=SUITE_CTX)  # as `tandem bench --suite edits` takes
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    data = provenance("scripts/bench_edits.py")

    groups = edit_groups()
    engine = Engine.load(args.model, args.drafter, LoadOptions(n_ctx=args.ctx, n_threads=args.threads,
                                                              n_batch=args.ctx))
    specs = ["lookup"] + (["mtp", "auto"] if args.drafter else [])
    tandem = {}
    try:
        for title, group in groups.items():
            tandem[title] = run_bench(engine, group, ["auto"], args.max_tokens, specs=specs,
                                      progress=lambda s: print(f"\r  {title}: {s:<28}", end="", file=sys.stderr))
    finally:
        engine.close()
    print("\r", end="", file=sys.stderr)
    tool = llama_tool()
    theirs = {title: {spec: llama_ngram(tool, args.model, group, spec, args.max_tokens, args.threads, args.ctx)
                      for spec in ("ngram-mod", "ngram-map-k")} for title, group in groups.items()}

    print(f"model {Path(args.model).name}" + (f", drafter {Path(args.drafter).name}" if args.drafter else "")
          + f"; {args.threads} threads, greedy, up to {args.max_tokens} tokens per prompt\n")
    head = f"{'':<28}{'tok/s':>8}{'vs baseline':>13}{'accepted':>10}  text"
    for title, res in tandem.items():
        base = res["baseline"]["decode_tps"]
        print(f"{title} ({len(groups[title])} prompts)\n{head}\n{'-' * len(head)}")
        print(f"{'Tandem baseline':<28}{base:>8.1f}{'1.00x':>13}{'-':>10}  -")
        for m in res["mtp"]:
            same = f"{m['identical']}/{m['prompts']} identical" + (f", {m['near_ties']} near-tie" if m["near_ties"]
                                                                  else "") \
                + (f", {m['mismatches']} DIFFERENT" if m["mismatches"] else "")
            acc = f"{m['acceptance_rate'] * 100:.0f} %" if m["acceptance_rate"] is not None else "-"
            print(f"{'Tandem ' + m['spec'] + ' (' + m['mode'] + ')':<28}{m['decode_tps']:>8.1f}"
                  f"{m['decode_tps'] / base:>12.2f}x{acc:>10}  {same}")
        for spec, r in theirs[title].items():
            acc = f"{r['accept'] * 100:.0f} %" if r["accept"] is not None else "-"
            print(f"{'llama.cpp ' + spec:<28}{r['tps']:>8.1f}{r['tps'] / base:>12.2f}x{acc:>10}  "
                  f"{r['per_prompt']:.0f} tokens per prompt (its count)")
        print()
    data.update(model=Path(args.model).name, max_tokens=args.max_tokens, threads=args.threads,
                prompts={title: len(group) for title, group in groups.items()}, tandem=tandem, llama=theirs)
    print(markdown(data))
    save(args.json, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
