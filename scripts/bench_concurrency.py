"""Several clients at once, side by side in one run: `tandem serve --parallel N` (drafting auto,
and off per request) against llama-server `-np N` with the same files (draft-mtp, and no
drafter). Aggregate tokens per second over all clients and the slowest client's time, at each
concurrency level. All servers run at once (idle while another is measured) and are measured in
turn, round after round, so a drift of the machine's speed reaches them all alike.

    .venv/bin/python scripts/bench_concurrency.py -m TARGET.gguf -d DRAFTER.gguf [--levels 1 2 4 8]
        [--max-tokens 64] [--rounds 3] [--gpu-layers -1 --drafter-gpu-layers -1] [--only tandem|llama]
        [--fixed 1 2 3]   # also Tandem with each fixed draft length (is auto within 0.95x of the best?)
        [--json OUT.json]   # also the table as a figures file (scripts/figures.py: command, commit, date)
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2 as httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.bench.load import load_table, measure_in_turn  # noqa: E402
from engine.models.drafter_file import write_plain_drafter  # noqa: E402
from scripts.figures import provenance  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(proc, port, timeout=300):
    t = time.time()
    while time.time() - t < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode})")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError("server did not start")


def serve(args, cmd, port):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "LLAMA_ARG_N_GPU_LAYERS": str(args.gpu_layers)})
    try:
        wait_ready(proc, port)
    except BaseException:
        proc.kill()
        raise
    return proc


def stop(proc):
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


def markdown(data: dict) -> str:
    """The README's table of a run written with --json (tests/unit/test_figures.py checks that
    the README shows the file's figures): tok/s per server and client count, the ratio of the
    most clients to one, and how many replies under load were each prompt's reply alone."""
    levels = data["levels"]
    lines = ["| server | " + " | ".join(f"{n} client{'s' if n > 1 else ''}" for n in levels)
             + f" | {levels[-1]} vs 1 | as alone |", "|---|" + "---|" * (len(levels) + 2)]
    for name, got in data["rows"].items():
        tps = [r["tps"] for r in got]
        same = sum(r["same"] or 0 for r in got), sum(r["clients"] for r in got)
        lines.append(f"| {name} | " + " | ".join(f"{t:.1f}" for t in tps)
                     + f" | {tps[-1] / tps[0]:.2f}x | {same[0]}/{same[1]} |")
    return "\n".join(lines)


def write_json(path: str, args, rows: dict) -> None:
    Path(path).write_text(json.dumps({
        **provenance("scripts/bench_concurrency.py"),
        "model": Path(args.model).name, "drafter": Path(args.drafter).name, "max_tokens": args.max_tokens,
        "rounds": args.rounds, "levels": args.levels,
        "rows": {name: [{"clients": r.clients, "tps": round(r.tps, 1), "slowest_s": round(r.slowest_s, 2),
                         "errors": r.errors, "same": r.same,
                         "acceptance": None if r.acceptance is None else round(r.acceptance, 3)}
                        for r in results] for name, results in rows.items()},
    }, indent=1), "utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-d", "--drafter", required=True)
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=1,
                    help="every server measured this many times, in turn (a shared machine's speed drifts: "
                         "the table gives each one's median)")
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--gpu-layers", type=int, default=0)
    ap.add_argument("--drafter-gpu-layers", type=int, default=0)
    ap.add_argument("--draft-n", type=int, default=3, help="llama-server's draft-mtp length (default 3)")
    ap.add_argument("--llama-server", help="the binary (default: built from the vendored sources)")
    ap.add_argument("--only", choices=["tandem", "llama"])
    ap.add_argument("--fixed", type=int, nargs="*", default=[], metavar="K",
                    help="also Tandem with these fixed draft lengths (tandem.draft_max per request)")
    ap.add_argument("--json", metavar="OUT", help="also write the table as JSON to OUT (the README's figures)")
    args = ap.parse_args()
    n = max(args.levels)
    threads = args.threads or (os.cpu_count() or 2)
    runs = {}  # name -> (url, extra_body): every server is started first and measured in turn
    procs = []
    scratch = tempfile.TemporaryDirectory()
    try:
        if args.only != "llama":
            port = free_port()
            tandem = Path(sys.executable).parent / "tandem"
            cmd = [str(tandem), "serve", "-m", args.model, "-d", args.drafter, "--port", str(port), "--parallel",
                   str(n), "--queue", str(n), "--ctx", str(args.ctx), "--gpu-layers", str(args.gpu_layers),
                   "--drafter-gpu-layers", str(args.drafter_gpu_layers)] + (["--threads", str(args.threads)]
                                                                            if args.threads else [])
            procs.append(serve(args, cmd, port))
            url = f"http://127.0.0.1:{port}/v1"
            runs["Tandem serve, MTP auto"] = (url, None)
            for k in args.fixed:
                runs[f"Tandem serve, MTP k={k}"] = (url, {"tandem": {"draft_max": k}})
            runs["Tandem serve, no drafter"] = (url, {"tandem": {"mtp": False}})
        if args.only != "tandem":
            binary = args.llama_server or subprocess.run(
                ["bash", str(ROOT / "packaging" / "build-llama-server.sh")], capture_output=True, text=True,
                check=True).stdout.strip().splitlines()[-1]
            # llama.cpp's own build cannot load a drafter with a clustered head: the same weights without it
            plain = write_plain_drafter(args.drafter, Path(scratch.name) / (Path(args.drafter).stem + "-plain.gguf"))
            for name, extra in ((f"llama-server -np {n}, draft-mtp k={args.draft_n}",
                                 ["--model-draft", str(plain), "--spec-type", "draft-mtp",
                                  "--spec-draft-n-max", str(args.draft_n), "-ngld", str(args.drafter_gpu_layers)]),
                                (f"llama-server -np {n}, no drafter", [])):
                port = free_port()
                cmd = [binary, "-m", args.model, "--host", "127.0.0.1", "--port", str(port), "-c", str(args.ctx),
                       "-t", str(threads), "-np", str(n), "--no-webui", "-ngl", str(args.gpu_layers)] + extra
                procs.append(serve(args, cmd, port))
                runs[name] = (f"http://127.0.0.1:{port}/v1", None)
        rows = measure_in_turn(runs, args.levels, args.max_tokens, args.rounds)
    finally:
        for proc in procs:
            stop(proc)
        scratch.cleanup()
    print(f"{Path(args.model).name} + {Path(args.drafter).name}: {args.max_tokens} tokens per client, greedy, "
          f"median of {args.rounds} round{'s' if args.rounds > 1 else ''}")
    print(load_table(rows))
    if args.json:
        write_json(args.json, args, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
