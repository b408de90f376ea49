"""The remote backend against a real llama-server (built from the vendored llama.cpp, running the
synthetic Gemma 4 pair with --spec-type draft-mtp), and against recorded vLLM / Ollama payloads."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from engine.backends.remote import RemoteBackend, RemoteError, parse_metrics
from engine.local.engine import GenerationConfig

from ..support.llamaserver import LlamaServer, free_port
from ..support.recordedserver import RecordedServer

MSGS = [{"role": "user", "content": "Hello world, this is a test"}]


def _run(backend, config=GenerationConfig(max_tokens=60), messages=MSGS, **kw):
    text, last = [], None
    for ev in backend.chat(messages, config, **kw):
        text.append(ev.answer)
        last = ev
    return "".join(text), last.stats


def test_llama_server_drafts_match_its_own_counters(mtp_server):
    b = RemoteBackend(mtp_server.url)
    try:
        assert b.engine_name == "llama-server" and b.n_ctx == 2048
        before = parse_metrics(mtp_server.metrics())
        text, s = _run(b)
        after = parse_metrics(mtp_server.metrics())
        assert text and s.generated_tokens >= 2 and s.finish_reason in ("length", "stop")
        assert s.drafts_reported and s.mode == "mtp" and s.engine == "llama-server"
        assert s.draft_tokens == after.draft_tokens - before.draft_tokens > 0
        assert s.accepted_tokens == after.accepted_tokens - before.accepted_tokens
        assert 0 <= s.acceptance_rate <= 1 and s.decode_tps > 0 and s.ttft_s > 0
        assert s.per_position_acceptance and all(0 <= v <= 1 for v in s.per_position_acceptance)
        assert "accepted" in s.footer() and "on llama-server" in s.footer()
        assert b.has_mtp is True and b.mtp_reason == ""  # seen in the reply
    finally:
        b.close()


def test_cli_generate_against_the_server(mtp_server):
    before = parse_metrics(mtp_server.metrics())
    out = subprocess.run([sys.executable, "-m", "engine", "generate", "--server", mtp_server.url, "--json",
                          "--max-tokens", "40", "Hello world"], capture_output=True, text=True, timeout=120)
    after = parse_metrics(mtp_server.metrics())
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["engine"] == "llama-server" and r["text"]
    assert r["stats"]["draft_tokens"] == after.draft_tokens - before.draft_tokens > 0
    assert r["stats"]["accepted_tokens"] == after.accepted_tokens - before.accepted_tokens


@pytest.mark.slow  # a long reply streamed from llama-server, stopped, and the server checked after
def test_stop_is_immediate_while_the_server_streams(mtp_server):
    b = RemoteBackend(mtp_server.url)
    try:
        events = b.chat(MSGS, GenerationConfig(max_tokens=1900))
        next(iter(events))
        t = time.perf_counter()
        b.cancel()
        last = list(events)[-1]
        assert last.finish_reason == "cancelled" and time.perf_counter() - t < 1.0
        text, s = _run(b, GenerationConfig(max_tokens=8))  # the server is free again
        assert text and s.finish_reason in ("length", "stop")
    finally:
        b.close()


def test_errors_in_words(llama_server_bin, tiny, tmp_path):
    with pytest.raises(RemoteError, match="Cannot reach a server"):
        RemoteBackend(f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(RemoteError, match="not a server address"):
        RemoteBackend("ftp://example.org")
    srv = LlamaServer(llama_server_bin, tiny["target"], api_key="s3cret", log=tmp_path / "key.log")
    try:
        with pytest.raises(RemoteError, match="refused the API key"):
            RemoteBackend(srv.url)
        with pytest.raises(RemoteError, match="refused the API key"):
            RemoteBackend(srv.url, api_key="wrong")
        with pytest.raises(RemoteError, match="has no model 'nope'"):
            RemoteBackend(srv.url, api_key="s3cret", model="nope")
        with pytest.raises(RemoteError, match="no OpenAI-compatible API"):
            RemoteBackend(srv.url.replace("/v1", "/nothing/here/v1"), api_key="s3cret")
        b = RemoteBackend(srv.url, api_key="s3cret")
        assert b.has_mtp is None and "not known yet" in b.mtp_reason
        text, s = _run(b, GenerationConfig(max_tokens=8))
        assert text and s.mode == "baseline"  # the server's counters say it drafted nothing
        assert b.has_mtp is False and "reports no drafting" in b.mtp_reason
        b.close()
    finally:
        srv.stop()


def test_a_connection_dropped_mid_reply_keeps_the_text_so_far(llama_server_bin, tiny, tmp_path):
    srv = LlamaServer(llama_server_bin, tiny["target"], log=tmp_path / "drop.log")
    b = RemoteBackend(srv.url)
    got = []
    try:
        with pytest.raises(RemoteError):
            for ev in b.chat(MSGS, GenerationConfig(max_tokens=1900)):
                got.append(ev.answer)
                if len(got) == 3:
                    threading.Thread(target=srv.proc.kill).start()
        assert "".join(got)  # the reply so far arrived before the error
    finally:
        b.close()
        srv.stop()


def test_vllm_per_request_metrics_and_counters():
    srv = RecordedServer("vllm")
    try:
        b = RemoteBackend(srv.url.replace("/v1", ""))  # the /v1 is added
        assert b.engine_name == "vllm" and b.n_ctx == 32768 and b.model == "google/gemma-4-31B-it"
        text, s = _run(b, GenerationConfig(max_tokens=6), enable_thinking=True)
        assert text == "The sky is blue because air" and s.finish_reason == "length"
        assert (s.draft_tokens, s.accepted_tokens, s.generated_tokens) == (12, 7, 6)
        assert s.mode == "mtp" and abs(s.acceptance_rate - 7 / 12) < 1e-9
        # from the response's histogram [0, 1, 1, 0, 1] over 3 drafts: 3, 2, 1, 1 accepted at 1..4
        assert s.per_position_acceptance == [1.0, 2 / 3, 1 / 3, 1 / 3]
        req = srv.requests[-1]
        assert req["stream_options"] == {"include_usage": True}
        assert req["chat_template_kwargs"] == {"enable_thinking": True}
        b.close()
    finally:
        srv.stop()


def test_a_server_that_reports_no_drafts_says_so_never_zero():
    srv = RecordedServer("ollama", model="gemma4:e4b", api_key="k")
    try:
        b = RemoteBackend(srv.url, api_key="k")
        assert b.engine_name == "ollama"
        text, s = _run(b, GenerationConfig(max_tokens=10))
        assert text.endswith("waves.") and s.finish_reason == "stop"
        assert not s.drafts_reported and s.acceptance_rate is None and s.mode == "remote"
        assert "drafts not reported by ollama" in s.footer() and "0 %" not in s.footer()
        d = s.to_dict()
        assert d["acceptance_rate"] is None and d["engine"] == "ollama"
        with pytest.raises(RemoteError, match="has no model"):
            RemoteBackend(srv.url, api_key="k", model="gemma4:31b")
    finally:
        srv.stop()


@pytest.mark.slow  # starts two llama-servers and benches each
def test_cli_bench_against_two_servers(tmp_path):
    """bench --server (with drafter) --baseline-server (without): the local JSON keys plus engine."""
    mtp, base = RecordedServer("vllm"), RecordedServer("ollama", model="google/gemma-4-31B-it")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "Why is the sky blue?"}\n{"prompt": "Say why."}\n')
    try:
        out = subprocess.run([sys.executable, "-m", "engine", "bench", "--server", mtp.url, "--baseline-server",
                              base.url, "--prompts", str(prompts), "--max-tokens", "10",
                              "--json", str(tmp_path / "b.json")], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        res = json.loads((tmp_path / "b.json").read_text())
        assert res["engine"] == "vllm" and res["baseline_engine"] == "ollama"
        m = res["mtp"][0]
        assert m["identical"] == 2 and m["draft_tokens"] == 24 and m["accepted_tokens"] == 14
        assert res["baseline"]["decode_tps"] > 0 and m["speedup"] is not None
        assert "speed-up" in out.stdout
        bad = subprocess.run([sys.executable, "-m", "engine", "bench", "--server", mtp.url],
                             capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and "--baseline-server" in bad.stderr and "Traceback" not in bad.stderr
    finally:
        mtp.stop()
        base.stop()


def test_stop_is_immediate_while_a_slow_server_says_nothing():
    srv = RecordedServer("ollama", model="m", stall_s=30)
    try:
        b = RemoteBackend(srv.url)
        events = b.chat(MSGS, GenerationConfig(max_tokens=5))
        threading.Timer(0.3, b.cancel).start()
        t = time.perf_counter()
        last = list(events)[-1]
        assert last.finish_reason == "cancelled" and time.perf_counter() - t < 2.0
        b.close()
    finally:
        srv.stop()
