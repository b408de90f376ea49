"""Lookup drafting: text the reply copies from the prompt (a file being edited, a quoted
passage) or from itself is proposed by finding where the last few tokens occurred before and
offering the tokens that followed them there. No second model: it works for every model.

Only a long match proposes: the LONG_MATCH tokens before the place found must equal the last
ones of the text (a copy that has held goes on). Measured on the edit suite (Gemma 3 270M,
a 2-core CPU, where a verify row costs about a third of a decode), proposals after two to
four tokens in common were rejected so often that leaving them out made lookup faster on
edits (1.41x -> 1.64x of baseline, the two side by side in one run) and on prose (1.74x ->
1.86x); llama.cpp's n-gram modes likewise match 12 and 24 tokens.

`NgramIndex` keeps, for every run of LONG_MATCH tokens, the position that followed its latest
occurrence. It is brought up to date as tokens arrive (a dictionary update per new token,
never a scan of the context), and its size is bounded by the context: at most one entry per
position. One index follows one generation (prompt, then reply); a prompt of 8k tokens is
indexed in about 5 ms.
"""

from __future__ import annotations

from ..generation import MAX_LOOKUP_RUN

MAX_RUN = MAX_LOOKUP_RUN  # the longest proposal (a verify of run + 1 rows fits the output rows: MAX_OUTPUTS)
LONG_MATCH = 8  # tokens that must agree before the place a proposal is copied from


class NgramIndex:
    def __init__(self, n: int = LONG_MATCH):
        self.n = n
        self.after: dict[tuple, int] = {}  # n tokens -> the position after their latest occurrence
        self.indexed = 0  # n-grams ending before this position are in the index
        self._last: tuple[int, int] | None = None  # (where the last proposal was copied from, length then)

    def _catch_up(self, tokens: list[int], end: int) -> None:
        """Index the n-grams ending at positions indexed..end-1 (each maps to the position after it)."""
        n = self.n
        for i in range(max(self.indexed, n - 1), end):
            self.after[tuple(tokens[i + 1 - n:i + 1])] = i + 1
        self.indexed = max(self.indexed, end)

    def propose(self, tokens: list[int], max_len: int) -> list[int]:
        """Where a copy that has held goes on, else what followed the latest earlier occurrence
        of the last n tokens (the current end itself excluded), up to max_len tokens; [] when
        there is neither."""
        if max_len <= 0 or len(tokens) < self.n + 1:
            return []
        self._catch_up(tokens, len(tokens) - 1)  # every n-gram but the one ending at the last token
        start = self._following(tokens)
        if start is None:
            start = self.after.get(tuple(tokens[-self.n:]))
        if start is None or start >= len(tokens):
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
