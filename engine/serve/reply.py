"""The reply assembler: one choice, assembled from the engine's events as they stream: content
(cut at stop strings), thinking, tool calls read out of the model's own call syntax, and
log-probabilities. Every API of `tandem serve` reads it (OpenAI's chat and completions shapes
are written here; Anthropic's and the Responses API's in their modules).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..tools import CallParser, ToolCall


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
    text: str = ""
    thinking: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    logprobs: list[dict] = field(default_factory=list)  # chat's shape: token, logprob, bytes, top_logprobs


class ChoiceReply:
    """One choice as it streams. `kind` is "chat" (thinking apart, tool calls read when
    `tool_names` is given) or "text" (completions: everything the model wrote is text)."""

    def __init__(self, kind: str, stops: list[str], token_bytes, tool_names=None, parallel: bool = True,
                 logprobs: bool = False):
        self.kind, self.token_bytes, self.parallel, self.want_logprobs = kind, token_bytes, parallel, logprobs
        self.stopper = StopStrings(stops)
        self.parser = CallParser(tool_names) if tool_names else None
        self.calls: list[ToolCall] = []
        self.thinking: list[str] = []
        self.thinking_tokens = 0  # of the generated tokens: the thinking channel's
        self.logprobs: list[dict] = []
        self.stats = None

    @property
    def hit(self) -> bool:
        return self.stopper.hit

    def feed(self, ev) -> Delta:
        self.stats = ev.stats
        d, text = Delta(), []
        for p in ev.pieces:
            if p.channel == "thinking" and self.kind == "chat":
                d.thinking += p.text
                self.thinking_tokens += 1
                continue
            if self.parser is not None:
                items = self.parser.feed(p.text if p.channel != "control" else "", p.marker)
            else:
                items = [("text", p.text)] if p.text else []
            for what, value in items:
                if what == "text":
                    text.append(value)
                elif self.parallel or not (self.calls or d.calls):  # one call asked for: the first counts
                    d.calls.append(value)
            if self.want_logprobs and p.logprob is not None and p.channel != "control":
                d.logprobs.append(self._logprob(p))
        if ev.finish_reason is not None and self.parser is not None:
            text += [v for what, v in self.parser.finish() if what == "text"]
        d.text = self.stopper.feed("".join(text))
        self.calls += d.calls
        self.thinking.append(d.thinking)
        self.logprobs += d.logprobs
        return d

    def rest(self) -> str:
        return self.stopper.rest()

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

    # ---- OpenAI's shapes ----
    def message(self) -> dict:
        """The whole choice's message (chat) or text (completions), with its logprobs."""
        text = self.stopper.text
        if self.kind == "text":
            return {"text": text, "logprobs": completion_logprobs(self.logprobs, 0) if self.want_logprobs else None}
        message = {"role": "assistant", "content": text if text or not self.calls else None}
        if self.calls:
            message["tool_calls"] = [{"id": c.id, "type": "function",
                                      "function": {"name": c.name, "arguments": c.arguments_json}} for c in self.calls]
        if "".join(self.thinking):
            message["reasoning_content"] = "".join(self.thinking)
        return {"message": message, "logprobs": {"content": self.logprobs} if self.want_logprobs else None}

    def deltas(self, d: Delta, first_call: int, offset: int) -> list[dict]:
        """A stream's choice deltas for one Delta: the text (and thinking) first, then each new
        call as OpenAI streams one: its index, id and name, then its arguments. `first_call`
        is the index of d.calls[0] in this choice; `offset` where d.text starts (completions'
        text_offset)."""
        if self.kind == "text":
            if not d.text and not d.logprobs:
                return []
            return [{"text": d.text, "logprobs": completion_logprobs(d.logprobs, offset) if self.want_logprobs
                     else None}]
        out = []
        if d.text or d.thinking or d.logprobs:
            delta = {"content": d.text} if d.text else {}
            if d.thinking:
                delta["reasoning_content"] = d.thinking
            out.append({"delta": delta, "logprobs": {"content": d.logprobs} if self.want_logprobs else None})
        for i, c in enumerate(d.calls, first_call):
            out.append({"delta": {"tool_calls": [{"index": i, "id": c.id, "type": "function",
                                                  "function": {"name": c.name, "arguments": ""}}]}, "logprobs": None})
            out.append({"delta": {"tool_calls": [{"index": i, "function": {"arguments": c.arguments_json}}]},
                        "logprobs": None})
        return out


def completion_logprobs(entries: list[dict], offset: int) -> dict:
    """The completions endpoint's (older) logprobs shape from chat's entries."""
    offsets, at = [], offset
    for e in entries:
        offsets.append(at)
        at += len(e["token"])
    return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
            "text_offset": offsets}
