"""A real `tandem serve` (two sequences, the tiny pair over Gemma 4's real tokenizer and chat
template) keeps every conversation: two long conversations and a side request interleaved,
more conversations than sequences, a retry after another conversation, an edit of an earlier
message, and a restart. Each request's `cached_tokens` is what it shares with a cached
conversation (down to the nearest checkpoint), and every reply is a cold server's (greedy)."""

from __future__ import annotations

import httpx2 as httpx
import openai
import pytest

from ..support.serve import Serve

TEXT = ("The lighthouse keeper counted the ships that passed each night, wrote their names in a "
        "ledger and trimmed the lamp before dawn. ")


def conversation(topic: int, turns: int = 1, first: str | None = None) -> list[dict]:
    msgs = [{"role": "system", "content": f"You are agent number {topic}. " + TEXT * 70},
            {"role": "user", "content": first or f"Question {topic}: " + TEXT * 20}]
    for t in range(1, turns):
        msgs += [{"role": "assistant", "content": f"Answer {t}. " + TEXT},
                 {"role": "user", "content": f"Follow-up {t}: " + TEXT * 3}]
    return msgs


SIDE = [{"role": "system", "content": "Write a five-word title for this conversation."},
        {"role": "user", "content": TEXT * 12}]  # ~330 tokens: kept (shorter ones are read again)


def ask(server, messages):
    c = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=120)
    r = c.chat.completions.create(model="g", messages=messages, max_tokens=12, temperature=0,
                                  extra_body={"tandem": {"mtp": False}})
    return r.choices[0].message.content, r.usage.prompt_tokens_details.cached_tokens, r.usage.prompt_tokens


def slots(server) -> list[dict]:
    return httpx.get(server.url.removesuffix("/v1") + "/slots", timeout=10).json()


@pytest.fixture
def cold(real_vocab, tmp_path, monkeypatch):
    """Replies of a server that keeps only its one sequence's last request (no prompt cache
    beyond it, as before there was one)."""
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path / "cold-cache"))
    server = Serve(real_vocab, "--parallel", "1", "--cache-ram", "0", "--no-disk-cache", drafter=False)
    answers = {}

    def answer(messages):
        key = repr(messages)
        if key not in answers:
            answers[key] = ask(server, messages)[0]
        return answers[key]
    yield answer
    server.stop()


def test_every_conversation_is_kept_across_side_requests_edits_and_a_restart(real_vocab, cold, tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path / "cache"))
    server = Serve(real_vocab, "--parallel", "2", drafter=False)
    try:
        def check(messages, least: int, most: int | None = None) -> int:
            text, cached, total = ask(server, messages)
            assert text == cold(messages)  # the same reply as a server that kept nothing
            assert least <= cached <= (total - 1 if most is None else most), (cached, least, total)
            return total

        a, b = conversation(1), conversation(2)
        n_a = check(a, 0, 0)
        assert n_a > 2000  # long enough that the sliding window's cells are recycled
        n_b = check(b, 0, 0)
        n_side = check(SIDE, 0, 0)  # a third conversation in two sequences
        # while the side request was read, the idle conversations went to the memory cache (their
        # cells would slow its reading): no slot holds a or b now, the memory cache holds both
        assert all(s["n_prompt_tokens"] < n_b for s in slots(server))
        props = httpx.get(server.url.removesuffix("/v1") + "/props", timeout=10).json()["tandem"]["prompt_cache"]
        assert props["ram_entries"] >= 2
        n_a2 = check(conversation(1, turns=2), n_a - 40)  # a came back, its next turn read only the new part
        check(b, n_b - 4)  # a retry of b after the others
        check(SIDE, n_side - 4)  # the side request came back too
        edited = conversation(1, turns=2, first="An edited first question.")
        check(edited, 1000, n_a - 200)  # reads again from the edited turn, not from the start
        check(conversation(1, turns=2), n_a2 - 4)  # the conversation before the edit is still there
        metrics = httpx.get(server.url.removesuffix("/v1") + "/metrics", timeout=10).text
        for event in ("checkpoint_restores", "host_hits"):
            line = next(x for x in metrics.splitlines() if f'event="{event}"' in x)
            assert float(line.split()[-1]) > 0, line
    finally:
        server.stop()
    # a restart: the first requests answer from the disk cache
    server = Serve(real_vocab, "--parallel", "2", drafter=False)
    try:
        check(b, n_b - 4)
        check(conversation(1, turns=2), n_a2 - 4)
        props = httpx.get(server.url.removesuffix("/v1") + "/props", timeout=10).json()["tandem"]["prompt_cache"]
        assert props["disk_entries"] >= 2 and props["disk_bytes"] <= props["disk_bytes_max"]
    finally:
        server.stop()


def test_what_the_sequences_hold_is_on_disk_after_the_server_is_stopped(real_vocab, tmp_path, monkeypatch):
    """One conversation, nothing else: `tandem serve` stopped as a service manager stops it
    (SIGTERM) saves what its sequences hold, and the next start answers from it."""
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path / "cache"))
    messages = conversation(1)
    server = Serve(real_vocab, drafter=False)
    try:
        _, cached, total = ask(server, messages)
        assert cached == 0
    finally:
        server.stop()
    assert server.proc.returncode == 0  # a clean exit, not killed by its signal
    server = Serve(real_vocab, drafter=False)
    try:
        _, cached, total = ask(server, messages)
        assert cached >= total - 4
    finally:
        server.stop()
