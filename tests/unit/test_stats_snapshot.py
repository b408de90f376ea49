"""An event's stats are a snapshot (GenerationStats.snapshot): later changes to the live stats
of the generation do not reach it."""

from __future__ import annotations

from engine.stats import GenerationStats


def test_a_snapshot_keeps_the_numbers_it_was_taken_with():
    live = GenerationStats(mode="mtp", draft_max=3, prompt_tokens=5)
    live.generated_tokens, live.steps = 4, 2
    live.count_positions(3, 2)
    snap = live.snapshot()
    assert snap == live and snap is not live
    live.generated_tokens += 3
    live.count_positions(3, 3)
    live.finish_reason = "length"
    assert (snap.generated_tokens, snap.drafted_at, snap.accepted_at, snap.finish_reason) == (4, [1, 1, 1], [1, 1, 0], None)
    assert snap.footer() != live.footer()
