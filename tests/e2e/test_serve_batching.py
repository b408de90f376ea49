"""`tandem serve --parallel 4` as installed, with real clients: requests decode together, share
their cached prefixes and leave each other's replies whole (the batch in this process:
tests/engine/test_batching.py)."""

from __future__ import annotations

import threading
import time

import httpx2 as httpx
import pytest

from ..support.prompts import PROMPTS
from ..support.waiting import wait_until

pytestmark = pytest.mark.slow  # eight clients at once, replies of up to 1800 tokens


def test_tandem_serve_decodes_requests_together(tiny):
    """The installed `tandem serve --parallel 4`: 8 streaming clients at once (4 decode, 4
    queue) each get their solo answer and their own usage; a client that leaves mid-reply does
    not disturb the others; beyond the queue a 503 says when to retry."""
    import sys
    from pathlib import Path

    import openai

    from ..support.serve import Serve

    tandem = Path(sys.executable).parent / "tandem"
    s = Serve(tiny, "--parallel", "4", "--queue", "4", "--draft-max", "3", command=[str(tandem)])
    try:
        c = openai.OpenAI(base_url=s.url, api_key="none", max_retries=0, timeout=120)
        msgs = [[{"role": "user", "content": p}] for p in PROMPTS]

        def ask(m, n=48):
            text, usage = [], None
            for chunk in c.chat.completions.create(model="tiny-target", messages=m, max_tokens=n, stream=True,
                                                   temperature=0, stream_options={"include_usage": True}):
                if chunk.choices and chunk.choices[0].delta.content:
                    text.append(chunk.choices[0].delta.content)
                if chunk.usage is not None:
                    usage = chunk.usage
            return "".join(text), usage

        solo = [ask(m) for m in msgs]
        got = [None] * len(msgs)
        go = threading.Barrier(len(msgs) + 1)

        def client_thread(i):
            go.wait()
            got[i] = ask(msgs[i])

        threads = [threading.Thread(target=client_thread, args=(i,)) for i in range(len(msgs))]
        for t in threads:
            t.start()
        go.wait()
        seen_running = 0
        while any(t.is_alive() for t in threads):
            seen_running = max(seen_running, s.health()["generating"])
            time.sleep(0.02)
        assert seen_running > 1  # they really ran together
        differ = [i for i in range(len(msgs)) if got[i][0] != solo[i][0]]
        assert len(differ) <= 2, differ  # near-ties of batched rounding at most (checked in-process above)
        for (text, usage), (_, solo_usage) in zip(got, solo):
            assert usage.prompt_tokens == solo_usage.prompt_tokens and 1 <= usage.completion_tokens <= 48

        # n choices of one request decode together, a sequence each, and each is the request's
        # own answer (greedy: all alike)
        together, res = [], {}
        t = threading.Thread(target=lambda: res.setdefault("r", c.chat.completions.create(
            model="tiny-target", messages=msgs[0], max_tokens=200, n=3, temperature=0)))
        t.start()
        while t.is_alive():
            together.append(s.health()["generating"])
            time.sleep(0.02)
        t.join()
        r = res["r"]
        assert max(together) == 3 and [ch.index for ch in r.choices] == [0, 1, 2]
        assert len({ch.message.content for ch in r.choices}) == 1
        assert r.usage.completion_tokens == 3 * 200 or r.choices[0].finish_reason == "stop"

        # a client that leaves mid-reply: the others finish whole, as they would alone
        alone = {i: ask(msgs[i], 300) for i in (0, 2)}
        out = {}

        def long_ask(i):
            out[i] = ask(msgs[i], 300)

        keep = [threading.Thread(target=long_ask, args=(i,)) for i in (0, 2)]
        for t in keep:
            t.start()
        with httpx.stream("POST", f"{s.url}/chat/completions", timeout=60,
                          json={"model": "tiny-target", "messages": msgs[1], "max_tokens": 300, "stream": True}) as r:
            for i, _ in enumerate(r.iter_lines()):
                if i > 5:
                    break
        for t in keep:
            t.join(120)
        for i in (0, 2):
            assert out[i][1].completion_tokens == alone[i][1].completion_tokens
            assert out[i][0] == alone[i][0]

        # a long prompt arriving while three replies stream: they keep streaming while it is read
        stamps, first_long = {i: [] for i in range(3)}, {}

        def short(i):
            for chunk in c.chat.completions.create(model="tiny-target", messages=msgs[i], max_tokens=600,
                                                   stream=True):
                stamps[i].append(time.perf_counter())

        shorts = [threading.Thread(target=short, args=(i,)) for i in range(3)]
        for t in shorts:
            t.start()
        wait_until(lambda: min(len(v) for v in stamps.values()) >= 5, 120, "three replies streaming", 0.01)
        sent = time.perf_counter()
        long_text = "the quick brown fox jumps over the lazy dog " * 60  # ~2.7k tokens of the tiny vocabulary
        for chunk in c.completions.create(model="tiny-target", prompt=long_text, max_tokens=2, stream=True):
            first_long.setdefault("t", time.perf_counter())
        for t in shorts:
            t.join(120)
        during = [sum(sent < x < first_long["t"] for x in stamps[i]) for i in range(3)]
        assert min(during) >= 5, during

        # 4 running + 4 queued: the next ones are refused at once, with a time to retry
        release = threading.Event()

        def hold(i):
            with httpx.stream("POST", f"{s.url}/chat/completions", timeout=120,
                              # each reserves its prompt and max_tokens: four of them fit the context
                              json={"model": "tiny-target", "messages": msgs[i], "max_tokens": 1800,
                                    "stream": True}) as r:
                for _ in r.iter_lines():
                    if release.is_set():
                        break

        holders = [threading.Thread(target=hold, args=(i,)) for i in range(8)]
        for t in holders:
            t.start()
        wait_until(lambda: (s.health()["generating"], s.health()["waiting"]) == (4, 4), 60, "4 running and 4 queued")
        refused = [httpx.post(f"{s.url}/chat/completions", timeout=30,
                              json={"model": "tiny-target", "messages": msgs[0], "max_tokens": 5}) for _ in range(2)]
        release.set()
        for t in holders:
            t.join(120)
        assert [r.status_code for r in refused] == [503, 503]
        assert refused[0].headers["retry-after"] == "1" and refused[0].json()["error"]["code"] == "queue_full"

        # the README's load benchmark, against this server: drafting on and off, 1 and 3 clients
        import subprocess

        out = subprocess.run([str(tandem), "bench", "--server", s.url, "--concurrency", "1", "3", "--max-tokens", "16",
                              "--draft-max", "3"], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        rows = [line.split() for line in out.stdout.splitlines() if line.startswith("tandem ")]
        names = [(" ".join(r[:-6]), r[-6]) for r in rows]
        assert names == [("tandem drafting", "1"), ("tandem drafting", "3"), ("tandem no drafting", "1"),
                         ("tandem no drafting", "3")], out.stdout
        assert all(r[-1] in ("1/1", "3/3", "2/3") and r[-2] == "0" for r in rows), out.stdout  # errors 0, as alone
    finally:
        s.stop()
