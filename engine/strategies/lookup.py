"""Lookup drafting: text the reply copies from the prompt (a file being edited, a quoted
passage) or from itself is proposed by finding where the last few tokens occurred before and
offering the tokens that followed them there. No second model: it works for every model.

Only a long match proposes: the LONG_MATCH tokens before the place found must equal the last
ones of the text (a copy that has held goes on). Measured on the edit suite
(Gemma 3 270M, a 2-core CPU, where a verify row costs about a third of a decode), proposals
after two to four tokens in common were rejected so often that leaving them out made lookup
faster on edits (1.41x -> 1.64x of baseline) and on prose (1.74x -> 1.86x); llama.cpp's n-gram
modes likewise match 12 and 24 tokens.

`NgramIndex` keeps, for every run of LONG_MATCH tokens, the position that followed its latest
occurrence. It is brought up to date as tokens arrive (a dictionary update per new token,
never a scan of the context), and its size is bounded by the context: at most one entry per
position. One index follows one generation (prompt, then reply); a prompt of 8k tokens is
indexed in a few milliseconds.
"""

from __future__ import annotations

MAX_RUN = 47  # the longest proposal (a verify of run + 1 rows fits the output rows: MAX_OUTPUTS)
LONG_MATCH = 8  # tokens that must agree before the place a proposal is copied from
NGRAM_MIN = NGRAM_MAX = LONG_MATCH  # so the index finds the latest long match directly


class NgramIndex:
    def __init__(self, n_min: int = NGRAM_MIN, n_max: int = NGRAM_MAX):
        self.n_min, self.n_max = n_min, n_max
        self.after: dict[int, dict[tuple, int]] = {n: {} for n in range(n_min, n_max + 1)}
        self.indexed = 0  # n-grams ending before this position are in the index
        self._last: tuple[int, int] | None = None  # (where the last proposal was copied from, length then)
        self.following = False  # the last proposal went on with a copy that has held (see _following)

    def _catch_up(self, tokens: list[int], end: int) -> None:
        """Index the n-grams ending at positions indexed..end-1 (each maps to the position after it)."""
        for i in range(self.indexed, end):
            for n in range(self.n_min, self.n_max + 1):
                if i + 1 >= n:
                    self.after[n][tuple(tokens[i + 1 - n:i + 1])] = i + 1
        self.indexed = max(self.indexed, end)

    def propose(self, tokens: list[int], max_len: int) -> list[int]:
        """What followed the latest earlier occurrence of the longest matching suffix of
        `tokens` (the current end itself excluded), up to max_len tokens; [] when none matches
        or the match is short (fewer than LONG_MATCH tokens agree before it)."""
        if max_len <= 0 or len(tokens) < self.n_min + 1:
            return []
        self._catch_up(tokens, len(tokens) - 1)  # every n-gram but the ones ending at the last token
        start = self._following(tokens)
        self.following = start is not None
        for n in range(min(self.n_max, len(tokens)), self.n_min - 1, -1):
            if start is not None:
                break
            start = self.after[n].get(tuple(tokens[-n:]))
        if start is None or start >= len(tokens) or self._matched(tokens, start) < LONG_MATCH:
            self._last = None
            return []
        self._last = (start, len(tokens))
        run = tokens[start:start + max_len]
        period = len(tokens) - start
        if len(run) < max_len and period > 0:
            # the copy reaches the end of the text: it goes on copying what it proposes (a
            # loop, a row of equal items), so the run repeats with that period
            run += [run[i % period] for i in range(len(run), max_len)]
        cut = next((i for i, t in enumerate(run) if t < 0), len(run))  # never a picture's positions
        return run[:cut]

    def _following(self, tokens: list[int]) -> int | None:
        """Where the text is still being copied from: if every token since the last proposal
        matched its source, the copy goes on there (the latest occurrence of the last few
        tokens may be another line that starts alike, as code's lines often do)."""
        if self._last is None:
            return None
        start, then = self._last
        new = len(tokens) - then
        if new <= 0 or start + new >= then or tokens[then:] != tokens[start:start + new]:
            return None
        return start + new

    @staticmethod
    def _matched(tokens: list[int], start: int) -> int:
        """How many tokens before `start` equal the last ones of the text (up to LONG_MATCH)."""
        m, end = 0, len(tokens)
        while m < LONG_MATCH and m < start and tokens[start - 1 - m] == tokens[end - 1 - m]:
            m += 1
        return m
