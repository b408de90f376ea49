"""Emitted tokens -> visible text, one token at a time.

UTF-8 safe: a character split over several byte tokens appears once it is complete
(an incremental decoder), and invalid bytes become U+FFFD rather than an exception.
Control tokens are hidden; Gemma 4's channel markers switch between answer and thinking.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Callable

from .chat import CHANNEL_CLOSE, CHANNEL_OPEN, ChannelSplitter


@dataclass
class TokenPiece:
    id: int
    text: str  # visible text this token added (may be "" mid UTF-8 character)
    drafted: bool | None  # True: a draft the target accepted; None: not known (a server)
    channel: str  # "answer", "thinking" or "control"
    marker: str = ""  # a control token's text ("<|tool_call>"): hidden from the text, there for parsers
    logprob: "TokenLogprob | None" = None  # when asked for: the target's log-probabilities at this token
    source: str = ""  # a drafted token's source: "mtp" (the drafter) or "lookup" (copied from the text)


@dataclass
class TokenLogprob:
    """The target's log-probability of the token it kept, and of the most likely tokens there
    (ids with their log-probabilities, best first)."""

    logprob: float
    top: list[tuple[int, float]]


class TextAssembler:
    def __init__(self, piece: Callable[[int], bytes], control_text: Callable[[int], str | None]):
        self._piece = piece
        self._control_text = control_text
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._split = ChannelSplitter()

    def prime(self, prompt: list[int]) -> None:
        """Start in the channel the prompt leaves open (a prompt may end inside a thought)."""
        tail = [t for t in prompt[-64:] if t >= 0]  # negative ids: positions of pictures or sounds
        marks = [i for i, t in enumerate(tail) if self._control_text(t) in (CHANNEL_OPEN, CHANNEL_CLOSE)]
        if marks:
            for t in tail[marks[-1]:]:
                self.feed(t)
            self._utf8.reset()

    def feed(self, tok: int, drafted: bool = False) -> TokenPiece:
        ctl = self._control_text(tok)
        if ctl is not None:
            self._split.feed("", ctl)
            return TokenPiece(tok, "", drafted, "control", ctl)
        answer, thinking = self._split.feed(self._utf8.decode(self._piece(tok)), None)
        return TokenPiece(tok, answer or thinking, drafted, "thinking" if thinking else "answer")

    def flush(self) -> tuple[str, str]:
        """At the end: bytes of an unfinished character, as U+FFFD. Returns (answer, thinking)."""
        tail = self._utf8.decode(b"", final=True)
        return self._split.feed(tail, None) if tail else ("", "")
