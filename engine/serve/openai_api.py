"""OpenAI's chat completions and completions (`/v1/chat/completions`, `/chat/completions`,
`/v1/completions`), whole or streamed as SSE chunks.

`n` choices of a request are decoded together, one sequence each (with a seed, choice i uses
seed + i so the choices differ); streamed, their chunks interleave as they come, each naming its
index. A stream's first chunk names the role with
`content: null`, as OpenAI's and llama-server's do.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import replace

from fastapi import APIRouter, Request, Response
from sse_starlette.sse import EventSourceResponse

from . import openai_shapes as oa
from . import chat_messages as cm
from . import request as rq
from .admission import ServerState, admit, watched
from .choice import Choice, chat_start, merged, off_loop, open_together
from .errors import from_exception
from .request import ChatRequest, CompletionRequest, Sampling

# which build made the reply, as OpenAI's field: clients log it; Tandem's version and engine
FINGERPRINT = "tandem"


def fingerprint() -> str:
    from .. import __version__

    return f"{FINGERPRINT}-{__version__}-llama.cpp"


def usage(all_stats) -> oa.Usage:
    """n choices of one prompt: the prompt counts once, as OpenAI counts it; its cached part
    (not decoded again) in prompt_tokens_details."""
    done = sum(s.generated_tokens for s in all_stats)
    prompt = all_stats[0].prompt_tokens if all_stats else 0
    cached = all_stats[0].reused_tokens if all_stats else 0
    return oa.Usage(prompt_tokens=prompt, completion_tokens=done, total_tokens=prompt + done,
                    prompt_tokens_details=oa.PromptTokensDetails(cached_tokens=cached))


def router(state: ServerState) -> APIRouter:
    r = APIRouter()

    @r.post("/v1/chat/completions")
    @r.post("/chat/completions")
    async def chat(req: ChatRequest, request: Request, response: Response):
        engine = state.engine()
        messages = await off_loop(cm.messages, req, engine)  # pictures are decoded there
        thinking = rq.thinking(req)
        tools = rq.tool_use(req, engine, thinking)
        cfg = rq.config(engine, req, "chat", state.draft_max, tools.grammar, reports_schema=True)
        return await respond(state, req, request, response, "chat", cfg, tools, chat_start(messages, thinking, tools))

    @r.post("/v1/completions")  # (llama-server's /completions is its native one: native_api)
    async def completions(req: CompletionRequest, request: Request, response: Response):
        cfg = rq.config(state.engine(), req, "text", state.draft_max, reports_schema=True)
        return await respond(state, req, request, response, "text", cfg, rq.ToolUse(), lambda e, cfg, sink: e.generate(
            e.tokenize(req.prompt, add_special=True, parse_special=False), cfg, sink=sink))

    return r


async def respond(state: ServerState, req: Sampling, request: Request, response: Response, kind: str, cfg,
                  tools: rq.ToolUse, start):
    """The reply to one request: `req.n` choices decoded together, whole or streamed. Under a
    schema whose grammar left keywords unenforced, the x-tandem-schema-unenforced header names
    them and each choice's reply is checked against the whole schema (`tandem.schema_check`)."""
    stops = rq.stop_strings(req)
    rid = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
    created = int(time.time())
    obj = "chat.completion" if kind == "chat" else "text_completion"
    chunk_obj = obj + ".chunk" if kind == "chat" else obj
    echo = req.prompt if kind == "text" and getattr(req, "echo", False) else ""
    api = "chat" if kind == "chat" else "completions"
    t0 = time.perf_counter()
    done: list = []  # each finished choice's stats

    def open_choice(i: int):  # with a seed, each choice has its own (seed + i), so choices differ
        c = cfg if cfg.seed is None or i == 0 else replace(cfg, seed=cfg.seed + i)
        return Choice.open(state, request, kind, c, tools, stops, start, place)

    place = admit(state)  # one place in the queue for the request; its choices are decoded together
    try:
        opened = await open_together([open_choice(i) for i in range(req.n)])  # errors before any text: their status
    finally:
        place.taken()

    headers = schema_headers(req)
    response.headers.update(headers)
    if not req.stream:
        replies = await asyncio.gather(*(c.run(request) for c in opened))
        choices = [r.choice(i, echo) for i, r in enumerate(replies)]
        done += [r.stats for r in replies]
        checks = [await schema_check(state, api, req, i, r.stopper.text) for i, r in enumerate(replies)]
        state.finished(api, done, False, time.perf_counter() - t0)
        return oa.Completion(id=rid, object=obj, created=created, model=state.name, system_fingerprint=fingerprint(),
                             choices=choices, usage=usage(done), timings=oa.Timings.of(done[-1]),
                             tandem=oa.TandemExtras(schema_check=checks) if req._schema_check else None)

    def chunk(choices: list, usage: oa.Usage | None = None, timings: oa.Timings | None = None,
              tandem: oa.TandemExtras | None = None) -> dict:
        return {"data": oa.Chunk(id=rid, object=chunk_obj, created=created, model=state.name,
                                 system_fingerprint=fingerprint(), choices=choices, usage=usage,
                                 timings=timings, tandem=tandem).model_dump_json()}

    async def choice(i: int, c: Choice):
        r = c.reply
        for part in r.opening(i, echo):
            yield chunk([part])
        async for d in c.deltas():
            first_call, offset = len(r.calls) - len(d.calls), len(echo) + r.stopper.sent - len(d.text)
            for part in r.deltas(i, d, first_call, offset):
                yield chunk([part], timings=oa.Timings.of(r.stats) if req.timings_per_token else None)
        if r.stats is None:
            return
        check = await schema_check(state, api, req, i, r.stopper.text)
        yield chunk([r.closing(i)], timings=oa.Timings.of(r.stats),
                    tandem=oa.TandemExtras(schema_check=[check]) if check else None)
        done.append(r.stats)

    async def events():
        try:
            async with contextlib.aclosing(merged([choice(i, c) for i, c in enumerate(opened)])) as chunks:
                async for c in chunks:
                    yield c
        except Exception as e:
            err = from_exception(e)
            state.note(api, f"{err.status}: {err.message}")
            yield {"data": oa.StreamError(error=oa.StreamErrorDetail(message=err.message, type=err.kind,
                                                                     code=err.code)).model_dump_json()}
            return
        if not done:
            return
        if req.stream_options and req.stream_options.include_usage:
            yield chunk([], usage=usage(done), timings=oa.Timings.of(done[-1]))
        yield {"data": "[DONE]"}
        state.finished(api, done, True, time.perf_counter() - t0)

    return EventSourceResponse(watched(state, api, events(), opened), ping=15, headers=headers)


def schema_headers(req: Sampling) -> dict:
    """What a schema's grammar left unenforced, said before the reply (a stream's too)."""
    if not req._schema_check:
        return {}
    text = "; ".join(req._schema_check[1])
    return {"x-tandem-schema-unenforced": text.encode("ascii", "backslashreplace").decode()[:2000]}


async def schema_check(state: ServerState, api: str, req: Sampling, i: int, text: str) -> oa.SchemaCheck | None:
    """Choice i's finished reply against the whole schema, logged (off the event loop)."""
    from ..local.unenforced import check_reply

    if not req._schema_check:
        return None
    schema, left_out = req._schema_check
    report = await asyncio.to_thread(check_reply, text, schema, left_out)
    state.schema_checked(api, report.line())
    return oa.SchemaCheck(index=i, **report.as_dict())
