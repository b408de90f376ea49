"""Tools through a remote OpenAI-compatible server (llama-server with --jinja, vLLM, tandem
serve): the chat's calls and results in OpenAI's message shape, the offered tools (and a
forced one) as the request's fields, and the calls the server streams back in its deltas,
assembled and checked. The server's output is untrusted: a call of a tool that was not
offered, arguments that are not a JSON object, a call cut short, each is an error in words
(after the reply's text so far), never a call that runs."""

from __future__ import annotations

import json

from ..errors import TandemError
from ..gemma4.calls import MAX_CALL_CHARS, NAME, ToolCall

MAX_CALLS = 64  # calls in one reply, as the local call parser allows any number: a bound, not a rule


def _arguments_json(args) -> str:
    """OpenAI's arguments are a JSON string; the chat keeps them as an object."""
    return args if isinstance(args, str) else json.dumps(args if args is not None else {}, ensure_ascii=False)


def openai_message(m: dict) -> dict:
    """One chat message as OpenAI's API writes it: an answer's calls with their arguments as a
    JSON string, a tool's result with the id of the call it answers."""
    d = {"role": m["role"], "content": m["content"]}
    if m.get("tool_calls"):
        d["tool_calls"] = [{"id": c["id"], "type": "function",
                            "function": {"name": c["function"]["name"],
                                         "arguments": _arguments_json(c["function"].get("arguments"))}}
                           for c in m["tool_calls"]]
    if m["role"] == "tool":
        d["tool_call_id"] = m.get("tool_call_id") or ""
        if m.get("name"):
            d["name"] = m["name"]
    return d


def tool_fields(tools: list[dict] | None, force_tool: str, engine: str) -> dict:
    """The request's tools, and for a forced tool OpenAI's named tool_choice. llama-server reads
    tool_choice only as a string (an object falls back to "auto" with a warning in its log, so
    the call would not be forced): there "required" with only that tool offered says the same."""
    if not tools:
        if force_tool:
            raise TandemError(f"the tool {force_tool!r} cannot be forced: no tools are offered")
        return {}
    if not force_tool:
        return {"tools": list(tools)}
    chosen = [t for t in tools if t["function"]["name"] == force_tool]
    if not chosen:
        raise TandemError(f"the tool {force_tool!r} is not among the tools offered")
    if engine == "llama-server":
        return {"tools": chosen, "tool_choice": "required", "parallel_tool_calls": False}
    return {"tools": list(tools), "tool_choice": {"type": "function", "function": {"name": force_tool}},
            "parallel_tool_calls": False}  # one call, as the local grammar forces


def tools_refused(engine: str, force_tool: str = "") -> str:
    """What follows a server's error answer to a request that offered tools (and perhaps asked
    for one by name: a forced call needs a grammar the server may fail to build)."""
    hint = " (llama-server answers tools only when started with --jinja)" if engine == "llama-server" else ""
    if force_tool:
        return (f"The request asked for a call of {force_tool} by name (tool_choice), which this server may "
                f"not be able to do{hint}: send again without asking for the tool, or turn Tools off for this chat")
    return (f"The request offered tools, which this server may have refused{hint}: turn Tools off for this "
            "chat to talk to it without them")


class StreamedCalls:
    """A reply's tool calls as a server streams them (OpenAI's `delta.tool_calls`: the call's
    index, its id and name first, then its arguments in pieces), checked when the reply ends."""

    def __init__(self, offered: list[str], server: str):
        self.offered, self.server = set(offered), server
        self.parts: dict[int, dict] = {}

    def feed(self, deltas) -> None:
        for d in deltas or ():
            index = self._index(d)
            if index not in self.parts and len(self.parts) >= MAX_CALLS:
                raise TandemError(f"{self.server} sent more than {MAX_CALLS} tool calls in one reply")
            part = self.parts.setdefault(index, {"id": "", "name": "", "arguments": ""})
            fn = getattr(d, "function", None)
            for key, value in (("id", getattr(d, "id", None)), ("name", getattr(fn, "name", None))):
                if isinstance(value, str) and value:
                    part[key] = value
            args = getattr(fn, "arguments", None)
            if isinstance(args, str):
                part["arguments"] += args
                if len(part["arguments"]) > MAX_CALL_CHARS:
                    raise TandemError(f"{self.server} sent a tool call of more than {MAX_CALL_CHARS} characters")

    def _index(self, d) -> int:
        """The call a delta belongs to: its index; where a server leaves it out, a new id starts a new call."""
        if isinstance(getattr(d, "index", None), int):
            return d.index
        last = max(self.parts, default=None)
        if last is None:
            return 0
        new_id = getattr(d, "id", None)
        return last + 1 if new_id and new_id != self.parts[last]["id"] else last

    def calls(self, finish_reason: str | None) -> list[ToolCall]:
        """The calls, checked (a TandemError says what is wrong with one)."""
        return [self._call(self.parts[i], finish_reason) for i in sorted(self.parts)]

    def _call(self, part: dict, finish_reason: str | None) -> ToolCall:
        name, raw = part["name"], part["arguments"]
        if not NAME.match(name) or name not in self.offered:
            raise TandemError(f"{self.server} answered with a call of a tool it was not offered: {name[:80]!r}")
        try:
            args = json.loads(raw) if raw.strip() else {}
        except ValueError:
            args = None
        if not isinstance(args, dict):
            if finish_reason == "length":
                raise TandemError(f"the reply reached its token limit (Max tokens) in the middle of its call of "
                                  f"{name}: the call's arguments are incomplete, so it was not run")
            raise TandemError(f"{self.server} sent a call of {name} whose arguments are not a JSON object, so it "
                              f"was not run: {raw[:200]!r}")
        ok_id = isinstance(part["id"], str) and 0 < len(part["id"]) <= 128 and part["id"].isprintable()
        return ToolCall(name, args, part["id"]) if ok_id else ToolCall(name, args)
