"""The prompt cache keeps every conversation: more conversations than slots, side requests,
edits and retries between them. Each request decodes only what it does not share with a
cached conversation (down to the nearest checkpoint of the sliding-window layers), and every
reply equals a fresh engine's, baseline and MTP.

The sliding-window cache is made small (n_ubatch 16: 256 cells for the tiny model's window of
16, two slots), so each conversation's old cells are recycled by the others, as Gemma 4's are
by an agent's long prompts.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.local.engine import Engine, GenerationConfig
from engine.local.prompt_cache import CHECKPOINT_BEFORE_END, MIN_SAVED, checkpoint_marks
from engine.local.runtime import LoadOptions

OPTS = LoadOptions(n_batch=16, n_ubatch=16, n_ctx=4096, n_seq=2, cache_disk_mib=-1)
WORDS = "Hello world, this is a test of the sliding window cache and the model draft token speed "


def conversation(engine, topic: int, turns: int = 1, edit: str | None = None) -> list[dict]:
    msgs = [{"role": "system", "content": f"System prompt number {topic}. " + WORDS * 8},
            {"role": "user", "content": edit or f"First question {topic} " + WORDS * 6}]
    for t in range(1, turns):
        msgs += [{"role": "assistant", "content": f"Answer {t} " + WORDS},
                 {"role": "user", "content": f"Question {t + 1} " + WORDS * 2}]
    return msgs


@pytest.fixture(scope="module")
def pair(noisy):
    return noisy["target"], noisy[1.0]


@pytest.fixture(autouse=True)
def own_disk_cache(tmp_path, monkeypatch):
    """Each test its own disk cache: what another test's engines saved is not there."""
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "prompt-cache"


@pytest.fixture(scope="module")
def fresh(pair):
    """A cold engine's answer to a prompt (its caches emptied before each; none on disk)."""
    engine = Engine.load(*pair, replace(OPTS, cache_disk_mib=0))
    assert engine.host_cache.disk is None
    answers = {}

    def answer(prompt: list[int], drafting: bool) -> list[int]:
        key = (tuple(prompt), drafting)
        if key not in answers:
            engine.reset()
            answers[key] = run(engine, prompt, drafting).tokens
        return answers[key]
    yield answer
    engine.close()


def run(engine, prompt, drafting):
    return engine.run(prompt, GenerationConfig(max_tokens=24, spec="auto" if drafting else "none", draft_max=3))


@pytest.mark.parametrize("drafting", [False, True])
def test_conversations_side_requests_and_edits_keep_their_caches(pair, fresh, drafting):
    engine = Engine.load(*pair, OPTS)
    try:
        assert engine.rt.n_swa > 0 and engine.host_cache is not None
        prompts = {k: engine.format_chat(conversation(engine, k)) for k in (1, 2)}
        # a side request (an agent's title call): another system prompt, long enough to keep
        side = engine.format_chat([{"role": "system", "content": "Write a title."},
                                   {"role": "user", "content": WORDS * 4}])
        assert len(side) >= MIN_SAVED

        def ask(prompt):
            r = run(engine, prompt, drafting)
            assert r.tokens == fresh(prompt, drafting)  # the same reply as a cold engine's
            return r.stats.reused_tokens

        assert ask(prompts[1]) == 0
        assert ask(prompts[2]) == 0
        assert ask(side) == 0  # a third conversation in two slots: one goes to the host cache
        # each long conversation comes back: a retry restores the checkpoint before its end
        for k in (1, 2, 1):
            assert ask(prompts[k]) >= len(prompts[k]) - CHECKPOINT_BEFORE_END, k
        # the next turn of each reads again from the generation prompt of the last (the
        # history renders it without the empty thought channel the generation prompt opens)
        turn = engine.scheduler.turn_token
        for k in (1, 2):
            longer = engine.format_chat(conversation(engine, k, turns=2))
            assert ask(longer) >= max(i for i, t in enumerate(prompts[k]) if t == turn), k
            assert ask(side) >= len(side) - CHECKPOINT_BEFORE_END
        # the first user message edited: reads again from its turn's checkpoint, no earlier
        edited = engine.format_chat(conversation(engine, 1, edit="An edited first question"))
        parting = next(i for i, (a, b) in enumerate(zip(prompts[1], edited)) if a != b)
        assert ask(edited) == max(m for m in checkpoint_marks(prompts[1], 0, engine.scheduler.turn_token)
                                  if m <= parting)
        # and the conversation before the edit is still there (the host cache kept it): its
        # second turn sent again
        longer = engine.format_chat(conversation(engine, 1, turns=2))
        assert ask(longer) >= len(longer) - CHECKPOINT_BEFORE_END
        events = engine.cache_counts.events
        assert events["checkpoint_restores"] > 0 and events["host_hits"] > 0 and events["slot_hits"] > 0
        assert not events["checkpoint_failures"] and not events["host_failures"]
    finally:
        engine.close()


