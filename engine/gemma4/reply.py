"""The reply assembler: one reply, assembled from the engine's events as they stream. Answer
text (cut at stop strings), thinking, tool calls read out of the model's own call syntax (and
the end of the model's turn once it has called: the tool answers next), log-probabilities, and
each piece of text with the source of its token (for views that tint drafted tokens). The
window's worker and every API of `tandem serve` read replies through it; each writes the
Deltas in its own shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .calls import CallParser, ToolCall

# what Gemma 4 writes after its calls: the tool's turn (llama.cpp counts it as an end of
# generation for vocabularies that have it; the rule here also holds where it is plain text)
TOOL_RESPONSE = "<|tool_response>"


class StopStrings:
    """Stop strings: the text is held back while it could be the start of one, and cut where
    one begins."""

    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.sent, self.text, self.hit = 0, "", False
        self.matched: str | None = None  # the stop string that ended the text

    def feed(self, piece: str) -> str:
        self.text += piece
        for s in self.stops:
            i = self.text.find(s, max(0, self.sent - len(s)))
            if s and i >= 0:
                self.text, self.hit, self.matched = self.text[:i], True, s
        hold = 0 if self.hit else max((n for s in self.stops for n in range(len(s), 0, -1)
                                       if self.text.endswith(s[:n])), default=0)
        out = self.text[self.sent:len(self.text) - hold]
        self.sent += len(out)
        return out

    def rest(self) -> str:
        out = self.text[self.sent:]
        self.sent = len(self.text)
        return out


@dataclass
class Delta:
    """What one engine step added to the reply."""

    text: str = ""  # answer text (stop strings held back and cut)
    thinking: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    logprobs: list[dict] = field(default_factory=list)  # chat's shape: token, logprob, bytes, top_logprobs
    # the step's text as [text, channel ("answer", "thinking", "control"), origin], origin being False
    # (the model's own token), True (a drafter's token it accepted) or "lookup" (copied from the
    # text); one entry per token, except where the call parser holds text back or gives it back
    pieces: list[list] = field(default_factory=list)


def origin_of(piece):
    return "lookup" if piece.drafted and piece.source == "lookup" else piece.drafted


class ReplyAssembler:
    """One reply as it streams. `tool_names`: calls to these are read out of the answer (None:
    no calls read); `split_thinking`: thinking apart from the answer (chat; completions keep
    everything the model wrote as text); `parallel`: several calls count (else the first);
    `token_bytes` and `logprobs`: each token's log-probabilities in chat's shape."""

    def __init__(self, tool_names=None, stops: list[str] = (), parallel: bool = True, split_thinking: bool = True,
                 token_bytes=None, logprobs: bool = False):
        self.parallel, self.split_thinking = parallel, split_thinking
        self.token_bytes, self.want_logprobs = token_bytes, logprobs
        self.stopper = StopStrings(list(stops))
        self.parser = CallParser(tool_names) if tool_names else None
        self.calls: list[ToolCall] = []
        self.thinking: list[str] = []
        self.thinking_tokens = 0  # of the generated tokens: the thinking channel's
        self.logprobs: list[dict] = []
        self.origins: list[list] = []  # the answer's text as generated, [text, origin] (before stop strings)
        self.tool_turn = False  # the model called and went on to the tool's turn: the reply is over
        self.stats = None

    @property
    def hit(self) -> bool:
        return self.stopper.hit

    @property
    def done(self) -> bool:
        """Nothing more belongs to this reply: a stop string, or the tool's turn after a call."""
        return self.stopper.hit or self.tool_turn

    def feed(self, ev) -> Delta:
        self.stats = ev.stats
        d, text = Delta(), []
        for p in ev.pieces:
            origin = origin_of(p)
            if p.channel == "thinking" and self.split_thinking:
                d.thinking += p.text
                d.pieces.append([p.text, "thinking", origin])
                self.thinking_tokens += 1
                continue
            if self.parser is not None:
                items = self.parser.feed(p.text if p.channel != "control" else "", p.marker)
                if (self.calls or d.calls) and p.marker == TOOL_RESPONSE:
                    self.tool_turn = True
            else:  # one entry per token, the empty text of a control token or half a character too
                d.pieces.append([p.text, p.channel, origin])
                items = [("text", p.text)] if p.text else []
            for what, value in items:
                if what == "text":
                    text.append(value)
                    if self.parser is not None:  # a call given back as the text it was is the model's
                        d.pieces.append([value, "answer", origin if value == p.text else False])
                elif self.parallel or not (self.calls or d.calls):  # one call asked for: the first counts
                    d.calls.append(value)
            if self.want_logprobs and p.logprob is not None and p.channel != "control":
                d.logprobs.append(self._logprob(p))
        for call in ev.calls:  # calls a server already read out of the reply (a remote backend's)
            if self.parallel or not (self.calls or d.calls):
                d.calls.append(call)
        if ev.finish_reason is not None and self.parser is not None:
            rest = "".join(v for what, v in self.parser.finish() if what == "text")
            if rest:
                text.append(rest)
                d.pieces.append([rest, "answer", False])
        self.origins += [[t, o] for t, ch, o in d.pieces if ch == "answer"]
        d.text = self.stopper.feed("".join(text))
        self.calls += d.calls
        self.thinking.append(d.thinking)
        self.logprobs += d.logprobs
        return d

    def rest(self) -> str:
        return self.stopper.rest()

    @property
    def cut_call(self) -> str:
        """The tool whose call the reply's end cut open (its text is the answer's tail); "" if none."""
        return self.parser.cut if self.parser is not None else ""

    @property
    def text(self) -> str:
        return self.stopper.text

    def _entry(self, tok: int, logprob: float) -> dict:
        b = self.token_bytes(tok)
        return {"token": b.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(b)}

    def _logprob(self, piece) -> dict:
        lp = piece.logprob
        return {**self._entry(piece.id, lp.logprob), "top_logprobs": [self._entry(t, v) for t, v in lp.top]}

    def finish_reason(self) -> str:
        """A reply cut by the token budget says "length" even after a call (as OpenAI does: the
        client sees it was cut); otherwise calls say "tool_calls"."""
        if self.stopper.hit:
            return "stop"
        if self.stats.finish_reason in ("length", "context"):
            return "length"
        return "tool_calls" if self.calls else "stop"
