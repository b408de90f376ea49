"""What each API of `tandem serve` costs in streaming, side by side in one run: the same prompts,
greedy, streamed through OpenAI's chat completions, Anthropic's Messages and OpenAI's
Responses, interleaved and each going first as often (the first of a prompt reads it, the
others find it cached), so that the machine's drift and the cache fall on all three alike. Measured by the client, on the raw SSE stream (no SDK): tokens
per second from the first text to the last, and the time to the first text; the ratio to chat.

    .venv/bin/python scripts/bench_apis.py -m TARGET.gguf [-d DRAFTER.gguf] [--max-tokens 128] [--rounds 3]
        [--json docs/figures/apis.json]
    .venv/bin/python scripts/bench_apis.py --server http://127.0.0.1:8080   # a running tandem serve
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_concurrency import free_port, wait_ready  # noqa: E402
from scripts.figures import provenance, save  # noqa: E402

LABELS = {"chat": "OpenAI chat completions", "messages": "Anthropic Messages", "responses": "OpenAI Responses"}

PROMPTS = [json.loads(line)["prompt"] for line in (ROOT / "resources/prompts/bench.jsonl").read_text().splitlines()
           if line.strip()][:4]


def request(api: str, prompt: str, n: int) -> tuple[str, dict]:
    msgs = [{"role": "user", "content": prompt}]
    if api == "chat":
        return "/v1/chat/completions", {"messages": msgs, "max_tokens": n, "stream": True,
                                        "stream_options": {"include_usage": True}}
    if api == "messages":
        return "/v1/messages", {"messages": msgs, "max_tokens": n, "stream": True}
    return "/v1/responses", {"input": prompt, "max_output_tokens": n, "stream": True}


def text_of(api: str, data: dict) -> str:
    if api == "chat":
        return "".join((c.get("delta") or {}).get("content") or "" for c in data.get("choices", []))
    if api == "messages":
        return (data.get("delta") or {}).get("text", "") if data.get("type") == "content_block_delta" else ""
    return data.get("delta", "") if data.get("type") == "response.output_text.delta" else ""


def tokens_of(api: str, data: dict) -> int | None:
    if api == "chat":
        return (data.get("usage") or {}).get("completion_tokens")
    if api == "messages":
        return (data.get("usage") or {}).get("output_tokens") if data.get("type") == "message_delta" else None
    if data.get("type") in ("response.completed", "response.incomplete"):
        return data["response"]["usage"]["output_tokens"]
    return None


def one(base: str, api: str, prompt: str, n: int) -> dict:
    path, body = request(api, prompt, n)
    t0 = time.perf_counter()
    first = last = None
    text, tokens = [], None
    with httpx.stream("POST", base + path, json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                continue
            data = json.loads(line[5:])
            piece = text_of(api, data)
            if piece:
                now = time.perf_counter()
                first = first or now
                last = now
                text.append(piece)
            tokens = tokens_of(api, data) or tokens
    tps = (tokens - 1) / (last - first) if tokens and tokens > 1 and first and last > first else 0.0
    return {"tps": tps, "ttft": (first or t0) - t0, "text": "".join(text), "tokens": tokens}


def markdown(data: dict) -> str:
    """The speed page's table of a run written with --json (tests/unit/test_figures.py checks it)."""
    lines = ["| API | tok/s (median) | vs chat completions | first text (median) |", "|---|---|---|---|"]
    chat = data["apis"]["chat"]["tps"]
    for api, row in data["apis"].items():
        lines.append(f"| {LABELS[api]} | {row['tps']:.1f} | {row['tps'] / chat:.3f}x | {row['ttft'] * 1e3:.0f} ms |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model")
    ap.add_argument("-d", "--drafter")
    ap.add_argument("--server", help="a running tandem serve (base URL without /v1)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    data = provenance("scripts/bench_apis.py")
    proc = None
    if args.server:
        base = args.server.rstrip("/").removesuffix("/v1")
    else:
        if not args.model:
            ap.error("give -m MODEL (and -d DRAFTER) or --server URL")
        port = free_port()
        cmd = [str(Path(sys.executable).parent / "tandem"), "serve", "-m", args.model, "--port", str(port),
               "--parallel", "1"] + (["-d", args.drafter] if args.drafter else []) + \
            (["--threads", str(args.threads)] if args.threads else [])
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        wait_ready(proc, port)
        base = f"http://127.0.0.1:{port}"
    apis = ["chat", "messages", "responses"]
    runs: dict[str, list] = {a: [] for a in apis}
    try:
        for p in PROMPTS:  # warm the prompt cache alike for all three
            one(base, "chat", p, 4)
        for r in range(args.rounds):
            for i, p in enumerate(PROMPTS):
                # each API goes first as often: the first reads the prompt, the next find it cached
                for a in apis[(r + i) % 3:] + apis[:(r + i) % 3]:
                    runs[a].append((r, i, one(base, a, p, args.max_tokens)))
        runs = {a: [x[2] for x in sorted(v, key=lambda x: x[:2])] for a, v in runs.items()}
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    same = all(runs[a][i]["text"] == runs["chat"][i]["text"] for a in apis for i in range(len(runs["chat"])))
    data.update(prompts=len(PROMPTS), rounds=args.rounds, max_tokens=args.max_tokens, same_text=same,
                apis={a: {"tps": statistics.median(r["tps"] for r in runs[a]),
                          "ttft": statistics.median(r["ttft"] for r in runs[a])} for a in apis})
    print(f"{len(PROMPTS)} prompts x {args.rounds} rounds, {args.max_tokens} tokens each, greedy, streamed")
    print(markdown(data))
    print("same text through every API: " + ("yes" if same else "NO"))
    if same:
        save(args.json, data)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
