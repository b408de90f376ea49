"""An agent's day, side by side in one run: `tandem serve` against llama-server with the same
files, context and slot count, replaying an agent session shaped like Claude Code's (a ~17k-token
system prompt with 20 tool declarations, turns that each add a tool call and its result), with
what an agent's day mixes in: a retry, a side request with another system prompt (a title
call), a second long conversation, an edit of the first message, and a restart of both
servers (llama-server with --kv-unified: one pool of cells for its slots, as Tandem's, so a
slot may hold a conversation as long as the context). For each request: the time to its first token (the reply is one token: what is
measured is what the server reads again) and the prompt tokens it took from its cache (the
server's own `prompt_tokens_details.cached_tokens`).

    .venv/bin/python scripts/bench_agent_session.py -m TARGET.gguf [--ctx 65536] [--parallel 4]
        [--llama-server PATH] [--only tandem|llama] [--rounds 3] [--json OUT]
        [--session scripts/sessions/claude_code.json.gz]

With --session, the requests of a recorded real session (scripts/record_agent_session.py: Claude
Code's own system prompt, tools and side requests, several turns) are replayed instead, each
with max_tokens 1 and no streaming, then the last one again after a restart.

Each server replays the session `--rounds` times, the servers taking turns (a shared machine's
noise falls on both alike); each request's time is its median over the rounds.

The session is synthetic (no recorded Claude Code traffic is shipped): the structure and sizes
of Claude Code's requests, the text made up. With the tiny test pair over the real tokenizer
(`tandem make-test-models --vocab gemma4`) the numbers are the servers' own costs: template,
tokenizing, matching the prefix and reading the prompt.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2 as httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_concurrency import free_port, serve, stop  # noqa: E402
from scripts.figures import provenance  # noqa: E402

PARA = ("When a task needs several steps, plan them first, keep the user informed of progress, and prefer the "
        "tools provided over guessing; read files before editing them, keep changes small and run the tests. ")


def tools(n: int = 20) -> list[dict]:
    """n tool declarations as an agent sends them (long descriptions, nested parameters)."""
    out = []
    for i in range(n):
        out.append({"type": "function", "function": {
            "name": f"Tool{i}", "description": f"Tool number {i}. " + PARA * 6,
            "parameters": {"type": "object", "required": ["path"], "properties": {
                "path": {"type": "string", "description": "The absolute path of the file " + PARA},
                "limit": {"type": "integer", "description": "How many lines to read at most"},
                "options": {"type": "object", "properties": {"recursive": {"type": "boolean"},
                                                             "pattern": {"type": "string"}}}}}}})
    return out


def conversation(name: str, turns: int, first: str | None = None, system_paras: int = 110) -> list[dict]:
    """A conversation's messages after `turns` tool round trips: the system prompt, the first
    user message, then per turn the assistant's tool call and its result."""
    msgs = [{"role": "system", "content": f"You are {name}, a coding agent. " + PARA * system_paras},
            {"role": "user", "content": first or f"{name}: fix the failing test in the parser module, please."}]
    for t in range(turns):
        call = {"id": f"call_{t}", "type": "function",
                "function": {"name": f"Tool{t % 20}", "arguments": json.dumps({"path": f"/src/file{t}.py"})}}
        msgs.append({"role": "assistant", "content": "", "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": f"call_{t}",
                     "content": "\n".join(f"{n:4d}  def function_{t}_{n}(x): return x + {n}" for n in range(60))})
    return msgs


SIDE = [{"role": "system", "content": "Summarise the conversation in a title of at most six words. " + PARA * 30},
        {"role": "user", "content": "fix the failing test in the parser module"}]


def chat_body(messages: list[dict], with_tools: bool) -> dict:
    body = {"model": "m", "messages": messages, "max_tokens": 1, "temperature": 0}
    if with_tools:
        body["tools"] = tools()
    return body


