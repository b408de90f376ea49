"""The lookup draft source's n-gram index (no model: its proposals are plain list logic; the
end-to-end losslessness is in test_equivalence.py, the speed in scripts/bench_edits.py)."""

from __future__ import annotations

from engine.strategies.lookup import NgramIndex


def test_proposes_what_followed_the_longest_match():
    idx = NgramIndex()
    text = [1, 2, 3, 4, 5, 6, 9, 3, 4, 7, 8, 1, 2, 3, 4]
    # the 4-gram 1 2 3 4 occurred at the start: what followed it there comes back
    assert idx.propose(text, 3) == [5, 6, 9]
    assert idx.propose([10, 11, 12], 3) == []  # nothing repeats (a fresh index)


def test_follows_the_copy_instead_of_jumping_to_a_line_that_starts_alike():
    """Code repeats line starts: once the reply copies from one place, the next proposal goes
    on from there, not from the latest occurrence of the last few tokens."""
    line_a = [50, 51, 52, 1, 2, 3, 4]
    line_b = [50, 51, 52, 1, 2, 9, 9]  # starts as line_a does
    src = [100] + line_a + line_b + [200]
    idx = NgramIndex()
    reply = src + [100, 50]
    assert idx.propose(reply, 3) == [51, 52, 1]  # "100 50" matched the file's start
    reply += [51, 52, 1]  # accepted: the reply is copying line_a
    # the latest occurrence of "50 51 52 1" is line_b, whose continuation is wrong here
    assert idx.propose(reply, 4) == [2, 3, 4, 50]  # followed: line_a goes on, then line_b's start
    fresh = NgramIndex()
    assert fresh.propose(reply, 4) == [2, 9, 9, 200]  # what the latest match alone would say


def test_never_proposes_a_pictures_positions_and_indexes_as_tokens_arrive():
    idx = NgramIndex()
    text = [5, 6, 7, -3, -3, 8, 5, 6, 7]
    assert idx.propose(text, 4) == []  # what followed 5 6 7 is a picture: nothing to propose
    text += [1, 2, 5, 6]
    assert idx.propose(text, 2) == [7, 1]  # the latest occurrence of "5 6" (the one after the picture)
    assert idx.indexed == len(text) - 1  # every n-gram but the newest, once
