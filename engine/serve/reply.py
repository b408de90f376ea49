"""OpenAI's shapes of one choice (chat's message and stream deltas, completions' text and
logprobs), over the engine's reply assembler (engine/reply.py).
"""

from __future__ import annotations

from ..reply import Delta, ReplyAssembler


class ChoiceReply(ReplyAssembler):
    """One choice as it streams. `kind` is "chat" (thinking apart, tool calls read when
    `tool_names` is given) or "text" (completions: everything the model wrote is text)."""

    def __init__(self, kind: str, stops: list[str], token_bytes, tool_names=None, parallel: bool = True,
                 logprobs: bool = False):
        super().__init__(tool_names, stops, parallel, split_thinking=kind == "chat", token_bytes=token_bytes,
                         logprobs=logprobs)
        self.kind = kind

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
