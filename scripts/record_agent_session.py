"""Record a real Claude Code session's requests, for bench_agent_session.py --session to replay.

Runs `tandem serve` on the given model behind a recording proxy and Claude Code (installed from
npm into ~/.cache/tandem/agents, as the tests install it) for several turns of one conversation
(`claude -p`, then `claude -p --continue`), with its non-essential traffic ON, so its own side
requests (titles, topic checks, its small model's calls) interleave with the main ones as on a
user's machine. What each request sent to the model server is written to OUT (JSON): the path,
the body and the time since the session began. Claude Code's traffic elsewhere (telemetry,
updates) has no network here and is not recorded.

    .venv/bin/python scripts/record_agent_session.py -m TARGET.gguf --out docs/figures/claude_session.json.gz
        [--turns 4] [--max-output 16]

With random weights the replies are noise that never ends by itself: each reply stops at
--max-output tokens and Claude Code asks for more ("Output token limit hit") before the next
turn; those requests are recorded too. Saved gzip-compressed when OUT ends in .gz.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_concurrency import free_port, serve, stop  # noqa: E402

CLAUDE_CODE = "@anthropic-ai/claude-code@2.1.197"  # as tests/e2e/test_coding_agents.py pins it
ASKS = ["Look at the failing test in tests/test_parser.py and tell me why it fails.",
        "Now fix it, please, keeping the change small.",
        "Run the tests again and tell me what is left.",
        "Write a short summary of what we changed for the commit message.",
        "Thanks. One more: is there anything else in the parser that looks fragile?"]


def claude_bin() -> Path:
    where = Path.home() / ".cache" / "tandem" / "agents" / CLAUDE_CODE.replace("/", "+")
    if not (where / "node_modules" / ".bin" / "claude").exists():
        where.mkdir(parents=True, exist_ok=True)
        subprocess.run([shutil.which("npm") or "npm", "install", "--prefix", str(where), "--no-audit",
                        "--no-fund", CLAUDE_CODE], check=True, capture_output=True, timeout=600)
    return where / "node_modules" / ".bin" / "claude"


def recording_proxy(upstream: str, port: int, log: list, t0: float):
    """A reverse proxy on `port` that forwards everything to `upstream` and keeps each POST's
    path and JSON body in `log`. Returns (server, thread)."""
    import httpx2 as httpx
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    client = httpx.AsyncClient(base_url=upstream, timeout=None)

    async def forward(request):
        body = await request.body()
        if request.method == "POST":
            try:
                log.append({"t": round(time.monotonic() - t0, 3), "path": request.url.path,
                            "body": json.loads(body)})
            except ValueError:
                pass
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        req = client.build_request(request.method, request.url.path, params=request.query_params,
                                   headers=headers, content=body)
        r = await client.send(req, stream=True)
        out = {k: v for k, v in r.headers.items() if k.lower() not in ("content-length", "transfer-encoding",
                                                                          "content-encoding")}
        if "text/event-stream" in r.headers.get("content-type", ""):
            return StreamingResponse(r.aiter_raw(), status_code=r.status_code, headers=out)
        data = await r.aread()
        await r.aclose()
        return Response(data, status_code=r.status_code, headers=out)

    app = Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST", "HEAD", "OPTIONS"])])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return server, thread


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--max-output", type=int, default=16)
    args = ap.parse_args()
    claude = claude_bin()
    work = Path(tempfile.mkdtemp(prefix="tandem-record-"))
    os.environ["TANDEM_CACHE_DIR"] = str(work / "cache")
    port, proxy_port = free_port(), free_port()

    class Args:
        gpu_layers = 0

    proc = serve(Args, [str(Path(sys.executable).parent / "tandem"), "serve", "-m", args.model,
                        "--port", str(port), "--no-disk-cache"], port)
    log: list = []
    t0 = time.monotonic()
    server, thread = recording_proxy(f"http://127.0.0.1:{port}", proxy_port, log, t0)
    home = work / "home"
    home.mkdir()
    project = work / "project"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_parser.py").write_text("def test_parse():\n    assert 1 + 1 == 3\n")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "CLAUDE"))},
           "HOME": str(home), "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{proxy_port}", "ANTHROPIC_API_KEY": "none",
           "ANTHROPIC_MODEL": "gemma-4", "ANTHROPIC_DEFAULT_HAIKU_MODEL": "gemma-4",
           "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(args.max_output)}
    try:
        for turn in range(args.turns):
            cmd = [str(claude), "-p", ASKS[turn % len(ASKS)], "--permission-mode", "dontAsk"]
            if turn:
                cmd.append("--continue")
            before = len(log)
            r = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=900,
                               stdin=subprocess.DEVNULL)
            print(f"turn {turn + 1}: {len(log) - before} requests (claude exit {r.returncode})", flush=True)
    finally:
        server.should_exit = True
        thread.join(10)
        stop(proc)
    data = {"agent": CLAUDE_CODE, "recorded": time.strftime("%Y-%m-%d"), "turns": args.turns,
            "max_output": args.max_output, "requests": log}
    raw = json.dumps(data).encode()
    Path(args.out).write_bytes(gzip.compress(raw) if args.out.endswith(".gz") else raw)
    print(f"{len(log)} requests -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
