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


def test_one_undrafted_step_is_one_step():
    """The strip's draft label and a reply's Details, in the singular for one."""
    from app.core.help_text import acceptance_details

    s = GenerationStats(mode="mtp", draft_max="auto", steps=5, generated_tokens=9, draft_tokens=8, undrafted_steps=1)
    assert s.k_label().endswith(", 1 step undrafted)")
    assert "1 step without drafting" in acceptance_details(s.to_dict())
    s.undrafted_steps = 2
    assert s.k_label().endswith(", 2 steps undrafted)")
    assert "2 steps without drafting" in acceptance_details(s.to_dict())
