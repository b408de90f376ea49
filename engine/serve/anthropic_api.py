"""Anthropic's Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`), for Claude Code
and the anthropic SDK. The request becomes the same chat request the OpenAI route takes (as
llama-server converts it), so templates, tools, forced calls, drafting and the reply assembler
are the OpenAI route's; the reply is written back as Anthropic's content blocks, whole or as
its stream of events.

Anthropic's content blocks map as: `system` (text or blocks) to a system message; text and
image (base64) blocks to message content; an assistant's `tool_use` blocks to its calls; a
user's `tool_result` blocks to tool messages, `is_error` said to the model as "Error: ..."; an
assistant's `thinking` blocks are left out (Gemma 4's template drops earlier thinking too).
`thinking: {"type": "enabled"}` turns on Gemma 4's thinking channel, which comes back as
thinking blocks (with an empty signature: nothing is signed here). Fields that do not change
the answer (metadata, cache_control, context_management, service_tier) are accepted; blocks
and tools Tandem cannot honour (documents, MCP servers, containers, Anthropic-defined client
tools, a tool without input_schema) are refused by name, as is a tool_use the next message does
not answer (chat_messages.py checks it for every API); server tools Anthropic runs (web
search, web fetch, code execution) are left out of what the model is offered (hosted_tools.py).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import APIRouter, Request
from pydantic import Field
from sse_starlette.sse import EventSourceResponse

from . import anthropic_shapes as an
from . import chat_messages as cm
from . import request as rq
from .admission import ServerState, watched
from .choice import Choice, off_loop, open_chat
from .errors import ANTHROPIC_TYPES, ApiError, from_exception
from .hosted_tools import MESSAGES_HOSTED, is_hosted
from .llama_api import count_prompt
from .openai_shapes import Timings
from .request import ChatRequest, TandemOptions, _Loose


MIN_THINKING_BUDGET = 1024  # Anthropic's least budget_tokens


class MessagesRequest(_Loose):
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)  # required by /v1/messages, not by count_tokens
    messages: list[dict]
    system: str | list[dict] | None = None
    tools: list[dict] | None = None
    tool_choice: dict | None = None
    thinking: dict | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = None
    top_k: int | None = None
    stream: bool = False
    metadata: dict | None = None
    mcp_servers: list | None = None  # refused when given: Tandem connects no MCP servers for a request
    container: Any = None  # refused when given: no code execution containers here
    service_tier: str | None = None  # a hint: one tier here
    # llama-server's `timings` (with Tandem's draft counts) are not Anthropic's: only when asked
    timings_per_token: bool = False
    tandem: TandemOptions | None = None
    verbose: bool | None = None  # llama-server's, refused when true (as on chat completions)
    return_progress: bool | None = None


def _text(blocks, where: str) -> str:
    """Text of a string or of text blocks (a system prompt, a tool result)."""
    if isinstance(blocks, str):
        return blocks
    if blocks is not None and not isinstance(blocks, list):
        raise ApiError(400, f"{where}: must be a string or a list of text blocks", param=where)
    out = []
    for i, b in enumerate(blocks or []):
        kind = b.get("type") if isinstance(b, dict) else None
        if kind != "text" or not isinstance(b.get("text"), str):
            raise ApiError(400, f"{where}[{i}]: blocks of type {kind!r} are not supported here (text only)",
                           param=f"{where}[{i}].type")
        out.append(b["text"])
    return "\n\n".join(out)


def _image(block: dict, where: str) -> dict:
    src = block.get("source") or {}
    if src.get("type") != "base64" or not isinstance(src.get("data"), str):
        raise ApiError(400, f"{where}: images are taken as base64 data (source.type 'base64'); this server "
                            "fetches no URLs", param=f"{where}.source")
    return {"type": "image_url", "image_url": {"url": f"data:{src.get('media_type', 'image/png')};base64,{src['data']}"}}


def _tool_result(block: dict, where: str) -> dict:
    content = block.get("content", "")
    if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "image" for b in content):
        raise ApiError(400, f"{where}.content: pictures in tool results are not supported (text only)",
                       param=f"{where}.content")
    text = _text(content, f"{where}.content")
    if block.get("is_error"):
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text}


def _message(m: dict, i: int) -> tuple[list[dict], list[cm.Origin]]:
    """One Anthropic message as OpenAI chat messages (a user's tool results become tool messages,
    which come first: they answer the calls of the assistant message before), and where each
    came from (cm.Origin: a refusal names the message and block)."""
    where = f"messages[{i}]"
    role, content = m.get("role"), m.get("content")
    if role == "system":  # Claude Code's mid-conversation system messages (a beta of its own)
        return [{"role": "system", "content": _text(content, f"{where}.content")}], [cm.Origin(where)]
    if role not in ("user", "assistant"):
        raise ApiError(400, f"{where}.role must be 'user', 'assistant' or 'system', got {str(role)[:40]!r}",
                       param=f"{where}.role")
    if isinstance(content, str):
        return [{"role": role, "content": content}], [cm.Origin(where)]
    if not isinstance(content, list):
        raise ApiError(400, f"{where}.content must be text or a list of content blocks", param=f"{where}.content")
    parts, calls, results, thought = [], [], [], []
    origins, call_at = [], []  # where each result and each call is
    for j, b in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": str(b.get("text", ""))})
        elif kind == "image" and role == "user":
            parts.append(_image(b, at))
        elif kind == "tool_use" and role == "assistant":
            calls.append({"id": b.get("id"), "type": "function",
                          "function": {"name": b.get("name"), "arguments": b.get("input") or {}}})
            call_at.append(at)
        elif kind == "tool_result" and role == "user":
            results.append(_tool_result(b, at))
            origins.append(cm.Origin(at, answers_at=f"{at}.tool_use_id"))
        elif kind == "thinking" and role == "assistant":
            # the message's reasoning, as llama-server maps it: the template decides what it shows
            # (Gemma 4's: the thinking of tool-calling turns since the last user message)
            thought.append(str(b.get("thinking") or ""))
        elif kind == "redacted_thinking" and role == "assistant":
            continue  # encrypted by Anthropic for its own models: nothing here can read it
        else:
            raise ApiError(400, f"{at}: content blocks of type {str(kind)[:40]!r} are not supported in {role} "
                                "messages (text, image, tool_use, tool_result, thinking)", param=f"{at}.type")
    out = list(results)
    if parts or calls or "".join(thought) or not results:
        msg: dict[str, Any] = {"role": role, "content": parts if any(p["type"] != "text" for p in parts)
                               else "".join(p["text"] for p in parts)}
        if "".join(thought):
            msg["reasoning_content"] = "".join(thought)
        if calls:
            msg["tool_calls"] = calls
        out.append(msg)
        origins.append(cm.Origin(where, tuple(call_at)))
    return out, origins


def _tools(tools: list[dict] | None, left_out: list[str]) -> list[dict] | None:
    """Client tools as chat's functions; server tools Anthropic runs are left out, their types
    added to `left_out` (hosted_tools.py)."""
    if tools is None:
        return None
    out = []
    for i, t in enumerate(tools):
        kind = t.get("type") if isinstance(t, dict) else None
        if is_hosted(kind, MESSAGES_HOSTED):
            left_out.append(kind)
            continue
        if kind not in (None, "custom"):
            raise ApiError(400, f"tools[{i}]: tools of type {str(kind)[:60]!r} are not supported; declare your own "
                                "tools with name, description and input_schema", param=f"tools[{i}].type")
        if not isinstance(t.get("input_schema"), dict):
            raise ApiError(400, f"tools[{i}].input_schema: Field required (a JSON schema of the tool's input)",
                           param=f"tools[{i}].input_schema")
        out.append({"type": "function", "function": {"name": t.get("name"), "description": t.get("description", ""),
                                                     "parameters": t["input_schema"]}})
    return out


def _tool_choice(choice: dict | None) -> tuple[Any, bool]:
    """OpenAI's tool_choice and parallel_tool_calls for Anthropic's tool_choice."""
    if choice is None:
        return None, True
    parallel = not choice.get("disable_parallel_tool_use", False)
    kind = choice.get("type")
    if kind in ("auto", "none"):
        return kind, parallel
    if kind == "any":
        return "required", parallel
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    raise ApiError(400, "tool_choice.type must be 'auto', 'any', 'tool' (with a name) or 'none'", param="tool_choice")


def _thinking(thinking: dict | None, max_tokens: int | None) -> bool:
    if thinking is None:
        return False
    kind = thinking.get("type")
    if kind == "disabled":
        return False
    if kind not in ("enabled", "adaptive"):
        raise ApiError(400, "thinking.type must be 'enabled', 'adaptive' or 'disabled'", param="thinking.type")
    budget = thinking.get("budget_tokens")
    if kind == "enabled" and budget is not None and (type(budget) is not int or budget < MIN_THINKING_BUDGET):
        raise ApiError(400, f"thinking.budget_tokens must be an integer of at least {MIN_THINKING_BUDGET}",
                       param="thinking.budget_tokens")
    if kind == "enabled" and max_tokens is not None and budget is not None and budget >= max_tokens:
        raise ApiError(400, "thinking.budget_tokens must be less than max_tokens", param="thinking.budget_tokens")
    return True  # Gemma 4 thinks until it is done; max_tokens bounds thinking and answer together


def chat_request(req: MessagesRequest) -> tuple[ChatRequest, bool]:
    """The same request in OpenAI's chat shape (what the OpenAI route takes), and thinking."""
    if req.mcp_servers:
        raise ApiError(400, "mcp_servers is not supported: Tandem connects no MCP servers for a request; declare "
                            "their tools in tools", param="mcp_servers")
    if req.container is not None:
        raise ApiError(400, "container is not supported: no code runs in a container here", param="container")
    messages, origins = [], []
    if req.system:
        messages.append({"role": "system", "content": _text(req.system, "system")})
        origins.append(cm.Origin("system"))
    for i, m in enumerate(req.messages):
        if not isinstance(m, dict):
            raise ApiError(400, f"messages[{i}] must be an object", param=f"messages[{i}]")
        these, where = _message(m, i)
        messages += these
        origins += where
    if not messages:
        raise ApiError(400, "messages: at least one message is needed", param="messages")
    thinking = _thinking(req.thinking, req.max_tokens)
    choice, parallel = _tool_choice(req.tool_choice)
    left_out: list[str] = []
    body = {"model": req.model, "messages": messages, "max_tokens": req.max_tokens, "stop": req.stop_sequences,
            "tools": _tools(req.tools, left_out), "tool_choice": choice, "parallel_tool_calls": parallel,
            "chat_template_kwargs": {"enable_thinking": thinking}, "tandem": req.tandem,
            "verbose": req.verbose, "return_progress": req.return_progress}
    for name in ("temperature", "top_p", "top_k"):
        value = getattr(req, name)
        if value is not None:
            body[name] = value
    chat = rq.translated(ChatRequest, body)
    chat._hosted_left_out, chat._origins = left_out, origins
    return chat, thinking