def steps() -> list[tuple[str, str, dict]]:
    """(what, path, body) in the order an agent's day sends them."""
    return [(what, "/v1/chat/completions", chat_body(msgs, with_tools)) for what, msgs, with_tools in _day()]


def _day() -> list[tuple[str, list[dict], bool]]:
    a = [(f"A turn {t + 1}" + (" (cold)" if t == 0 else ""), conversation("agent A", t), True) for t in range(6)]
    return a + [
        ("A turn 6 again (a retry)", conversation("agent A", 5), True),
        ("side request (title, another system prompt)", SIDE, False),
        ("A turn 6 again, after the side request", conversation("agent A", 5), True),
        ("B turn 1 (a second long conversation)", conversation("agent B", 0, system_paras=130), True),
        ("A turn 7, after B", conversation("agent A", 6), True),
        ("B turn 2, after A", conversation("agent B", 1, system_paras=130), True),
        ("A with its first message edited", conversation("agent A", 6, first="agent A: fix the lexer instead."), True),
        ("A turn 7 again, after the edit", conversation("agent A", 6), True),
    ]


AFTER_RESTART = ("A turn 7, first request after a restart", "/v1/chat/completions",
                 chat_body(conversation("agent A", 6), True))


def recorded(path: str) -> tuple[list[tuple[str, str, dict]], tuple[str, str, dict]]:
    """A recorded session's requests (each answered with one token, not streamed), and its last
    request again (after a restart)."""
    import gzip

    raw = Path(path).read_bytes()
    data = json.loads(gzip.decompress(raw) if path.endswith(".gz") else raw)
    plan = []
    for i, r in enumerate(data["requests"]):
        body = {**r["body"], "max_tokens": 1, "stream": False, "temperature": 0}
        tools_n = len(body.get("tools") or [])
        plan.append((f"request {i + 1} ({len(body.get('messages', []))} messages, {tools_n} tools)", r["path"], body))
    last = plan[-1]
    return plan, (last[0].replace("request", "after a restart: request", 1), last[1], last[2])


def ask(url: str, path: str, body: dict) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    r = httpx.post(url + path, json=body, timeout=900)
    dt = time.perf_counter() - t0
    if r.status_code != 200:
        raise SystemExit(f"{url}{path}: {r.status_code} {r.text[:500]}")
    usage = r.json()["usage"]
    if "input_tokens" in usage:  # Anthropic's Messages: input_tokens is what was not cached
        cached = usage.get("cache_read_input_tokens") or 0
        return dt, cached, usage["input_tokens"] + cached + (usage.get("cache_creation_input_tokens") or 0)
    return dt, (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0), usage["prompt_tokens"]