def test_idle_conversations_leave_the_cache_while_another_is_read(pair, fresh):
    """A long prompt read in one slot while another slot's conversation is idle: the idle one
    goes to the host cache and leaves the target's cache (its cells would widen every step's
    attention over the unified cache: llama.cpp's CPU kernels scan the mask of every cell, so
    an agent's 18k-token conversation kept idle made a second agent's prompt read 1.6x slower),
    and comes back from the host cache when its conversation does."""
    engine = Engine.load(*pair, OPTS)
    try:
        a, b = (engine.format_chat(conversation(engine, k)) for k in (1, 2))
        run(engine, a, False)
        slot_a = next(s for s in engine.scheduler.slots if s.cached)
        r = run(engine, b, False)
        assert r.tokens == fresh(b, False)
        assert not slot_a.cached and engine.rt.target.pos_min(slot_a.seq) == -1
        assert engine.cache_counts.events["idle_parked"] == 1
        r = run(engine, a, True)
        assert r.tokens == fresh(a, True) and r.stats.reused_tokens >= len(a) - CHECKPOINT_BEFORE_END
        assert engine.cache_counts.events["host_hits"] == 1
        # a retry in its own slot with a few new tokens parks nothing
        parked = engine.cache_counts.events["idle_parked"]
        run(engine, a, False)
        assert engine.cache_counts.events["idle_parked"] == parked
    finally:
        engine.close()


def test_the_host_cache_stays_within_its_bound(pair):
    """Many different conversations through two slots and a 1 MiB host cache: the oldest go."""
    engine = Engine.load(*pair, LoadOptions(n_batch=16, n_ubatch=16, n_ctx=4096, n_seq=2, cache_ram_mib=1))
    try:
        for k in range(12):
            run(engine, engine.format_chat(conversation(engine, k)), False)
            assert engine.cache_counts.host_bytes <= 1 << 20
        assert engine.cache_counts.events["host_evictions"] > 0
        assert engine.cache_counts.host_entries >= 1
    finally:
        engine.close()


def test_no_host_cache_when_turned_off(pair):
    engine = Engine.load(*pair, LoadOptions(n_batch=16, n_ubatch=16, n_ctx=4096, n_seq=2, cache_ram_mib=0))
    try:
        assert engine.host_cache is None
        for k in (1, 2, 3, 1):
            run(engine, engine.format_chat(conversation(engine, k)), False)
        assert engine.cache_counts.events["host_hits"] == 0
    finally:
        engine.close()


def test_a_restart_reads_nothing_again_and_bad_files_are_refused(pair, fresh, own_disk_cache):
    """What the slots and the host cache held is on disk when the engine closes; the next
    engine of the same files answers from it. A corrupt file, one of other model files and a
    stray file are refused and removed, and the prompt is read in full instead."""
    engine = Engine.load(*pair, OPTS)
    prompts = [engine.format_chat(conversation(engine, k)) for k in (1, 2, 3)]
    for p in prompts:
        run(engine, p, False)
    engine.close()
    files = sorted(own_disk_cache.glob("*/*.state"))  # one folder: these model files
    assert len(files) == 3
    folder = files[0].parent

    engine = Engine.load(*pair, OPTS)
    try:
        for p in prompts[:2]:
            r = run(engine, p, True)
            assert r.stats.reused_tokens >= len(p) - CHECKPOINT_BEFORE_END
            assert r.tokens == fresh(p, True)
        assert engine.cache_counts.events["disk_restores"] == 2
    finally:
        engine.close()

    # spoilt three ways: conversation 3's state bytes, conversation 2's file saying it was
    # saved for other model files, and a file that is no cache at all
    by_prompt = {tuple(_tokens_of(f)[:len(prompts[0]) - 8]): f for f in folder.glob("*.state")}
    third, second = (by_prompt[tuple(p[:len(prompts[0]) - 8])] for p in (prompts[2], prompts[1]))
    raw = bytearray(third.read_bytes())
    raw[-100] ^= 0xFF
    third.write_bytes(bytes(raw))
    raw = second.read_bytes()
    key = folder.name.encode()
    second.write_bytes(raw.replace(key, b"f" * len(key), 1))
    (folder / "junk.state").write_bytes(b"not a cache file")
    engine = Engine.load(*pair, OPTS)
    try:
        assert not (folder / "junk.state").exists() and not second.exists()  # refused on reading the folder
        r = run(engine, prompts[2], False)
        assert r.stats.reused_tokens == 0 and r.tokens == fresh(prompts[2], False)
        assert not third.exists()  # refused when its state did not match its checksum
        assert engine.cache_counts.events["disk_refused"] == 3
        r = run(engine, prompts[0], False)  # the good one still answers from disk
        assert r.stats.reused_tokens >= len(prompts[0]) - CHECKPOINT_BEFORE_END
    finally:
        engine.close()


def _tokens_of(path):
    import json
    import struct

    import numpy as np

    raw = path.read_bytes()
    n = struct.unpack("<I", raw[10:14])[0]
    head = json.loads(raw[14:14 + n])
    return np.frombuffer(raw[14 + n:14 + n + 4 * head["n_tokens"]], dtype="<i4").tolist()


def test_checkpoints_are_thinned_over_the_whole_prompt():
    """An agent's many turns add checkpoints; the ones kept still cover the start (an edit of
    the first message) and the newest two (a retry, the next turn)."""
    from engine.local.prompt_cache import Checkpoint, thin_checkpoints

    cks = [Checkpoint(n, bytearray()) for n in [2048, 4096, 6144, 8192, 10240, 12077]]
    for turn in range(12):  # each turn: its tool result's turn, the generation prompt, the end
        base = 12077 + 1260 * (turn + 1)
        cks += [Checkpoint(base - 30, bytearray()), Checkpoint(base - 8, bytearray()), Checkpoint(base - 4, bytearray())]
        thin_checkpoints(cks, 16)
        assert len(cks) <= 16 and [c.n_tokens for c in cks] == sorted(c.n_tokens for c in cks)
    kept = [c.n_tokens for c in cks]
    assert kept[0] == 2048 and kept[-2:] == [base - 8, base - 4]
    assert max(b - a for a, b in zip(kept, kept[1:])) < 4 * 1260  # no long stretch without one
