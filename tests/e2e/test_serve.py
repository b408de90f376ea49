"""`tandem serve` as a real process on 127.0.0.1 with the synthetic pair, and the `openai` SDK
as the real client: streaming and not, llama-server-style timings, per-request MTP off, stop
strings, a disconnect cancels, a full queue answers 503, keys, malformed and oversize bodies,
and Tandem's own remote backend talking to it (Compare on one server)."""

from __future__ import annotations

import concurrent.futures
import json
import socket
import subprocess
import sys
import threading
import time

import httpx2 as httpx
import openai
import pytest

from engine.backends.remote import RemoteBackend
from engine.local.engine import GenerationConfig

from ..support.llamaserver import free_port
from ..support.serve import Serve
from ..support.waiting import wait_until

MSGS = [{"role": "user", "content": "Hello world, this is a test"}]


@pytest.fixture(scope="module")
def server(tiny):
    # a fixed draft length: on this CPU, auto may rightly pause drafting once it has measured costs
    s = Serve(tiny, "--parallel", "1", "--queue", "1", "--draft-max", "3")
    yield s
    s.stop()


def client(server, key="none"):
    return openai.OpenAI(base_url=server.url, api_key=key, max_retries=0, timeout=120)


def test_streaming_chat_reports_drafts_and_mtp_off_gives_the_same_text(server):
    c = client(server)
    assert [m.id for m in c.models.list().data] == ["tiny-target"]
    text, timings, usage = [], None, None
    for chunk in c.chat.completions.create(model="tiny-target", messages=MSGS, max_tokens=64, stream=True,
                                           stream_options={"include_usage": True},
                                           extra_body={"timings_per_token": True}):
        extra = chunk.model_extra or {}
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
            assert "timings" in extra  # timings_per_token: on every chunk
        timings = extra.get("timings", timings)
        usage = chunk.usage or usage
    assert timings["draft_n_accepted"] > 0 and timings["draft_n"] >= timings["draft_n_accepted"]
    assert timings["predicted_n"] == 64 == usage.completion_tokens and timings["predicted_per_second"] > 0
    off = c.chat.completions.create(model="x", messages=MSGS, max_tokens=64, extra_body={"tandem": {"mtp": False}})
    assert off.choices[0].message.content == "".join(text)  # greedy: identical, without drafts
    assert "draft_n" not in off.model_extra["timings"] and off.choices[0].finish_reason == "length"
    k2 = c.chat.completions.create(model="x", messages=MSGS, max_tokens=64, extra_body={"tandem": {"draft_max": 2}})
    assert k2.choices[0].message.content == "".join(text) and k2.model_extra["timings"]["draft_n"] > 0


def test_completions_stop_strings_and_prefix_reuse(server):
    c = client(server)
    r = c.completions.create(model="x", prompt="a b c d", max_tokens=30)
    full = r.choices[0].text
    assert full and r.usage.completion_tokens == 30
    cut = full[5:9]
    r2 = c.completions.create(model="x", prompt="a b c d", max_tokens=30, stop=[cut])
    assert r2.choices[0].text == full[:full.find(cut)] and r2.choices[0].finish_reason == "stop"
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(model="x", prompt="a b c d",
                                                                         max_tokens=30, stop=cut, stream=True))
    assert streamed == r2.choices[0].text
    first = c.chat.completions.create(model="x", messages=MSGS, max_tokens=20)
    follow = c.chat.completions.create(model="x", max_tokens=20, messages=MSGS + [
        {"role": "assistant", "content": first.choices[0].message.content}, {"role": "user", "content": "More?"}])
    assert follow.model_extra["timings"]["cache_n"] > 10  # the conversation so far was not decoded again


def last_cancelled(server, before, timeout=60):
    """/health's last generation once it is a cancelled one. (The scheduler drops a sequence a moment
    before its last event reaches the server's loop, so `generating` falls to 0 while `last` is still
    the previous generation's: waiting on `generating` alone read a stale `last`.)"""
    t = time.time()
    while time.time() - t < timeout and (server.health()["last"] == before
                                            or server.health()["last"].get("finish") != "cancelled"):
        time.sleep(0.05)
    return server.health()["last"]


