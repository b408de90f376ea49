"""One reply at a time, side by side in one run: `tandem bench`'s baseline and MTP at auto and
fixed draft lengths on the same prompts (greedy), for each drafter given, with how many replies
were the baseline's. The speed page's first table (docs/speed.md) is its --json file.

    .venv/bin/python scripts/bench_speed.py -m TARGET.gguf -d DRAFTER.gguf [-d DRAFTER2.gguf ...]
        [--draft-max auto 1 2 3 4] [--max-tokens 128] [--threads 2] [--json docs/figures/speed_e2b.json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.bench.side_by_side import format_table, load_prompts, run_bench  # noqa: E402
from engine.generation import AUTO  # noqa: E402
from engine.local.engine import Engine  # noqa: E402
from engine.local.runtime import LoadOptions  # noqa: E402
from scripts.figures import provenance, save  # noqa: E402


def markdown(data: dict) -> str:
    """The speed page's table of a run written with --json (tests/unit/test_figures.py checks it)."""
    lengths = [str(k) for k in data["draft_max"]]
    lines = ["| drafter | baseline | " + " | ".join("MTP auto" if k == AUTO else f"k={k}" for k in lengths)
             + " | as baseline |", "|---|---|" + "---|" * len(lengths) + "---|"]
    for run in data["runs"]:
        base = run["baseline"]["decode_tps"]
        cells = [run["drafter"], f"{base:.1f} tok/s"]
        same = []
        for row in run["mtp"]:
            cell = f"{row['decode_tps']:.1f} ({row['decode_tps'] / base:.2f}x)"
            if row["draft_max"] == AUTO:
                cell = f"**{cell}**, mean k {row['mean_draft_length']:.1f}"
            cells.append(cell)
            same.append(row["identical"] + row["near_ties"])
        cells.append(f"{min(same)}/{run['baseline']['prompts']}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-d", "--drafter", action="append", required=True)
    ap.add_argument("--draft-max", nargs="+", default=[AUTO, "1", "2", "3", "4"])
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    lengths = [k if k == AUTO else int(k) for k in args.draft_max]
    data = {**provenance("scripts/bench_speed.py"), "model": Path(args.model).name, "max_tokens": args.max_tokens,
            "draft_max": lengths, "runs": []}
    prompts = load_prompts()
    for drafter in args.drafter:
        engine = Engine.load(args.model, drafter, LoadOptions(n_threads=args.threads))
        try:
            res = run_bench(engine, prompts, lengths, args.max_tokens, specs=["mtp"],
                            progress=lambda s: print(f"\r  {s:<28}", end="", file=sys.stderr))
        finally:
            engine.close()
        print(f"\n{Path(drafter).name}:\n{format_table(res, legend=False)}\n", flush=True)
        data["runs"].append({"drafter": Path(drafter).name, **res})
    print(markdown(data))
    save(args.json, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
