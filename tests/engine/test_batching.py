"""Continuous batching: several generations decode together in one context (one target batch
per step), each equal to what it gets alone except at measured near-ties, each with its own
stop, stats and cached prefix."""

from __future__ import annotations

import threading
import time

import httpx2 as httpx
import pytest

from engine.local.engine import Engine, GenerationConfig
from engine.local.runtime import LoadOptions

from ..support.prompts import PROMPTS

TOL = 0.05  # logit gap below which two tokens count as tied (the tiny models' batch noise is ~1e-3)


@pytest.fixture(scope="module")
def batched(tiny):
    e = Engine.load(tiny["target"], tiny[0.7], LoadOptions(n_seq=4))
    yield e
    e.close()


def run_together(engine, prompts, configs):
    """Every generation started at once on its own thread; their results and event times."""
    out = [None] * len(prompts)
    times = [[] for _ in prompts]
    go = threading.Barrier(len(prompts))

    def one(i):
        go.wait()
        toks, answer, last = [], "", None
        for ev in engine.generate(prompts[i], configs[i]):
            toks += ev.tokens
            answer += ev.answer
            times[i].append((time.perf_counter(), len(ev.tokens)))
            last = ev
        out[i] = (toks, answer, last.stats)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out, times


def same_or_near_tie(engine, prompt, got, want):
    """True when equal; a divergence must sit where the solo decoding's top two nearly tie."""
    if got == want:
        return "identical"
    j = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    margin = engine.next_token_margin(prompt, want[:j])
    assert margin < TOL, f"diverged at token {j} with a top-2 gap of {margin:.4f}: not a near-tie"
    return "near-tie"


@pytest.mark.parametrize("spec", ["none", "mtp", "auto"])
def test_concurrent_greedy_equals_solo(batched, spec):
    """8 generations on 4 sequences (4 run, 4 wait for a slot), different prompts and lengths,
    crossing the sliding window (16 positions) at different steps: each equals its solo run."""
    e = batched
    prompts = [e.tokenize(p * (1 + i % 3)) for i, p in enumerate(PROMPTS)]
    configs = [GenerationConfig(max_tokens=40 + 9 * i, use_mtp=spec != "none", spec=spec if spec != "none" else "auto",
                                draft_max=3 if spec == "mtp" else "auto") for i in range(len(prompts))]
    solo = []
    for p, c in zip(prompts, configs):
        e.reset()
        solo.append(e.run(p, c).tokens)
    e.reset()
    together, _ = run_together(e, prompts, configs)
    outcomes = [same_or_near_tie(e, p, got[0], want) for p, got, want in zip(prompts, together, solo)]
    assert outcomes.count("near-tie") <= 2, outcomes
    # per-request stats are exact: each counts its own tokens
    for (toks, _, stats), c in zip(together, configs):
        assert stats.generated_tokens == len(toks) <= c.max_tokens
        assert stats.finish_reason in ("stop", "length")
        if spec == "mtp":
            assert stats.draft_tokens > 0 and 0 <= stats.accepted_tokens <= stats.draft_tokens


def test_long_prompt_does_not_stall_the_others(batched):
    """A long prompt arriving while three replies stream is prefilled in chunks between their
    steps: they keep streaming while it is read."""
    e = batched
    e.reset()
    long_prompt = e.tokenize("the quick brown fox jumps over the lazy dog " * 300)[:2700]
    shorts = [e.tokenize(p) for p in PROMPTS[:3]]
    cfg = GenerationConfig(max_tokens=400, use_mtp=False)
    events = {i: [] for i in range(4)}
    started = threading.Event()
    submitted = {}

    def short(i):
        for ev in e.generate(shorts[i], cfg):
            events[i].append(time.perf_counter())
            if len(events[i]) == 5:
                started.set()

    threads = [threading.Thread(target=short, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    assert started.wait(60)
    submitted["t"] = time.perf_counter()
    first = None
    for ev in e.generate(long_prompt, GenerationConfig(max_tokens=4, use_mtp=False)):
        first = first or time.perf_counter()
    for t in threads:
        t.join(120)
    during = [sum(submitted["t"] < t < first for t in events[i]) for i in range(3)]
    # the prompt takes ~2700 / 128 steps; each short reply gets a token in every one of them
    assert min(during) >= 10, during


def test_stop_stops_only_its_own(batched):
    """Dropping one stream (a Stop, a client gone) ends that generation after its step; the
    others run to their end, and the slot is free for the next request."""
    e = batched
    e.reset()
    prompts = [e.tokenize(p) for p in PROMPTS[:3]]
    cfg = GenerationConfig(max_tokens=200, use_mtp=False)
    streams = [e.generate(p, cfg) for p in prompts]
    got = [[] for _ in streams]
    for _ in range(5):
        for i, s in enumerate(streams):
            got[i] += next(s).tokens
    streams[1].close()
    for i in (0, 2):
        for ev in streams[i]:
            got[i] += ev.tokens
            last = ev
        assert last.finish_reason == "length" and last.stats.generated_tokens == 200
    assert e.scheduler.idle(30)
    assert not any(s.busy for s in e.scheduler.slots)


def test_next_turn_goes_to_its_cached_prefix(batched):
    """A conversation's next request goes to the slot that holds it: only the new suffix is
    decoded, even after other conversations used the other slots (whose sliding-window
    cells llama.cpp recycles meanwhile)."""
    e = batched
    e.reset()
    prompts = [e.tokenize(p) for p in PROMPTS[:3]]
    replies = [e.run(p, GenerationConfig(max_tokens=12, use_mtp=False)) for p in prompts]
    for p, r in zip(prompts, replies):
        nxt = p + r.tokens + e.tokenize(" and then?", add_special=False)
        res = e.run(nxt, GenerationConfig(max_tokens=4, use_mtp=False))
        # everything but the reply's last token (never decoded) was cached
        assert res.stats.reused_tokens == len(p) + len(r.tokens) - 1, (res.stats.reused_tokens, len(p))


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
        while min(len(v) for v in stamps.values()) < 5:
            time.sleep(0.01)
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
        t0 = time.time()
        while (s.health()["generating"], s.health()["waiting"]) != (4, 4) and time.time() - t0 < 60:
            time.sleep(0.05)
        assert (s.health()["generating"], s.health()["waiting"]) == (4, 4)
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


def test_requests_sharing_the_context_never_cut_each_other_short(tiny):
    """The sequences share one pool of context cells. A request reserves its prompt and
    max_tokens, so four replies that together need more than the context each get what they
    get alone (the ones that do not fit beside the running ones wait), never a reply cut
    short by the others filling the context (as a new user found: 'length' at 667 of 1500)."""
    e = Engine.load(tiny["target"], tiny[0.7], LoadOptions(n_seq=4, n_ctx=1024))
    try:
        prompts = [e.tokenize(p * 3) for p in PROMPTS[:4]]
        cfg = GenerationConfig(max_tokens=400, use_mtp=False)
        solo = []
        for p in prompts:
            e.reset()
            solo.append(e.run(p, cfg))
        assert all(r.stats.finish_reason == "length" for r in solo)
        e.reset()
        together, _ = run_together(e, prompts, [cfg] * 4)
        for (toks, _, stats), alone in zip(together, solo):
            assert stats.finish_reason == "length" and toks == alone.tokens, stats.finish_reason
    finally:
        e.close()