def test_a_client_that_goes_away_cancels_its_generation(server):
    before = server.health()["last"]
    with httpx.stream("POST", server.url + "/chat/completions", timeout=60,
                      json={"messages": MSGS, "max_tokens": 8000, "stream": True}) as r:
        lines = r.iter_lines()
        while not next(lines).startswith("data:"):
            pass
    last = last_cancelled(server, before)
    assert last["finish"] == "cancelled" and last["tokens"] < 8000


def test_a_client_that_goes_away_during_a_long_prefill_stops_it_before_any_token(server):
    """Found with coding agents: an agent that gave up while its 28k-token prompt was read left the
    server reading it to the end (minutes on a CPU) and generating its first token."""
    before = server.health()["last"]
    prompt = f"{time.time()} " + "wo rd " * 1300  # ~7.8k tokens, not cached: a prefill of seconds
    with pytest.raises(httpx.TimeoutException):
        httpx.post(server.url + "/chat/completions", timeout=0.5,
                   json={"messages": [{"role": "user", "content": prompt}], "max_tokens": 5})
    last = last_cancelled(server, before)
    assert last["finish"] == "cancelled" and last["tokens"] == 0


def test_a_full_queue_answers_503_and_errors_have_openai_shape(server):
    c = client(server)
    done = []

    def long():
        done.append(c.chat.completions.create(model="x", messages=MSGS, max_tokens=3000).choices[0].finish_reason)

    threads = [threading.Thread(target=long) for _ in range(2)]  # one runs, one waits (queue of 1)
    threads[0].start()
    wait_until(lambda: server.health()["generating"], what="the first request to run")
    threads[1].start()
    wait_until(lambda: server.health()["waiting"] >= 1, what="the second request to queue")
    with pytest.raises(openai.APIStatusError) as e:
        c.chat.completions.create(model="x", messages=MSGS, max_tokens=5)
    assert e.value.status_code == 503 and e.value.body["code"] == "queue_full"
    assert e.value.response.headers.get("retry-after") == "1"  # when to try again
    for t in threads:
        t.join()
    assert done == ["length", "length"]
    raw = httpx.post(server.url + "/chat/completions", content=b"{not json", timeout=10,
                     headers={"Content-Type": "application/json"})
    assert raw.status_code == 400 and "error" in raw.json() and "not valid JSON" in raw.json()["error"]["message"]
    big = httpx.post(server.url + "/chat/completions", content=b"x" * (5 * 2**20), timeout=30,
                     headers={"Content-Type": "application/json"})
    assert big.status_code == 413 and "larger than" in big.json()["error"]["message"]
    # max_tokens is a bound (agents ask for 32000 whatever the context): the reply ends with the context
    long = c.chat.completions.create(model="x", messages=MSGS, max_tokens=100000, stop=["w0000"])
    assert long.choices[0].finish_reason == "stop"
    with pytest.raises(openai.BadRequestError, match="messages"):
        c.chat.completions.create(model="x", messages=[], max_tokens=5)


