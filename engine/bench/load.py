"""Several clients at once against one OpenAI-compatible server (`tandem bench --server URL
--concurrency 1 2 4 8`): aggregate tokens per second over all clients, and how long the
slowest client waited for its whole reply. Each client streams its own prompt, greedy, a
fixed number of tokens, so the servers compared do the same work.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

LOAD_PROMPTS = (
    "Explain how a hash map handles collisions.",
    "Write a Python function that reverses a linked list.",
    "What is the difference between a process and a thread?",
    "Summarise the rules of chess in a paragraph.",
    "Describe how HTTP caching works.",
    "Write a haiku about autumn rain.",
    "Why is the sky blue?",
    "List five uses of a binary search tree.",
)


@dataclass
class LoadResult:
    clients: int
    tokens: int  # completion tokens of every client together
    seconds: float  # from the first request sent to the last reply's end
    slowest_s: float  # the slowest client's whole reply
    errors: int = 0
    texts: list = field(default_factory=list)  # each client's reply
    same: int | None = None  # of them, how many equal the prompt's reply alone (set by `compare_alone`)
    # drafted and accepted tokens, from the replies' llama-server-style `timings` (tandem serve's
    # and llama-server's last streamed chunk); 0 where a server says none
    drafted: int = 0
    accepted: int = 0

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


def run_load(base_url: str, clients: int, max_tokens: int = 64, api_key: str | None = None,
             model: str | None = None, extra_body: dict | None = None, prompts=LOAD_PROMPTS,
             timeout: float = 600.0) -> LoadResult:
    """`clients` streaming chat requests sent at once (released together by a barrier)."""
    import openai

    client = openai.OpenAI(base_url=base_url, api_key=api_key or "none", max_retries=0, timeout=timeout)
    if model is None:
        model = client.models.list().data[0].id
    start = threading.Barrier(clients + 1)
    tokens, times, errors, texts = [0] * clients, [0.0] * clients, [0], [""] * clients
    drafts = [(0, 0)] * clients

    def one(i: int) -> None:
        start.wait()
        t0 = time.perf_counter()
        try:
            stream = client.chat.completions.create(
                model=model, stream=True, max_tokens=max_tokens, temperature=0.0,
                stream_options={"include_usage": True}, extra_body=extra_body or None,
                messages=[{"role": "user", "content": prompts[i % len(prompts)]}])
            parts = []
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    parts.append(chunk.choices[0].delta.content)
                if chunk.usage is not None:
                    tokens[i] = chunk.usage.completion_tokens
                t = (chunk.model_extra or {}).get("timings")
                if isinstance(t, dict):
                    drafts[i] = (int(t.get("draft_n") or 0), int(t.get("draft_n_accepted") or 0))
            texts[i] = "".join(parts)
        except openai.OpenAIError:
            errors[0] += 1
        times[i] = time.perf_counter() - t0

    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return LoadResult(clients, sum(tokens), time.perf_counter() - t0, max(times), errors[0], texts,
                      drafted=sum(d for d, _ in drafts), accepted=sum(a for _, a in drafts))


def compare_alone(results: list[LoadResult], alone: list[str]) -> None:
    """How many replies under load equal the same prompt's reply alone (greedy: all of them,
    but for the rounding near-ties batched decoding has)."""
    for r in results:
        r.same = sum(t == alone[i % len(alone)] for i, t in enumerate(r.texts))


def measure_levels(base_url: str, levels, max_tokens: int = 64, api_key: str | None = None,
                   model: str | None = None, extra_body: dict | None = None) -> list[LoadResult]:
    """One server: a warm-up, each prompt alone (the replies to compare with), then every level."""
    return measure_in_turn({"": (base_url, extra_body)}, levels, max_tokens, api_key=api_key, model=model)[""]


def measure_in_turn(runs: dict, levels, max_tokens: int = 64, rounds: int = 1, api_key: str | None = None,
                    model: str | None = None) -> dict[str, list[LoadResult]]:
    """Several servers (name -> (base URL, extra body)) measured in turn: each warmed up and its
    prompts answered alone first, then every level on each server, round after round; per server
    and level, the round with the median tok/s."""
    alone = {}
    for name, (url, extra) in runs.items():
        run_load(url, 1, 8, api_key, model, extra)  # graphs built, costs measured
        alone[name] = [run_load(url, 1, max_tokens, api_key, model, extra, prompts=(p,)).texts[0]
                       for p in LOAD_PROMPTS[:max(levels)]]
    got = {name: {n: [] for n in levels} for name in runs}
    for _ in range(rounds):
        for n in levels:
            for name, (url, extra) in runs.items():
                got[name][n].append(run_load(url, n, max_tokens, api_key, model, extra))
    rows = {}
    for name in runs:
        rows[name] = [sorted(got[name][n], key=lambda r: r.tps)[len(got[name][n]) // 2] for n in levels]
        compare_alone(rows[name], alone[name])
    return rows


def load_table(rows: dict[str, list[LoadResult]]) -> str:
    """One line per server and level: aggregate tok/s, its ratio to one client, the slowest."""
    out = [f"{'server':<34} {'clients':>7} {'tok/s':>8} {'vs 1':>6} {'slowest s':>10} {'errors':>6} "
           f"{'as alone':>8}"]
    for name, results in rows.items():
        one = next((r.tps for r in results if r.clients == 1), None)
        for r in results:
            ratio = f"{r.tps / one:.2f}x" if one else "-"
            same = f"{r.same}/{r.clients}" if r.same is not None else "-"
            out.append(f"{name:<34} {r.clients:>7} {r.tps:>8.1f} {ratio:>6} {r.slowest_s:>10.2f} {r.errors:>6} "
                       f"{same:>8}")
    return "\n".join(out)
