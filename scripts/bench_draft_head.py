"""The drafter's head, side by side in one run (issue: the clustered head of E2B/E4B's
drafters): for each pair, Tandem's MTP with the full head and with the clustered head (a draft
step's cost against a target step, acceptance, decode tok/s with auto's draft length against
no drafting), with Tandem's own clustering of the same head (engine/models/own_clusters.py, as
a drafter without centroids gets it), and llama.cpp's own draft-mtp (llama-server, one slot, draft lengths 3 and 8) on
the same weights, whose build cannot load a drafter with a clustered head: it gets the file
without it (engine/models/drafter_file.py). Greedy, every reply checked against the baseline's.

    .venv/bin/python scripts/bench_draft_head.py [--sizes e2b e4b] [--models DIR] [--max-tokens 128]
        [--threads 2] [--llama-server BINARY] [--json docs/figures/draft_head.json]
        [--pair NAME TARGET DRAFTER]   # these files instead (repeatable)

The pairs are make-test-models' shapes at full agreement, written into --models (a drafter
each time, a target where missing).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_concurrency import free_port, serve, stop  # noqa: E402
from scripts.figures import provenance, save  # noqa: E402

LLAMA_KS = (3, 8)


def tandem_rows(target, drafter, head: str, prompts, max_tokens: int, threads: int) -> dict:
    from engine.bench.side_by_side import run_bench
    from engine.local.engine import Engine
    from engine.local.options import LoadOptions

    engine = Engine.load(target, drafter, LoadOptions(n_ctx=4096, n_threads=threads, draft_head=head))
    try:
        engine.warm_up()
        res = run_bench(engine, prompts, ["auto"], max_tokens, specs=["mtp"])
        b, m = res["baseline"], res["mtp"][0]
        return {"head": engine.draft_head.label, "baseline_tps": round(b["decode_tps"], 1),
                "step_ms": round(b["decode_step_ms"], 2), "draft_step_ms": round(m["draft_step_ms"], 2),
                "draft_vs_step": round(m["draft_step_ms"] / b["decode_step_ms"], 3),
                "acceptance": round(m["acceptance_rate"], 3), "mtp_tps": round(m["decode_tps"], 1),
                "speedup": round(m["decode_tps"] / b["decode_tps"], 2), "identical": m["identical"],
                "prompts": len(prompts)}
    finally:
        engine.close()


def llama_rows(binary: str, target, plain, prompts, max_tokens: int, threads: int) -> dict:
    """llama-server's decode tok/s (its own timings, prefill excluded) without a drafter and
    with draft-mtp at each of LLAMA_KS, over the same prompts."""
    import httpx2 as httpx

    out = {}
    for name, extra in [("none", [])] + [(f"draft-mtp k={k}", ["--model-draft", str(plain), "--spec-type",
                                                                 "draft-mtp", "--spec-draft-n-max", str(k)])
                                         for k in LLAMA_KS]:
        port = free_port()
        proc = serve(argparse.Namespace(gpu_layers=0), [binary, "-m", str(target), "--host", "127.0.0.1",
                                                        "--port", str(port), "-c", "4096", "-t", str(threads),
                                                        "-np", "1", "--no-webui", "-ngl", "0"] + extra, port)
        try:
            n = ms = drafted = accepted = 0
            for p in prompts:
                messages = p.get("messages") or [{"role": "user", "content": p["prompt"]}]
                r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=600,
                               json={"messages": messages, "max_tokens": max_tokens,
                                     "temperature": 0}).json()["timings"]
                n, ms = n + r["predicted_n"], ms + r["predicted_ms"]
                drafted, accepted = drafted + r.get("draft_n", 0), accepted + r.get("draft_n_accepted", 0)
            out[name] = {"tps": round(n / ms * 1000, 1), "acceptance": round(accepted / drafted, 3) if drafted
                         else None}
        finally:
            stop(proc)
    return out


def markdown(data: dict) -> str:
    """The README's table of a run written with --json (tests/unit/test_figures.py checks it)."""
    lines = ["| pair | drafter's head | draft step / target step | acceptance | MTP auto tok/s | vs no drafter "
             "| vs llama.cpp draft-mtp |", "|---|---|---|---|---|---|---|"]
    for size, got in data["pairs"].items():
        best_llama = max(v["tps"] for k, v in got["llama-server"].items() if k != "none")
        for row in (got["full"], got["clustered"], *([{**got["own"], "head": "Tandem's own k-means, " +
                                                        got["own"]["head"]}] if "own" in got else [])):
            lines.append(f"| {size} | {row['head']} | {row['draft_step_ms']:.2f} ms / {row['step_ms']:.2f} ms = "
                         f"{row['draft_vs_step']:.2f}x | {row['acceptance'] * 100:.0f} % | {row['mtp_tps']:.1f} | "
                         f"{row['speedup']:.2f}x | {row['mtp_tps'] / best_llama:.2f}x |")
        llama = got["llama-server"]
        lines.append(f"| {size} | llama-server, no drafter / best draft-mtp | | | {llama['none']['tps']:.1f} / "
                     f"{best_llama:.1f} | | |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["e2b", "e4b"])
    ap.add_argument("--pair", nargs=3, action="append", metavar=("NAME", "TARGET", "DRAFTER"),
                    help="measure these files instead of the sizes' pairs (repeatable)")
    ap.add_argument("--models", default=str(Path.home() / ".cache" / "tandem" / "bench-pairs"))
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-server", help="the binary (default: built from the vendored sources)")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()

    import subprocess

    from engine.bench.side_by_side import load_prompts
    from engine.models.drafter_file import write_plain_drafter
    from engine.models.own_clusters import with_own_clusters
    from engine.testmodels import make_test_models

    prompts = load_prompts()
    binary = args.llama_server or subprocess.run(
        ["bash", str(ROOT / "packaging" / "build-llama-server.sh")], capture_output=True, text=True,
        check=True).stdout.strip().splitlines()[-1]
    data = {**provenance("scripts/bench_draft_head.py"), "max_tokens": args.max_tokens, "pairs": {}}
    pairs = args.pair or [(size, *make_test_models(Path(args.models) / size, size, 1.0)) for size in args.sizes]
    for size, target, drafter in pairs:
        with tempfile.TemporaryDirectory() as scratch:
            # the full head on the weights as llama.cpp's converter writes them (no centroids, rows in
            # token order), as llama.cpp's draft-mtp gets them
            plain = write_plain_drafter(drafter, Path(scratch) / "drafter-plain.gguf")
            # Tandem's own clustering of those rows, as a drafter without centroids gets it
            own = with_own_clusters(plain, out=Path(scratch) / "drafter-kmeans.gguf")
            got = {"full": tandem_rows(target, plain, "full", prompts, args.max_tokens, args.threads),
                   "clustered": tandem_rows(target, drafter, "clustered", prompts, args.max_tokens, args.threads),
                   "own": tandem_rows(target, own, "clustered", prompts, args.max_tokens, args.threads),
                   "llama-server": llama_rows(binary, target, plain, prompts, args.max_tokens, args.threads)}
        data["pairs"][size] = got
        print(f"{size}: {json.dumps(got)}", flush=True)
    print(markdown(data))
    save(args.json, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
