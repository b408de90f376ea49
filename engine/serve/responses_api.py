"""OpenAI's Responses API (`POST /v1/responses`, `/v1/responses/input_tokens`), for Codex CLI,
the OpenAI Agents SDK and opencode's `@ai-sdk/openai` provider. The request becomes the same
chat request the OpenAI chat route takes; the reply is written as output items (reasoning,
message, function_call), whole or as the Responses stream of events. The request's translation
is responses_request.py's.

`input` items map as: messages (system, developer, user, assistant; text or input_text /
output_text parts, input_image as data URIs) to chat messages; `function_call` items to the
assistant's calls; `function_call_output` to tool messages; earlier `reasoning` items are left
out (Gemma 4's template drops earlier thinking). `instructions` is the system message;
`reasoning.effort` (anything but none/minimal) turns on Gemma 4's thinking, which comes back
as a reasoning item; `text.format` is response_format.

No server-side state: every response says `store: false` (`store: true` is taken and nothing is
kept), and `previous_response_id`, `conversation` and `prompt` are 400s (send the whole
conversation in `input`, as Codex and the Agents SDK do). `include` takes only values that change
nothing here (Codex's `reasoning.encrypted_content`: earlier thinking is not carried; hosted tools'
outputs); `service_tier` is a hint (the response says "default"); `top_logprobs` above 0 is a 400. `truncation: "auto"`
drops the oldest input items until the prompt fits the context with room for the reply (up to
4096 tokens, or max_output_tokens); "disabled", the default, answers an overflow with a 400. Functions declared in
a namespace (Codex groups some) are offered by their names and their calls come back with
their namespace; hosted tools (web search, file search) are left out (hosted_tools.py). Without
`max_output_tokens` a response goes on until the model ends or the context is full, as
OpenAI's does (Codex sends none, and takes a response cut short as a failed turn).
"""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request
from sse_starlette.sse import EventSourceResponse

from . import chat_messages as cm
from . import request as rq
from . import responses_shapes as rs
from .admission import ServerState, watched
from .choice import Choice, off_loop, open_chat
from .errors import from_exception
from .llama_api import count_prompt
from .openai_shapes import Timings
from .responses_request import TRUNCATION_ROOM, ResponsesRequest, chat_request, truncated


class Output:
    """The response's output items as they stream: ids fixed when each item starts."""

    def __init__(self):
        self.items: list = []

    def add(self, item):
        self.items.append(item)
        return item


def new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def message_item(out: Output, text: str, status: str = "completed") -> rs.MessageItem:
    return out.add(rs.MessageItem(id=new_id("msg_"), status=status, content=[rs.OutputText(text=text)]))


def reasoning_item(out: Output, text: str) -> rs.ReasoningItem:
    return out.add(rs.ReasoningItem(id=new_id("rs_"), content=[rs.ReasoningText(text=text)]))


def call_item(out: Output, c, spaces: dict[str, str], status: str = "completed") -> rs.FunctionCallItem:
    return out.add(rs.FunctionCallItem(id=new_id("fc_"), status=status, call_id=c.id, name=c.name,
                                       arguments=c.arguments_json if status == "completed" else "",
                                       namespace=spaces.get(c.name)))


def usage(r) -> rs.Usage:
    s = r.stats
    return rs.Usage(input_tokens=s.prompt_tokens,
                    input_tokens_details=rs.InputTokensDetails(cached_tokens=s.reused_tokens),
                    output_tokens=s.generated_tokens,
                    output_tokens_details=rs.OutputTokensDetails(reasoning_tokens=r.thinking_tokens),
                    total_tokens=s.prompt_tokens + s.generated_tokens)


def response(state: ServerState, req: ResponsesRequest, rid: str, created: int, out: Output, r=None,
             **fields) -> rs.Response:
    """The response object: in progress (r None) or done; `fields` say more (a failure)."""
    done = r is not None and r.stats is not None
    cut = done and r.finish_reason() == "length"
    return rs.Response(**{
        "id": rid, "created_at": created, "model": state.name,
        "status": ("incomplete" if cut else "completed") if done else "in_progress",
        "incomplete_details": rs.IncompleteDetails() if cut else None, "error": None,
        "instructions": req.instructions, "max_output_tokens": req.max_output_tokens,
        "output": out.items if done else [], "parallel_tool_calls": req.parallel_tool_calls,
        "tool_choice": req.tool_choice or "auto", "tools": req.tools or [], "temperature": req.temperature,
        "top_p": req.top_p, "text": req.text or {"format": {"type": "text"}}, "reasoning": req.reasoning,
        "truncation": req.truncation, "usage": usage(r) if done else None, **fields})


