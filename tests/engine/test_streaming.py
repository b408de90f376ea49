"""The streaming API: small events with text deltas, token origins, live stats, cancellation."""

from __future__ import annotations

import threading

from engine.local.engine import GenerationConfig
from engine.gemma4.text import TextAssembler


def test_events_carry_deltas_tokens_origins_and_stats(engine07):
    engine07.reset()
    prompt = engine07.tokenize("Hello world, this is a test")
    events = list(engine07.generate(prompt, GenerationConfig(max_tokens=40, draft_max=3)))
    assert events[-1].finish_reason == "length"
    assert all(ev.finish_reason is None for ev in events[:-1])
    tokens = [t for ev in events for t in ev.tokens]
    assert len(tokens) == 40
    # one event per verify step: several tokens when drafts were accepted
    assert len(events) < 40 and max(len(ev.pieces) for ev in events) > 1
    for ev in events:
        flags = [p.drafted for p in ev.pieces]
        # within a step: accepted drafts first, then the target's own token
        assert flags == sorted(flags, reverse=True)
    text = "".join(ev.answer for ev in events)
    assert text == engine07.detokenize(tokens)
    s = events[-1].stats
    assert s.generated_tokens == 40 and s.steps == len(events) - 1  # first event: prefill
    assert s.ttft_s > 0 and s.decode_tps > 0 and 0 <= s.acceptance_rate <= 1


def test_an_event_kept_keeps_the_numbers_it_was_made_with(engine07):
    """Each event's stats are a snapshot made with it: an event kept while the generation goes
    on still says how many tokens there were then (not the sequence's live, later numbers)."""
    engine07.reset()
    prompt = engine07.tokenize("Hello world, this is a test")
    kept = []
    for ev in engine07.generate(prompt, GenerationConfig(max_tokens=30, draft_max=3)):
        kept.append((ev, ev.stats.generated_tokens, ev.stats.steps, ev.stats.finish_reason))
    total = 0
    for ev, generated, steps, finish in kept:
        total += len(ev.tokens)
        assert ev.stats.generated_tokens == generated == total
        assert (ev.stats.steps, ev.stats.finish_reason) == (steps, finish)
    assert kept[0][0].stats.generated_tokens == 1 and kept[-1][0].stats.generated_tokens == 30


def test_text_is_utf8_safe_across_byte_tokens(engine07):
    text = "héllo ✓ 漢字 🙂"
    toks = engine07.tokenize(text, add_special=False, parse_special=False)
    assert len(toks) > len(text)  # multi-byte characters are spread over byte tokens
    asm = TextAssembler(engine07.piece, engine07.control_text)
    pieces = [asm.feed(t) for t in toks]
    out = "".join(p.text for p in pieces) + asm.flush()[0]
    assert out.lstrip(" ") == text  # SPM adds a leading space
    assert any(p.text == "" for p in pieces)  # mid-character tokens add nothing yet
    # an unfinished character at the very end becomes U+FFFD instead of raising
    asm = TextAssembler(engine07.piece, engine07.control_text)
    partial = "".join(asm.feed(t).text for t in engine07.tokenize("✓", False, False)[:-1])
    assert (partial + asm.flush()[0]).lstrip(" ") == "\ufffd"


def test_cancel_from_another_thread_stops_within_a_step_and_engine_stays_usable(engine07):
    engine07.reset()
    prompt = engine07.tokenize("zzz yyy xxx www")
    seen, cancelled_at, ended = [], [], threading.Event()

    def sink(ev):  # on the engine's thread, which waits here: nothing is decoded ahead of the reader
        seen.append(ev)
        if len(seen) == 5:
            other = threading.Thread(target=lambda: (engine07.cancel(), cancelled_at.append(len(seen))))
            other.start()
            other.join(10)  # cancelled before the next step
        if isinstance(ev, BaseException) or ev.finish_reason is not None:
            ended.set()

    stream = engine07.generate(prompt, GenerationConfig(max_tokens=100000, draft_max=3), sink=sink)
    assert ended.wait(30)
    assert seen[-1].finish_reason == "cancelled"
    assert cancelled_at == [5] and len(seen) <= cancelled_at[0] + 2  # at most the step in flight finished
    stream.close()
    # reusable, and its cache is consistent: continuing equals a fresh decode
    follow = prompt + [tok for ev in seen for tok in ev.tokens] + engine07.tokenize(" more", False, False)
    a = engine07.run(follow, GenerationConfig(max_tokens=16))
    assert a.stats.reused_tokens > len(prompt)
    engine07.reset()
    b = engine07.run(follow, GenerationConfig(max_tokens=16))
    assert a.tokens == b.tokens


def test_stop_at_end_of_turn(engine07):
    # The successor walk of the synthetic target reaches <turn|> (id 5) after id 4.
    engine07.reset()
    prompt = engine07.tokenize("<bos><|turn>", add_special=False, parse_special=True)
    r = engine07.run(prompt, GenerationConfig(max_tokens=20))
    assert r.finish_reason == "stop"
    assert r.tokens == [] and r.stats.generated_tokens == 0


def test_stopping_iteration_early_keeps_the_cache_consistent(engine07):
    engine07.reset()
    prompt = engine07.tokenize("a b c d e f g")
    gen = engine07.generate(prompt, GenerationConfig(max_tokens=200, draft_max=3))
    got = []
    for ev in gen:
        got += ev.tokens
        if len(got) > 20:
            break
    gen.close()  # the consumer walks away mid-reply
    follow = prompt + got + engine07.tokenize(" next", False, False)
    a = engine07.run(follow, GenerationConfig(max_tokens=12))
    assert a.stats.reused_tokens >= len(prompt) + len(got) - 1
    engine07.reset()
    assert engine07.run(follow, GenerationConfig(max_tokens=12)).tokens == a.tokens