def stop_reason(r) -> tuple[str, str | None]:
    why = r.finish_reason()
    if why == "length":
        return "max_tokens", None
    if r.stopper.hit:
        return "stop_sequence", r.stopper.matched
    return ("tool_use" if why == "tool_calls" else "end_turn"), None


def usage(stats) -> an.Usage:
    """Anthropic counts the cached part of the prompt apart from input_tokens."""
    cached = stats.reused_tokens
    return an.Usage(input_tokens=stats.prompt_tokens - cached, output_tokens=stats.generated_tokens,
                    cache_read_input_tokens=cached)


def router(state: ServerState) -> APIRouter:
    r = APIRouter()

    @r.post("/v1/messages/count_tokens")
    async def count_tokens(req: MessagesRequest):
        engine = state.engine()
        chat, thinking = chat_request(req)
        tools = rq.tool_use(chat, engine, thinking)
        msgs = await off_loop(cm.messages, chat, engine)
        return an.TokenCount(input_tokens=await off_loop(count_prompt, engine, msgs, thinking, tools.tools))

    @r.post("/v1/messages")
    async def messages(req: MessagesRequest, request: Request):
        if req.max_tokens is None:
            raise ApiError(400, "max_tokens: Field required", param="max_tokens")
        chat, thinking = chat_request(req)
        t0 = time.perf_counter()
        choice = await open_chat(state, request, chat, thinking)
        mid = "msg_" + uuid.uuid4().hex[:24]
        if req.stream:
            events = stream(state, choice, mid, t0, req.timings_per_token)
            return EventSourceResponse(watched(state, "messages", events, [choice]), ping=15)
        rep = await choice.run(request)
        state.finished("messages", [rep.stats], False, time.perf_counter() - t0)
        return message(state, rep, mid, Timings.of(rep.stats) if req.timings_per_token else None)

    return r


