"""OpenAI's shapes of one choice (chat's message and stream deltas, completions' text and
logprobs), over the engine's reply assembler (engine/reply.py).
"""

from __future__ import annotations

from ..gemma4.reply import Delta, ReplyAssembler
from . import openai_shapes as oa


class ChoiceReply(ReplyAssembler):
    """One choice as it streams. `kind` is "chat" (thinking apart, tool calls read when
    `tool_names` is given) or "text" (completions: everything the model wrote is text)."""

    def __init__(self, kind: str, stops: list[str], token_bytes, tool_names=None, parallel: bool = True,
                 logprobs: bool = False):
        super().__init__(tool_names, stops, parallel, split_thinking=kind == "chat", token_bytes=token_bytes,
                         logprobs=logprobs)
        self.kind = kind

    # ---- OpenAI's shapes ----
    def choice(self, index: int, echo: str = "") -> oa.ChatChoice | oa.TextChoice:
        """The whole choice: its message (chat) or text (completions, after the echoed prompt),
        with its logprobs and why it ended."""
        text, why = self.stopper.text, self.finish_reason()
        if self.kind == "text":
            return oa.TextChoice(index=index, text=echo + text, finish_reason=why,
                                 logprobs=completion_logprobs(self.logprobs, 0) if self.want_logprobs else None)
        calls = [oa.ToolCall(id=c.id, function=oa.Function(name=c.name, arguments=c.arguments_json))
                 for c in self.calls]
        message = oa.Message(content=text if text or not calls else None, tool_calls=calls or None,
                             reasoning_content="".join(self.thinking) or None)
        return oa.ChatChoice(index=index, message=message, finish_reason=why,
                             logprobs=oa.ChatLogprobs(content=self.logprobs) if self.want_logprobs else None)

    def opening(self, index: int, echo: str = "") -> list[oa.ChunkChoice | oa.TextChoice]:
        """What a stream says before any text: chat's first chunk names who speaks, with
        `content: null` (as OpenAI's does); a completion's is the echoed prompt, if asked."""
        if self.kind == "chat":
            return [oa.ChunkChoice(index=index, delta=oa.RoleDelta())]
        return [oa.TextChoice(index=index, text=echo, logprobs=None, finish_reason=None)] if echo else []

    def deltas(self, index: int, d: Delta, first_call: int, offset: int) -> list[oa.ChunkChoice | oa.TextChoice]:
        """A stream's choice deltas for one Delta: the text (and thinking) first, then each new
        call as OpenAI streams one: its index, id and name, then its arguments. `first_call`
        is the index of d.calls[0] in this choice; `offset` where d.text starts (completions'
        text_offset)."""
        if self.kind == "text":
            if not d.text and not d.logprobs:
                return []
            return [oa.TextChoice(index=index, text=d.text, finish_reason=None, logprobs=completion_logprobs(
                d.logprobs, offset) if self.want_logprobs else None)]
        out = []
        if d.text or d.thinking or d.logprobs:
            out.append(oa.ChunkChoice(index=index, delta=oa.Delta(content=d.text or None,
                                                                  reasoning_content=d.thinking or None),
                                      logprobs=oa.ChatLogprobs(content=d.logprobs) if self.want_logprobs else None))
        for i, c in enumerate(d.calls, first_call):
            named = oa.ToolCallDelta(index=i, id=c.id, type="function", function=oa.FunctionDelta(name=c.name,
                                                                                               arguments=""))
            args = oa.ToolCallDelta(index=i, function=oa.FunctionDelta(arguments=c.arguments_json))
            out += [oa.ChunkChoice(index=index, delta=oa.Delta(tool_calls=[named])),
                    oa.ChunkChoice(index=index, delta=oa.Delta(tool_calls=[args]))]
        return out

    def closing(self, index: int) -> oa.ChunkChoice | oa.TextChoice:
        """A stream's last delta: the text held back (a possible stop string that was not), and
        why the choice ended."""
        tail = self.rest()
        if self.kind == "text":
            return oa.TextChoice(index=index, text=tail, logprobs=None, finish_reason=self.finish_reason())
        return oa.ChunkChoice(index=index, delta=oa.Delta(content=tail or None), finish_reason=self.finish_reason())


def completion_logprobs(entries: list[dict], offset: int) -> oa.CompletionLogprobs:
    """The completions endpoint's (older) logprobs shape from chat's entries."""
    offsets, at = [], offset
    for e in entries:
        offsets.append(at)
        at += len(e["token"])
    return oa.CompletionLogprobs(tokens=[e["token"] for e in entries], token_logprobs=[e["logprob"] for e in entries],
                                 top_logprobs=[{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
                                 text_offset=offsets)
