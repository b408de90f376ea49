"""A chat request's messages as the engine takes them: roles checked, content and pictures
(bounded all told), an assistant's earlier calls with their arguments as objects, each tool
result tied to the call it answers, and no call left without its result. A request translated
from another API says where each message came from (Origin), so a refusal names the client's
own field."""

from __future__ import annotations

import json
from dataclasses import dataclass

from .errors import ApiError, unsupported
from .pictures import MAX_REQUEST_PIXELS, check_pictures, picture


@dataclass(frozen=True)
class Origin:
    """Where a chat message came from in the client's API (a Responses input item, an Anthropic
    message and its blocks), so that a refusal names the field the client wrote."""

    where: str
    calls: tuple[str, ...] = ()  # each of its calls (a tool_use block, a function_call item)
    answers_at: str = ""  # the id a tool message answers with (tool_use_id, call_id)

    def call(self, j: int) -> str:
        return self.calls[j] if j < len(self.calls) else f"{self.where}.tool_calls[{j}]"

    @property
    def answers(self) -> str:
        return self.answers_at or f"{self.where}.tool_call_id"


def check_answered(waiting: dict[str, str]) -> None:
    """A 400 while calls are left without their results: `waiting` maps each call's id to where
    it was made (the first is named as the param). OpenAI, Anthropic and the Responses API refuse
    such a conversation, and a model shown a call without its result would answer as if it had one."""
    if waiting:
        at, ids = next(iter(waiting.values())), ", ".join(str(c)[:64] for c in waiting)
        raise ApiError(400, f"{at}: these calls have no result right after them: {ids} (each call's result comes in "
                            "the next message: a tool message, tool_result block or function_call_output)", param=at)


def _content(content, where: str, budget: list[int]) -> tuple[str, list]:
    """Message content as text and pictures: a string, or OpenAI content parts (text, and
    image_url as base64 data URIs: this server fetches no URLs)."""
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    parts, media = [], []
    for i, p in enumerate(content):
        kind = p.get("type")
        if kind == "text" and isinstance(p.get("text"), str):
            parts.append(p["text"])
        elif kind == "image_url":
            media.append(picture(p.get("image_url"), f"{where}[{i}]", budget))
        else:
            raise ApiError(400, f"content parts of type {kind!r} are not supported (text and image_url)",
                           param=where)
    return "".join(parts), media


def messages(req, engine=None) -> list[dict]:
    """The chat of `req` (a request.ChatRequest) as the engine takes it: roles checked, an assistant's earlier calls with their
    arguments as objects (the template writes them in the model's syntax), and each tool
    answer tied to the call it answers (by id; it carries the call's function name). With the
    `engine`, its pictures are checked first (check_pictures); their pixels are bounded all
    told. Decodes pictures: call it off the event loop."""
    if engine is not None:
        check_pictures(req, engine)
    if req.continue_final_message or not req.add_generation_prompt:
        raise unsupported("continue_final_message" if req.continue_final_message else "add_generation_prompt",
                          "a reply is always a new assistant turn")
    out, calls = [], {}  # call id -> function name, from earlier assistant messages
    waiting: dict[str, str] = {}  # the last assistant message's calls not yet answered -> where made
    budget = [MAX_REQUEST_PIXELS]  # pixels the request's pictures may still have
    for i, m in enumerate(req.messages):
        at = req.origin(i)  # where the client wrote it
        role = "system" if m.role == "developer" else m.role  # OpenAI's newer name for it
        if role != "tool":
            check_answered(waiting)
        if role not in ("system", "user", "assistant", "tool"):
            raise ApiError(400, f"{at.where}.role {m.role!r} is not supported (system, developer, user, "
                                "assistant, tool)", param=f"{at.where}.role")
        text, media = _content(m.content, f"{at.where}.content", budget)
        msg = {"role": role, "content": text}
        if media:
            msg["media"] = media
        reasoning = m.reasoning_content or m.reasoning
        if reasoning and role == "assistant":
            msg["reasoning_content"] = reasoning
        elif reasoning:
            raise ApiError(400, f"{at.where}: only an assistant message has reasoning_content (its thinking)",
                           param=f"{at.where}.reasoning_content")
        if role == "assistant" and m.tool_calls:
            msg["tool_calls"] = [_earlier_call(c, at.call(j)) for j, c in enumerate(m.tool_calls)]
            calls.update((c["id"], c["function"]["name"]) for c in msg["tool_calls"])
            waiting = {c["id"]: at.call(j) for j, c in enumerate(msg["tool_calls"])}
        if role == "tool":
            if m.tool_call_id not in calls:
                raise ApiError(400, f"{at.answers} {str(m.tool_call_id)[:64]!r} answers no call made before it "
                                    "(each result answers an earlier call by its id)", param=at.answers)
            msg["tool_call_id"], msg["name"] = m.tool_call_id, calls[m.tool_call_id]
            waiting.pop(m.tool_call_id, None)
        out.append(msg)
    check_answered(waiting)
    return out


def _earlier_call(call, where: str) -> dict:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ApiError(400, f"{where} must be {{'id': ..., 'type': 'function', 'function': {{'name': ..., "
                            "'arguments': ...}}}}", param=where)
    args = fn.get("arguments") or "{}"
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            raise ApiError(400, f"{where}.function.arguments is not valid JSON", param=where) from None
    if not isinstance(args, dict):
        raise ApiError(400, f"{where}.function.arguments must be a JSON object", param=where)
    if not isinstance(call.get("id"), str) or not call["id"]:
        raise ApiError(400, f"{where}.id is missing: the tool message that answers the call names it",
                       param=f"{where}.id")
    return {"id": call["id"], "type": "function", "function": {"name": fn["name"], "arguments": args}}
