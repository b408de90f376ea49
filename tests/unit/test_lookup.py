"""The lookup draft source's n-gram index (no model: its proposals are plain list logic; the
end-to-end losslessness is in test_equivalence.py, the speed in scripts/bench_edits.py)."""

from __future__ import annotations

from engine.strategies.lookup import LONG_MATCH, NgramIndex



def test_proposes_what_followed_a_long_match():
    idx = NgramIndex()
    line = list(range(10, 20))  # ten tokens, then what followed them
    text = line + [5, 6, 9] + [3, 4] + line
    # the last ten tokens occurred at the start: what followed them there comes back
    assert idx.propose(text, 3) == [5, 6, 9]
    assert idx.propose([10, 11, 12], 3) == []  # nothing repeats (a fresh index)


def test_a_short_match_proposes_nothing():
    """Two to seven tokens in common are too weak a sign of a copy: measured on code edits,
    such proposals were rejected so often that they cost more than they saved."""
    src = list(range(100, 120))
    assert NgramIndex().propose(src + [1] + src[:LONG_MATCH - 1], 4) == []
    assert NgramIndex().propose(src + [1] + src[:LONG_MATCH], 4) == src[LONG_MATCH:LONG_MATCH + 4]


def test_follows_the_copy_instead_of_jumping_to_a_line_that_starts_alike():
    """Code repeats line starts: once the reply copies from one place, the next proposal goes
    on from there, not from the latest occurrence of the last few tokens."""
    head = list(range(50, 60))
    line_a = head + [1, 2, 3, 4]
    line_b = head + [1, 2, 9, 9]  # starts as line_a does
    src = [100] + line_a + line_b + [200]
    idx = NgramIndex()
    reply = src + [100] + head[:7]
    assert idx.propose(reply, 3) == [57, 58, 59]  # "100 50..56" matched the file's start
    reply += [57, 58, 59]  # accepted: the reply is copying line_a
    # the latest occurrence of the last tokens is line_b, whose continuation is wrong here
    assert idx.propose(reply, 4) == [1, 2, 3, 4]  # followed: line_a goes on
    fresh = NgramIndex()
    assert fresh.propose(reply, 4) == [1, 2, 9, 9]  # what the latest match alone would say


def test_never_proposes_a_pictures_positions_and_indexes_as_tokens_arrive():
    idx = NgramIndex()
    run = list(range(5, 15))
    text = run + [-3, -3, 8] + run
    assert idx.propose(text, 4) == []  # what followed the run is a picture: nothing to propose
    text += [1, 2] + run
    assert idx.propose(text, 2) == [1, 2]  # the latest occurrence (the one after the picture)
    assert idx.indexed == len(text) - 1  # every n-gram but the newest, once


def test_a_loop_is_proposed_past_the_end_of_the_text():
    """Small models fall into loops ("a_b_a_b_..."), and code repeats rows of equal items: when
    the copy reaches the end of the text it goes on copying what it proposes."""
    assert NgramIndex().propose([5] + [7, 8] * 5, 6) == [7, 8, 7, 8, 7, 8]
    assert NgramIndex().propose([5] + [6] * 10, 4) == [6, 6, 6, 6]
    assert NgramIndex().propose([3] + [7, 8, -2] * 4, 6) == [7, 8]  # never a picture's positions, looped or not
