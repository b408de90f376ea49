"""scripts/gpu_bench.sh's one table, from each size's figures file (bench_concurrency.py --json):
per size and client count, Tandem's MTP (auto) and plain decoding, the share of drafts
accepted, and llama-server's draft-mtp and plain decoding on the same files, in tok/s.

    .venv/bin/python scripts/gpu_bench_table.py OUT/e4b.json OUT/26b-a4b.json ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLUMNS = {"mtp": "Tandem serve, MTP auto", "plain": "Tandem serve, no drafter"}
LLAMA = {"mtp": "draft-mtp", "plain": "no drafter"}  # the ends of llama-server's row names


def table(files: list[dict]) -> str:
    lines = ["| size | clients | Tandem MTP | Tandem plain | MTP vs plain | drafts accepted | "
             "llama-server draft-mtp | llama-server plain | Tandem MTP vs llama-server MTP |",
             "|---|---|---|---|---|---|---|---|---|"]
    for data in files:
        rows = data["rows"]
        llama = {k: next((v for name, v in rows.items() if name.startswith("llama-server")
                          and LLAMA[k] in name), None) for k in LLAMA}
        size = data["model"].removesuffix("-target.gguf")
        for i, n in enumerate(data["levels"]):
            mtp, plain = (rows[COLUMNS[k]][i] for k in ("mtp", "plain"))
            lm, lp = (llama[k][i]["tps"] if llama[k] else None for k in ("mtp", "plain"))
            acc = mtp.get("acceptance")
            cells = [size, str(n), f"{mtp['tps']:.1f}", f"{plain['tps']:.1f}", f"{mtp['tps'] / plain['tps']:.2f}x",
                     "-" if acc is None else f"{acc:.0%}", "-" if lm is None else f"{lm:.1f}",
                     "-" if lp is None else f"{lp:.1f}", "-" if not lm else f"{mtp['tps'] / lm:.2f}x"]
            lines.append("| " + " | ".join(cells) + " |")
    runs = dict.fromkeys(f"{d['machine']}; commit {d['commit']}, {d['date']}; {d['max_tokens']} greedy tokens per "
                         f"client" for d in files)  # each size's run, in order, each once
    lines.append("\n" + " · ".join(runs))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    print(table([json.loads(Path(p).read_text("utf-8")) for p in argv]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
