"""Several clients at once against one OpenAI-compatible server (`tandem bench --server URL
--concurrency 1 2 4 8`): aggregate tokens per second over all clients, and how long the
slowest client waited for its whole reply. Each client streams its own prompt, greedy, a
fixed number of tokens, so the servers compared do the same work.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

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

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def run_load(base_url: str, clients: int, max_tokens: int = 64, api_key: str | None = None,
             model: str | None = None, extra_body: dict | None = None, prompts=LOAD_PROMPTS,
             timeout: float = 600.0) -> LoadResult:
    """`clients` streaming chat requests sent at once (released together by a barrier)."""
    import openai

    client = openai.OpenAI(base_url=base_url, api_key=api_key or "none", max_retries=0, timeout=timeout)
    if model is None:
        model = client.models.list().data[0].id
    start = threading.Barrier(clients + 1)
    tokens, times, errors = [0] * clients, [0.0] * clients, [0]

    def one(i: int) -> None:
        start.wait()
        t0 = time.perf_counter()
        try:
            stream = client.chat.completions.create(
                model=model, stream=True, max_tokens=max_tokens, temperature=0.0,
                stream_options={"include_usage": True}, extra_body=extra_body or None,
                messages=[{"role": "user", "content": prompts[i % len(prompts)]}])
            for chunk in stream:
                if chunk.usage is not None:
                    tokens[i] = chunk.usage.completion_tokens
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
    return LoadResult(clients, sum(tokens), time.perf_counter() - t0, max(times), errors[0])


def load_table(rows: dict[str, list[LoadResult]]) -> str:
    """One line per server and level: aggregate tok/s, its ratio to one client, the slowest."""
    out = [f"{'server':<34} {'clients':>7} {'tok/s':>8} {'vs 1':>6} {'slowest s':>10} {'errors':>6}"]
    for name, results in rows.items():
        one = next((r.tps for r in results if r.clients == 1), None)
        for r in results:
            ratio = f"{r.tps / one:.2f}x" if one else "-"
            out.append(f"{name:<34} {r.clients:>7} {r.tps:>8.1f} {ratio:>6} {r.slowest_s:>10.2f} {r.errors:>6}")
    return "\n".join(out)