def message(state: ServerState, r, mid: str, timings: Timings | None = None) -> an.Message:
    content: list = []
    thinking = "".join(r.thinking)
    if thinking:
        content.append(an.ThinkingBlock(thinking=thinking))
    if r.stopper.text or not r.calls:
        content.append(an.TextBlock(text=r.stopper.text))
    content += [an.ToolUseBlock(id=c.id, name=c.name, input=c.arguments) for c in r.calls]
    why, seq = stop_reason(r)
    return an.Message(id=mid, model=state.name, content=content, stop_reason=why, stop_sequence=seq,
                      usage=usage(r.stats), timings=timings)


def _event(data: an.Event) -> dict:
    return {"event": data.type, "data": data.model_dump_json()}


async def stream(state: ServerState, choice: Choice, mid: str, t0: float, with_timings: bool = False):
    """Anthropic's event stream: message_start, then each content block (thinking, text,
    tool_use) opened, its deltas, closed, with indices in order; message_delta with the stop
    reason and usage; message_stop. An error after the start is an `error` event."""
    r = choice.reply
    open_kind: str | None = None  # the type of the block being streamed
    index = -1

    def start(block):
        nonlocal open_kind, index
        index += 1
        open_kind = block.type
        return _event(an.ContentBlockStart(index=index, content_block=block))

    def delta(d):
        return _event(an.ContentBlockDelta(index=index, delta=d))

    def close():
        nonlocal open_kind
        out = []
        if open_kind == "thinking":  # as Anthropic ends a thinking block: its signature
            out.append(delta(an.SignatureDelta()))
        if open_kind is not None:
            out.append(_event(an.ContentBlockStop(index=index)))
        open_kind = None
        return out

    def text(piece: str):
        out = []
        if open_kind != "text":
            out += close()
            out.append(start(an.TextBlock(text="")))
        out.append(delta(an.TextDelta(text=piece)))
        return out

    cached = r.stats.reused_tokens if r.stats else 0
    yield _event(an.MessageStart(message=an.Message(
        id=mid, model=state.name, content=[], stop_reason=None, stop_sequence=None,
        usage=an.Usage(input_tokens=(r.stats.prompt_tokens if r.stats else 0) - cached, output_tokens=0,
                       cache_read_input_tokens=cached))))
    yield _event(an.Ping())
    try:
        async for d in choice.deltas():
            if d.thinking:
                if open_kind != "thinking":
                    for e in close():
                        yield e
                    yield start(an.ThinkingBlock(thinking=""))
                yield delta(an.ThinkingDelta(thinking=d.thinking))
            if d.text:
                for e in text(d.text):
                    yield e
            for c in d.calls:
                for e in close():
                    yield e
                yield start(an.ToolUseBlock(id=c.id, name=c.name, input={}))
                yield delta(an.InputJsonDelta(partial_json=c.arguments_json))
                for e in close():
                    yield e
    except Exception as e:
        err = from_exception(e)
        state.note("messages", f"{err.status}: {err.message}")
        yield _event(an.ErrorEvent(error=an.ErrorDetail(type=ANTHROPIC_TYPES.get(err.status, "api_error"),
                                                        message=err.message)))
        return
    if r.stats is None:
        return
    tail = r.rest()
    if tail or index < 0:  # a reply with no block at all still has its (empty) text block
        for e in text(tail):
            yield e
    for e in close():
        yield e
    why, seq = stop_reason(r)
    yield _event(an.MessageDelta(delta=an.StopDetails(stop_reason=why, stop_sequence=seq), usage=usage(r.stats),
                                 timings=Timings.of(r.stats) if with_timings else None))
    yield _event(an.MessageStop())
    state.finished("messages", [r.stats], True, time.perf_counter() - t0)