def router(state: ServerState) -> APIRouter:
    r = APIRouter()

    async def prompt_tokens(req: ResponsesRequest) -> int:
        engine = state.engine()
        chat, thinking, _ = chat_request(req)
        tools = rq.tool_use(chat, engine, thinking)
        return await off_loop(count_prompt, engine, await off_loop(cm.messages, chat, engine), thinking, tools.tools)

    async def fits(req: ResponsesRequest) -> bool:
        n_ctx = state.engine().n_ctx
        room = min(req.max_output_tokens or TRUNCATION_ROOM, TRUNCATION_ROOM, n_ctx // 4)
        return await prompt_tokens(req) + room <= n_ctx

    @r.post("/v1/responses/input_tokens")
    @r.post("/responses/input_tokens")
    async def input_tokens(req: ResponsesRequest):
        return rs.InputTokens(input_tokens=await prompt_tokens(await truncated(req, fits)))

    @r.post("/v1/responses")
    @r.post("/responses")
    async def responses(req: ResponsesRequest, request: Request):
        req = await truncated(req, fits)
        chat, thinking, spaces = chat_request(req)
        t0 = time.perf_counter()
        choice = await open_chat(state, request, chat, thinking)
        rid, created = new_id("resp_"), int(time.time())
        if req.stream:
            events = stream(state, req, choice, rid, created, t0, spaces)
            return EventSourceResponse(watched(state, "responses", events, [choice]), ping=15)
        rep = await choice.run(request)
        out = Output()
        if "".join(rep.thinking):
            reasoning_item(out, "".join(rep.thinking))
        if rep.stopper.text or not rep.calls:
            message_item(out, rep.stopper.text, "incomplete" if rep.finish_reason() == "length" else "completed")
        for c in rep.calls:
            call_item(out, c, spaces)
        state.finished("responses", [rep.stats], False, time.perf_counter() - t0)
        return response(state, req, rid, created, out, rep, timings=Timings.of(rep.stats))

    return r


async def stream(state: ServerState, req: ResponsesRequest, choice: Choice, rid: str, created: int, t0: float,
                 spaces: dict[str, str]):
    """The Responses event stream: response.created and .in_progress; each output item added,
    its parts and deltas, done; response.completed (or .incomplete) with usage. An error after
    the start is a response.failed event."""
    r, out = choice.reply, Output()
    seq = 0
    current: rs.MessageItem | rs.ReasoningItem | None = None  # the item being streamed
    text_so_far: list[str] = []

    def ev(shape, **fields) -> dict:
        """One event of the given shape, numbered in order (its type, where the shape has
        several, among `fields`)."""
        nonlocal seq
        seq += 1
        when = Timings.of(r.stats) if req.timings_per_token and r.stats is not None else None
        e = shape(sequence_number=seq, timings=when, **fields)
        return {"event": e.type, "data": e.model_dump_json()}

    def index(it) -> int:
        return out.items.index(it)

    def close():
        nonlocal current
        events = []
        it, current = current, None
        if it is None:
            return events
        text = "".join(text_so_far)
        text_so_far.clear()
        i, at = index(it), {"item_id": it.id, "output_index": index(it), "content_index": 0}
        if it.type == "message":
            it.content = [rs.OutputText(text=text)]
            events.append(ev(rs.OutputTextDone, **at, text=text))
        else:
            it.content = [rs.ReasoningText(text=text)]
            events.append(ev(rs.ReasoningTextDone, **at, text=text))
        events.append(ev(rs.ContentPartEvent, type="response.content_part.done", **at, part=it.content[0]))
        events.append(ev(rs.OutputItemEvent, type="response.output_item.done", output_index=i, item=it))
        return events

    def begin(kind: str):
        nonlocal current
        events = close()
        if kind == "message":
            current = out.add(rs.MessageItem(id=new_id("msg_"), status="in_progress", content=[]))
            part = rs.OutputText(text="")
        else:
            current = out.add(rs.ReasoningItem(id=new_id("rs_"), content=[]))
            part = rs.ReasoningText(text="")
        i = index(current)
        events.append(ev(rs.OutputItemEvent, type="response.output_item.added", output_index=i, item=current))
        events.append(ev(rs.ContentPartEvent, type="response.content_part.added", item_id=current.id,
                         output_index=i, content_index=0, part=part))
        return events

    def text(piece: str, kind: str):
        events = begin(kind) if current is None or current.type != kind else []
        text_so_far.append(piece)
        delta = rs.OutputTextDelta if kind == "message" else rs.ReasoningTextDelta
        events.append(ev(delta, item_id=current.id, output_index=index(current), content_index=0, delta=piece))
        return events

    yield ev(rs.ResponseEvent, type="response.created", response=response(state, req, rid, created, out))
    yield ev(rs.ResponseEvent, type="response.in_progress", response=response(state, req, rid, created, out))
    try:
        async for d in choice.deltas():
            for e in (text(d.thinking, "reasoning") if d.thinking else []) + (text(d.text, "message") if d.text else []):
                yield e
            for c in d.calls:
                for e in close():
                    yield e
                it = call_item(out, c, spaces, "in_progress")
                i = index(it)
                yield ev(rs.OutputItemEvent, type="response.output_item.added", output_index=i, item=it)
                yield ev(rs.ArgumentsDelta, item_id=it.id, output_index=i, delta=c.arguments_json)
                yield ev(rs.ArgumentsDone, item_id=it.id, output_index=i, arguments=c.arguments_json)
                it.status, it.arguments = "completed", c.arguments_json
                yield ev(rs.OutputItemEvent, type="response.output_item.done", output_index=i, item=it)
    except Exception as e:
        err = from_exception(e)
        state.note("responses", f"{err.status}: {err.message}")
        failed = response(state, req, rid, created, out, status="failed",
                          error=rs.ResponseError(code=err.code or err.kind, message=err.message))
        yield ev(rs.ResponseEvent, type="response.failed", response=failed)
        return
    if r.stats is None:
        return
    tail = r.rest()
    if tail or not out.items:  # a reply with no item at all still has its (empty) message
        for e in text(tail, "message"):
            yield e
    if current is not None and current.type == "message":
        current.status = "incomplete" if r.finish_reason() == "length" else "completed"
    for e in close():
        yield e
    final = response(state, req, rid, created, out, r)
    yield ev(rs.ResponseEvent, type="response." + final.status, response=final)
    state.finished("responses", [r.stats], True, time.perf_counter() - t0)