def markdown(data: dict) -> str:
    """The README's table of a run written with --json (tests/unit/test_figures.py checks that
    the README shows the file's figures)."""
    names = data["columns"]
    lines = ["| request | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for what, got in data["rows"].items():
        lines.append(f"| {what} | " + " | ".join(f"{got[n][0]:.2f} s, {got[n][1]:,} of {got[n][2]:,} cached"
                                               for n in names) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--ctx", type=int, default=65536)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--gpu-layers", type=int, default=0)
    ap.add_argument("--llama-server", help="the binary (default: built from the vendored sources)")
    ap.add_argument("--only", choices=["tandem", "llama"])
    ap.add_argument("--rounds", type=int, default=3, help="replays per server, taking turns (default 3)")
    ap.add_argument("--session", metavar="FILE", help="replay a recorded session (record_agent_session.py)")
    ap.add_argument("--json", metavar="OUT", help="also write the rows as JSON to OUT")
    args = ap.parse_args()
    threads = args.threads or (os.cpu_count() or 2)
    cache = tempfile.mkdtemp(prefix="tandem-bench-cache-")  # tandem's disk cache: each round's alone
    commands = {}
    if args.only != "llama":
        tandem = Path(sys.executable).parent / "tandem"
        commands["tandem serve"] = lambda port: [
            str(tandem), "serve", "-m", args.model, "--port", str(port), "--parallel", str(args.parallel),
            "--ctx", str(args.ctx), "--threads", str(threads), "--gpu-layers", str(args.gpu_layers)]
    if args.only != "tandem":
        binary = args.llama_server or subprocess.run(
            ["bash", str(ROOT / "packaging" / "build-llama-server.sh")], capture_output=True, text=True,
            check=True).stdout.strip().splitlines()[-1]
        commands["llama-server"] = lambda port: [
            binary, "-m", args.model, "--host", "127.0.0.1", "--port", str(port), "-c", str(args.ctx),
            "-t", str(threads), "-np", str(args.parallel), "--kv-unified", "--no-webui", "-ngl", str(args.gpu_layers), "--jinja"]
    plan, after_restart = recorded(args.session) if args.session else (steps(), AFTER_RESTART)
    runs = {what: {name: [] for name in commands} for what, _, _ in plan + [after_restart]}
    for _ in range(args.rounds):
        for name, cmd in commands.items():  # one at a time: each has the machine to itself
            os.environ["TANDEM_CACHE_DIR"] = tempfile.mkdtemp(prefix="tandem-bench-cache-", dir=cache)
            port = free_port()
            proc = serve(args, cmd(port), port)
            url = f"http://127.0.0.1:{port}"
            try:
                for what, path, body in plan:
                    runs[what][name].append(ask(url, path, body))
            finally:
                stop(proc)
            proc = serve(args, cmd(port), port)
            try:
                what, path, body = after_restart
                runs[what][name].append(ask(url, path, body))
            finally:
                stop(proc)
    # each request's median time; its cached and prompt tokens are the same in every round
    rows = {what: {name: (statistics.median(r[0] for r in got), got[0][1], got[0][2])
                   for name, got in by_server.items()} for what, by_server in runs.items()}
    names = list(commands)
    print(f"{Path(args.model).name}: --ctx {args.ctx}, {args.parallel} slots, {threads} threads; "
          "time to the first token (s), cached prompt tokens / prompt tokens")
    head = f"{'request':46s}" + "".join(f"{n:>28s}" for n in names)
    print(head + ("   ratio" if len(names) == 2 else ""))
    for what, got in rows.items():
        line = f"{what:46s}" + "".join(f"{got[n][0]:9.2f} s {got[n][1]:7d}/{got[n][2]:<7d} " for n in names)
        if len(names) == 2 and got[names[1]][0] > 0:
            line += f"  {got[names[0]][0] / got[names[1]][0]:5.2f}x"
        print(line)
    for n in names:
        if args.session:  # what the user waited for, all told; and the prompt tokens read again
            read = sum(got[n][2] - got[n][1] for got in rows.values())
            print(f"{n}: {sum(got[n][0] for got in rows.values()):.2f} s to the first tokens all told, "
                  f"{read} prompt tokens read")
            continue
        warm = statistics.median(rows[f"A turn {t}"][n][0] for t in range(2, 7))
        back = [rows[w][n][0] for w in ("A turn 6 again, after the side request", "A turn 7, after B",
                                        "B turn 2, after A", "A turn 7 again, after the edit")]
        print(f"{n}: warm turn (median of A turns 2-6) {warm:.2f} s; returns after other requests "
              f"{max(back) / warm:.2f}x of it at worst; first request after a restart "
              f"{rows[AFTER_RESTART[0]][n][0] / warm:.2f}x; cold prefill "
              f"{rows['A turn 1 (cold)'][n][2] / rows['A turn 1 (cold)'][n][0]:.0f} tok/s")
    if args.json:
        Path(args.json).write_text(json.dumps({
            **provenance("scripts/bench_agent_session.py"),
            "model": Path(args.model).name, "ctx": args.ctx, "parallel": args.parallel, "threads": threads,
            "rounds": args.rounds, "session": args.session,
            "columns": names, "rows": rows}, indent=1), "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
