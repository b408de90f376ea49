"""What one target batch costs as it grows, side by side in one run: a verify of r rows for
each of s sequences (r = 1 is a plain decoding step, r = k+1 a verify of k drafts), in ms per
batch and per row, and each batch's cost against one plain step. On a mixture of experts each
extra row routes to other experts, so a row costs more than on a dense model; auto's cost model
(engine/strategies/draft_control.py) learns these costs while it serves.

    .venv/bin/python scripts/bench_verify_cost.py -m TARGET.gguf [-m DENSE.gguf] [--rows 1 2 3 4]
        [--seqs 1 2 4 8] [--repeats 7] [--threads N] [--prompt 64]

The target alone is loaded, each sequence holds the same prompt, and each batch's median of
`repeats` decodes is taken, its rows rolled back after each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def costs(model: str, rows: list[int], seqs: list[int], repeats: int, threads: int, prompt: int) -> dict:
    from engine.local.options import LoadOptions
    from engine.local.runtime import Runtime

    rt = Runtime(model, None, LoadOptions(n_ctx=4096, n_seq=max(seqs), n_threads=threads, n_batch=512,
                                          n_ubatch=512, target_gpu_layers=0, drafter_gpu_layers=0))
    try:
        tgt = rt.target
        tgt.set_hidden_output(True)  # as a verify reads every row's hidden state for the drafter
        tokens = [(7 * i + 3) % 1000 + 10 for i in range(prompt)]
        for s in range(max(seqs)):
            tgt.decode(tokens, 0, "last", seq=s)
        out = {}
        for n_seq in seqs:
            for r in rows:
                times = []
                for _ in range(repeats):
                    tgt.begin()
                    for s in range(n_seq):
                        tgt.add(tokens[:r], prompt, s, "all")
                    t0 = time.perf_counter()
                    tgt.submit()
                    times.append(time.perf_counter() - t0)
                    for s in range(n_seq):
                        tgt.truncate(prompt, s)
                out[(n_seq, r)] = statistics.median(times) * 1000
        return out
    finally:
        rt.close()


def table(name: str, got: dict, rows: list[int], seqs: list[int]) -> str:
    one = got[(1, 1)]
    lines = [f"{name}: ms per batch (x a plain step of one sequence, {one:.1f} ms) and ms per row",
             f"{'sequences':>9} " + " ".join(f"{f'{r} row' + ('s' if r > 1 else ''):>22}" for r in rows)]
    for s in seqs:
        cells = [f"{got[(s, r)]:7.1f} ({got[(s, r)] / one:4.2f}x) {got[(s, r)] / (s * r):5.1f}" for r in rows]
        lines.append(f"{s:>9} " + " ".join(f"{c:>22}" for c in cells))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", required=True, help="a target GGUF (several: side by side)")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--seqs", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--prompt", type=int, default=64, help="tokens each sequence holds before the batch")
    args = ap.parse_args()
    if 1 not in args.rows or 1 not in args.seqs:
        ap.error("--rows and --seqs must include 1 (the plain step the others are measured against)")
    results = [(Path(m).name, costs(m, args.rows, args.seqs, args.repeats, args.threads, args.prompt))
               for m in args.model]
    print("\n\n".join(table(name, got, args.rows, args.seqs) for name, got in results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
