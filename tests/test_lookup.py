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


def test_a_loop_is_proposed_past_the_end_of_the_text():
    """Small models fall into loops ("a_b_a_b_..."), and code repeats rows of equal items: when
    the copy reaches the end of the text it goes on copying what it proposes."""
    idx = NgramIndex()
    assert idx.propose([5, 7, 8, 7, 8], 6) == [7, 8, 7, 8, 7, 8]
    assert idx.propose([5, 6, 6, 6, 6, 6], 4) == [6, 6, 6, 6]
    assert NgramIndex().propose([3, 7, 8, -2, 7, 8], 6) == []  # never a picture's positions, looped or not


def test_tells_a_long_match_from_a_short_one():
    """Proposals after a long match (or a held copy) are accepted whole far more often than
    after two or three tokens in common: the controller learns them apart (`long`)."""
    src = list(range(100, 120))
    idx = NgramIndex()
    assert idx.propose(src + [1] + src[:3], 4) == src[3:7] and not idx.long  # three tokens in common
    idx = NgramIndex()
    assert idx.propose(src + [1] + src[:9], 4) == src[9:13] and idx.long  # nine
    held = src + [1] + src[:3] + src[3:7]  # the short match's proposal was accepted: a copy that holds
    idx = NgramIndex()
    idx.propose(src + [1] + src[:3], 4)
    assert idx.propose(held, 4) == src[7:11] and idx.following and idx.long