def test_keys_and_addresses(tiny):
    out = subprocess.run([sys.executable, "-m", "engine", "serve", "-m", str(tiny["target"]), "--host", "0.0.0.0"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "needs --api-key" in out.stderr
    # any web page may use a server with --cors '*': only behind a key, as the README says
    out = subprocess.run([sys.executable, "-m", "engine", "serve", "-m", str(tiny["target"]), "--cors", "*"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--cors '*'" in out.stderr and "needs --api-key" in out.stderr
    assert out.stderr.count("\n") == 1  # one line, before anything loads
    s = Serve(tiny, "--api-key", "sekret", "--cors", "http://example.com", drafter=False)
    try:
        with pytest.raises(openai.AuthenticationError):
            client(s).models.list()
        # a browser asks first, without the key: the preflight must pass, or no page could ever use it
        pre = httpx.options(f"{s.url}/chat/completions", timeout=10, headers={
            "Origin": "http://example.com", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type, x-stainless-lang"})  # openai-node's
        assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "http://example.com"
        page = httpx.post(f"{s.url}/chat/completions", timeout=30, json={"messages": MSGS, "max_tokens": 2},
                          headers={"Origin": "http://example.com", "Authorization": "Bearer sekret"})
        assert page.status_code == 200 and page.headers["access-control-allow-origin"] == "http://example.com"
        assert client(s, "sekret").chat.completions.create(model="x", messages=MSGS, max_tokens=4).choices
        assert httpx.get(f"http://127.0.0.1:{s.port}/health").status_code == 200  # health needs no key
        # a model without a drafter drafts by lookup (asked for MTP by name, a 400: test_serve_refusals)
        r = httpx.post(f"{s.url}/chat/completions", timeout=30, headers={"Authorization": "Bearer sekret"},
                       json={"messages": MSGS, "max_tokens": 2, "tandem": {"spec": "lookup"}})
        assert r.status_code == 200 and r.json()["timings"]["predicted_n"] >= 1
    finally:
        s.stop()


def test_the_context_and_gpu_layers_left_to_it_are_chosen_from_the_memory_plan_and_said(tiny):
    from engine.local.llama import supports_gpu_offload

    s = Serve(tiny, ctx=None, drafter=False)
    try:
        props = httpx.get(f"http://127.0.0.1:{s.port}/props", timeout=10).json()
        assert props["default_generation_settings"]["n_ctx"] == 32768  # what fits of the wanted 32768
    finally:
        s.stop()
    log = s.proc.stdout.read().decode(errors="replace")
    line = next((x for x in log.splitlines() if x.startswith("Chose ")), log[-2000:])
    assert "a context of 32,768 tokens" in line and line.endswith("(--ctx and --gpu-layers to choose yourself)")
    assert ("layers on" if supports_gpu_offload() else "the CPU (no GPU that llama.cpp can use;") in line
    # both given: nothing was chosen; asked for a GPU there is not, the server says so
    s = Serve(tiny, "--gpu-layers", "0", "--drafter-gpu-layers", "all")
    s.stop()
    log = s.proc.stdout.read().decode(errors="replace")
    assert "Chose " not in log
    assert supports_gpu_offload() or "No GPU that llama.cpp can use: the GPU layers asked for run on the CPU" in log


def test_tandems_remote_backend_talks_to_tandem_serve(server):
    b = RemoteBackend(server.url)
    try:
        assert b.engine_name == "tandem" and b.can_switch_mtp and b.n_ctx == 8192
        out = {}
        for drafting in (True, False):  # Compare on one server: drafting per request
            text, ev = [], None
            for ev in b.chat(MSGS, GenerationConfig(max_tokens=40, spec="auto" if drafting else "none", draft_max=3)):
                text.append(ev.answer)
            out[drafting] = ("".join(text), ev.stats)
        assert out[True][0] == out[False][0]
        assert out[True][1].mode == "mtp" and out[True][1].accepted_tokens > 0
        assert out[False][1].mode == "baseline"
    finally:
        b.close()
    # --draft-max reaches tandem serve (auto may rightly pause drafting on this CPU after earlier requests)
    res = subprocess.run([sys.executable, "-m", "engine", "generate", "--server", server.url, "--json",
                          "--max-tokens", "20", "--draft-max", "3", "Hello"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0
    assert json.loads(res.stdout)["stats"]["draft_tokens"] > 0 and json.loads(res.stdout)["stats"]["draft_max"] == 3


def test_the_window_compares_on_one_tandem_server(qtbot, tmp_path, tiny, server):
    """Connected to `tandem serve`, the MTP switch works per request and Compare needs no second server."""
    from app.ui.dialogs.connections import Connection, save_connections

    from ..support.window import TIMEOUT, compare, make_window

    win = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7])
    save_connections(win.settings, [Connection("here", server.url, models=["tiny-target"], engine="tandem")])
    win.load_remote("here", "tiny-target")
    qtbot.waitUntil(lambda: win.session.model_info is not None and bool(win.session.model_info.remote), timeout=TIMEOUT)
    assert win.session.model_info.can_switch_mtp and win.compare_btn.isEnabled()
    win.draft_spin.setValue(3)  # sent per request; auto may pause drafting on this CPU
    page = compare(qtbot, win, "a b c d e f g")
    assert page.base.result.stats["mode"] == "baseline" and page.mtp.result.stats["mode"] == "mtp"
    assert page.base.result.answer == page.mtp.result.answer and "identical output" in page.verdict.text()
    win.close()


def test_bench_on_one_tandem_server(server, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "Hello world, this is a test"}\n{"prompt": "a b c d e f g"}\n')
    out = subprocess.run([sys.executable, "-m", "engine", "bench", "--server", server.url, "--prompts", str(prompts),
                          "--max-tokens", "40", "--draft-max", "3", "--json", str(tmp_path / "b.json")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    res = json.loads((tmp_path / "b.json").read_text())
    assert res["engine"] == res["baseline_engine"] == "tandem"
    assert res["baseline"]["draft_tokens"] == 0 and res["mtp"][0]["draft_tokens"] > 0
    assert res["mtp"][0]["identical"] == 2  # greedy: the same text with and without drafting
    assert res["mtp"][0]["draft_max"] == 3


def test_a_request_ending_never_stops_the_window_s_reply_beside_it(tiny):
    """The window's reply and an editor's requests decode together in one engine (the app's
    server switch). A request's end, whole or with its client gone mid-stream, stops its own
    sequence only: the window's reply beside it runs to its last token. (A request's clean-up
    once cancelled the whole engine, and the window's reply died after one token.)"""
    from engine.local.engine import Engine
    from engine.local.runtime import LoadOptions
    from engine.serve import BackgroundServer, ServerState

    engine = Engine.load(tiny["target"], tiny[1.0], LoadOptions(n_ctx=4096, n_seq=2))
    window: dict = {}
    streaming = threading.Event()

    def window_reply():
        ev = None
        for ev in engine.chat([{"role": "user", "content": "Count to a thousand"}], GenerationConfig(max_tokens=400)):
            streaming.set()
        window["finish"], window["tokens"] = ev.finish_reason, ev.stats.generated_tokens

    port = free_port()
    srv = BackgroundServer(ServerState(lambda: engine, "tiny-target", None, 4, "auto"), port=port)
    srv.start()
    t = threading.Thread(target=window_reply)
    try:
        t.start()
        assert streaming.wait(60)
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=60)
        r = c.chat.completions.create(model="tiny-target", max_tokens=16, messages=MSGS)
        assert r.choices[0].finish_reason in ("length", "stop")
        with c.chat.completions.create(model="tiny-target", max_tokens=300, messages=MSGS, stream=True) as s:
            next(iter(s))  # the client leaves mid-stream
        t.join(120)
        assert window == {"finish": "length", "tokens": 400}
    finally:
        srv.stop()
        engine.close()


SCHEMA = {"type": "object", "additionalProperties": False, "required": ["ok", "tag"],
          "properties": {"ok": {"type": "boolean"}, "tag": {"enum": ["alpha", "beta"]}}}


def test_response_format_json_schema_and_json_object(server):
    c = client(server)
    fmt = {"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA, "strict": True}}
    texts = []
    for mtp in (True, False):
        r = c.chat.completions.create(model="tiny-target", messages=[{"role": "user", "content": "a record"}],
                                      max_tokens=200, response_format=fmt, extra_body={"tandem": {"mtp": mtp}})
        obj = json.loads(r.choices[0].message.content)
        assert set(obj) == {"ok", "tag"} and obj["tag"] in ("alpha", "beta") and r.choices[0].finish_reason == "stop"
        texts.append(r.choices[0].message.content)
    assert texts[0] == texts[1]  # with drafting on and off: the same greedy JSON
    streamed = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
        model="tiny-target", messages=[{"role": "user", "content": "a record"}], max_tokens=200,
        response_format=fmt, stream=True) if ch.choices)
    assert streamed == texts[0]
    r = c.chat.completions.create(model="tiny-target", messages=[{"role": "user", "content": "any object"}],
                                  max_tokens=300, response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":  # a random model may write a long object; when it ends, it parses
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    assert r.choices[0].message.content.lstrip().startswith("{")


def test_without_strict_a_schema_is_enforced_as_far_as_it_can_be_and_the_reply_checked(server):
    """OpenAI's split (issue 46, item 4): strict refuses uniqueItems by name; without it the
    grammar enforces the rest, a header names what it did not, and the reply says whether it met it."""
    import openai

    c = client(server)
    schema = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 4,
              "uniqueItems": True}
    ask = dict(model="tiny-target", messages=[{"role": "user", "content": "numbers"}], max_tokens=40)
    fmt = {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
    with pytest.raises(openai.BadRequestError, match="uniqueItems"):
        c.chat.completions.create(**ask, response_format={**fmt, "json_schema": {**fmt["json_schema"], "strict": True}})
    raw = c.chat.completions.with_raw_response.create(**ask, response_format=fmt)
    assert raw.headers["x-tandem-schema-unenforced"] == "'uniqueItems' (at /)"
    r = raw.parse()
    check = r.model_extra["tandem"]["schema_check"][0]
    value = json.loads(r.choices[0].message.content)
    assert check["unenforced"] == ["'uniqueItems' (at /)"] and all(0 <= v <= 9 for v in value)  # the rest held
    assert check["valid"] == (len(set(value)) == len(value)), (check, value)
    last = [ch for ch in c.chat.completions.create(**ask, response_format=fmt, stream=True)][-1]
    assert last.model_extra["tandem"]["schema_check"][0]["valid"] == check["valid"]  # greedy: the same reply
    plain = c.chat.completions.with_raw_response.create(**ask, response_format={"type": "json_schema", "json_schema": {
        "name": "n", "schema": {**schema, "uniqueItems": False}}})
    assert "x-tandem-schema-unenforced" not in plain.headers and "tandem" not in (plain.parse().model_extra or {})


def test_completions_echo_the_prompt(server):
    plain = client(server).completions.create(model="tiny-target", prompt="Hello world", max_tokens=3)
    echoed = client(server).completions.create(model="tiny-target", prompt="Hello world", max_tokens=3, echo=True)
    assert echoed.choices[0].text == "Hello world" + plain.choices[0].text
    streamed = "".join(c.choices[0].text for c in client(server).completions.create(
        model="tiny-target", prompt="Hello world", max_tokens=3, echo=True, stream=True) if c.choices)
    assert streamed == echoed.choices[0].text


def test_errors_are_openai_shaped_models_by_id_and_the_first_chunk_says_the_role(server):
    for method, path, status in (("GET", "/v1/nowhere", 404), ("DELETE", "/v1/models", 405),
                                 ("GET", "/v1/models/not-this-one", 404)):
        r = httpx.request(method, f"http://127.0.0.1:{server.port}{path}", timeout=30)
        assert r.status_code == status and set(r.json()["error"]) >= {"message", "type", "code"}, r.text
    m = client(server).models.retrieve("tiny-target")
    assert m.id == "tiny-target" and m.object == "model"
    chunks = list(client(server).chat.completions.create(model="tiny-target", max_tokens=4, stream=True,
                                                          messages=[{"role": "user", "content": "hi"}]))
    assert chunks[0].choices[0].delta.role == "assistant"


def test_invalid_utf8_and_an_oversize_chunked_body_get_openai_shaped_errors(server):
    bad = httpx.post(server.url + "/chat/completions", timeout=10, headers={"Content-Type": "application/json"},
                     content=b'{"messages": [{"role": "user", "content": "\xff\xfe"}], "max_tokens": 2}')
    assert bad.status_code == 400 and set(bad.json()["error"]) >= {"message", "type", "param", "code"}, bad.text

    def body():  # no Content-Length: the limit must hold as the chunks arrive
        for _ in range(6):
            yield b"x" * 2**20

    big = httpx.post(server.url + "/chat/completions", content=body(), timeout=30,
                     headers={"Content-Type": "application/json"})
    assert big.status_code == 413 and set(big.json()["error"]) >= {"message", "type", "code"}, big.text


def test_draft_sources_per_request_and_lookup_counts_in_timings(server):
    """A reply that copies the prompt: lookup proposes it, timings say how much, and the text
    is the same with every source."""
    text = "alpha beta gamma delta epsilon zeta eta theta iota kappa " * 3
    msgs = [{"role": "user", "content": text}]
    out = {}
    for spec in ("none", "mtp", "lookup", "auto"):
        r = client(server).chat.completions.create(model="tiny-target", messages=msgs, max_tokens=40,
                                                   extra_body={"tandem": {"spec": spec}})
        out[spec] = (r.choices[0].message.content, r.model_extra["timings"])
    assert len({text for text, _ in out.values()}) == 1
    assert "draft_n" not in out["none"][1] and "draft_n_lookup" not in out["mtp"][1]
    assert out["lookup"][1].get("draft_n_lookup", 0) == out["lookup"][1].get("draft_n", 0)


def test_web_pages_are_refused_without_cors(server):
    """A page can POST a text/plain request without a preflight; it must not make the model run."""
    r = httpx.post(server.url + "/chat/completions", timeout=30, content=json.dumps({"messages": MSGS, "max_tokens": 2}),
                   headers={"Origin": "http://attacker.example", "Content-Type": "text/plain"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed", r.text
    assert httpx.get(server.url + "/models", timeout=10, headers={"Origin": "http://attacker.example"}).status_code == 403


def test_a_local_server_answers_only_requests_to_a_loopback_name(server):
    """DNS rebinding: a web page points a name of its own at 127.0.0.1 and its requests reach a
    keyless local server, carrying that name as Host. Those are refused; loopback names pass."""
    r = httpx.get(server.url + "/models", timeout=10, headers={"Host": "attacker.example"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "host_not_allowed", r.text
    for host in (f"localhost:{server.port}", f"127.0.0.1:{server.port}", f"[::1]:{server.port}"):
        assert httpx.get(server.url + "/models", timeout=10, headers={"Host": host}).status_code == 200, host


@pytest.mark.slow  # waits out the server's 10 s header deadline
def test_a_client_that_never_finishes_its_headers_is_let_go(server):
    from engine.serve import HEADER_TIMEOUT_S

    with socket.create_connection(("127.0.0.1", server.port), timeout=HEADER_TIMEOUT_S + 20) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and nothing more
        t = time.time()
        assert sock.recv(100) == b""  # closed by the server
        assert time.time() - t < HEADER_TIMEOUT_S + 15
    assert server.health()["status"] == "ok"


def test_a_queued_client_that_leaves_gives_up_its_place(server):
    """One generates, one waits (queue of 1); the waiting one disconnects: its place is free at
    once and its prompt is never decoded."""
    running = threading.Thread(target=lambda: client(server).chat.completions.create(
        model="x", messages=MSGS, max_tokens=1500))
    running.start()
    wait_until(lambda: server.health()["generating"], what="the long request to run")
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        body = json.dumps({"messages": MSGS, "max_tokens": 5}).encode()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        wait_until(lambda: server.health()["waiting"] >= 1, what="the second request to queue")
        assert server.health()["waiting"] == 1
    wait_until(lambda: not server.health()["waiting"], timeout=10, what="the place of the client that left to free")
    running.join()
    time.sleep(1)  # time for a queued prompt that was wrongly kept to run: its absence has no event to wait on
    last = server.health()["last"]  # the latest generation is the long one: the queued one never ran
    assert not server.health()["generating"] and last["tokens"] == 1500, last


def test_n_choices_wait_for_the_one_sequence_in_turn(server):
    """With --parallel 1 --queue 1, a request of n choices takes one place: its choices queue in
    the scheduler for the one sequence, and differ by their seeds."""
    r = client(server).chat.completions.create(model="x", messages=MSGS, max_tokens=12, n=3, temperature=1.0,
                                                seed=5)
    assert [c.index for c in r.choices] == [0, 1, 2] and r.usage.completion_tokens <= 36
    assert len({c.message.content for c in r.choices}) > 1
    ends = {}
    for chunk in client(server).chat.completions.create(model="x", messages=MSGS, max_tokens=12, n=2, stream=True):
        for ch in chunk.choices:
            if ch.finish_reason:
                ends[ch.index] = ch.finish_reason
    assert sorted(ends) == [0, 1]


def test_seed_minus_one_is_a_random_seed_as_on_llama_server(server):
    """It was a 400 in Python's words ("expected non-negative integer") once the sampler read it."""
    replies = [client(server).chat.completions.create(model="x", messages=MSGS, max_tokens=6, temperature=1.0, seed=-1)
               for _ in range(2)]
    assert all(r.choices[0].message.content for r in replies)


def _bomb() -> str:
    """A 1-bit 8000x8000 PNG: a few KB that decode to 192 MB of RGB (under the 64 MP cap)."""
    import base64
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("1", (8000, 8000)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def test_picture_bombs_are_refused_before_they_are_decoded(server, tiny):
    """Forty small picture bombs in one request once held the whole server for most of a minute
    (decoded on the event loop before anything checked for a projector). Now: a model without a
    projector refuses at once, one with it bounds the pictures and their pixels per request,
    and /health answers meanwhile."""
    bombs = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}] +
              [{"type": "image_url", "image_url": {"url": _bomb()}} for _ in range(40)]}]
    for path in ("/chat/completions", "/chat/completions/input_tokens"):
        r = httpx.post(server.url + path, json={"messages": bombs, "max_tokens": 4}, timeout=30)
        assert r.status_code == 400 and "no projector" in r.json()["error"]["message"], r.text
    s = Serve(tiny, "--mmproj", str(tiny["target"].parent / "mmproj-tiny.gguf"), drafter=False)
    try:
        r = httpx.post(s.url + "/chat/completions", json={"messages": bombs, "max_tokens": 4}, timeout=30)
        assert r.status_code == 400 and "at most 16" in r.json()["error"]["message"], r.text
        three = [{"role": "user", "content": bombs[0]["content"][:4]}]
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(httpx.post, s.url + "/chat/completions",
                                  json={"messages": three, "max_tokens": 4}, timeout=60)
            assert s.health()["status"] == "ok"  # the event loop is free while pictures decode
            r = pending.result()
        assert r.status_code == 400 and "megapixels all told" in r.json()["error"]["message"], r.text
        assert r.json()["error"]["param"] == "messages[0].content[3]"
    finally:
        s.stop()


# a schema whose grammar takes a while to build: the requests await between admission and start
# and whose every property is required and long: an admitted request does not finish (and give
# its place back) before the burst's slowest client arrives
SLOW = {"type": "object", "properties": {f"p{i}": {"type": "string", "pattern": "^[a-z]{30,40}$"} for i in range(40)},
        "required": [f"p{i}" for i in range(40)]}


def test_a_burst_larger_than_the_queue_gets_503s_beyond_its_bound(tiny):
    """30 requests at once against --parallel 1 --queue 1: two are admitted (one generating,
    one waiting), every other one gets a 503 with Retry-After. The admission's check and the
    count it reads were not one step: under such a burst 9 were admitted once. Every client
    holds its answer until all 30 have one: an admitted stream closed early gives its place
    back, and a request still on its way (30 threads on 2 busy cores) then rightly takes it."""
    s = Serve(tiny, "--parallel", "1", "--queue", "1", drafter=False)
    try:
        sent, answered = threading.Barrier(30), threading.Barrier(30, timeout=240)

        def one(_):
            sent.wait()
            with httpx.stream("POST", s.url + "/chat/completions", timeout=300, json={
                    "messages": MSGS, "max_tokens": 3000, "stream": True, "tandem": {"mtp": False},
                    "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SLOW}}}) as r:
                answered.wait()
                return r.status_code, r.headers.get("retry-after")
        with concurrent.futures.ThreadPoolExecutor(30) as pool:
            got = list(pool.map(one, range(30)))
    finally:
        s.stop()
    assert sorted(code for code, _ in got).count(200) == 2, got
    assert all(code == 503 and retry == "1" for code, retry in got if code != 200), got
