"""`tandem serve`: the loaded pair as a local OpenAI-compatible API (FastAPI + uvicorn, SSE with
sse-starlette), so editors (Continue, Zed, Aider, Cline) get MTP speed offline.

Endpoints: GET /health, GET /v1/models, POST /v1/chat/completions and /v1/completions
(streaming and not). Responses carry `usage` and a llama-server-compatible `timings` object
(with `draft_n` / `draft_n_accepted`), per chunk with `"timings_per_token": true`. A request
may switch drafting with `"tandem": {"mtp": false}` or `{"draft_max": 3}`, which servers
cannot do; Tandem's remote backend uses it to Compare against one server.

One engine, one generation at a time: requests wait in a bounded queue (503 when it is full);
a client that goes away cancels its generation at once; the engine's prefix cache serves the
next request of the same conversation. The engine runs in a worker thread, never on the event
loop. Safe by default: 127.0.0.1, an API key required for any other address, a body size
limit, max_tokens within the context, CORS only when asked, errors in OpenAI's shape.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette.sse import EventSourceResponse

from .errors import ContextOverflowError, ModelUnloaded, TandemError
from .generation import AUTO
from .sampling import SamplingParams

MAX_BODY_BYTES = 4 * 2**20
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


# ---- request shapes (unknown fields are accepted and ignored, as OpenAI clients send many) ----
class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TandemOptions(_Loose):
    mtp: bool | None = None
    draft_max: int | str | None = None


class ChatMessage(_Loose):
    role: str
    content: str | list[dict] | None = ""


class StreamOptions(_Loose):
    include_usage: bool = False


class Sampling(_Loose):
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=100.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    repeat_penalty: float = Field(default=1.0, gt=0.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    timings_per_token: bool = False
    tandem: TandemOptions | None = None
    response_format: dict | None = None  # {"type": "text" | "json_object" | "json_schema", "json_schema": {...}}
    # fields that change the answer and are not supported yet: refused by name, never ignored
    n: int | None = None
    logprobs: bool | int | None = None
    top_logprobs: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict | None = None
    tools: list | None = None
    tool_choice: Any = None
    functions: list | None = None
    function_call: Any = None
    echo: bool | None = None
    best_of: int | None = None
    suffix: str | None = None


class ChatRequest(Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    chat_template_kwargs: dict[str, Any] | None = None


class CompletionRequest(Sampling):
    prompt: str


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", code: str | None = None,
                 param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.code, self.param = status, message, kind, code, param


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None,
           param: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status_code=status)


class ApiKey:
    """Every path but /health needs 'Authorization: Bearer <key>' (compared in constant time)."""

    def __init__(self, app, key: str):
        self.app, self.expected = app, f"Bearer {key}".encode()

    async def __call__(self, scope, receive, send):
        import hmac

        if scope["type"] == "http" and scope.get("path") != "/health":
            got = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(got, self.expected):
                return await _error(401, "Invalid API key: send it as 'Authorization: Bearer <key>'",
                                    "authentication_error", "invalid_api_key")(scope, receive, send)
        return await self.app(scope, receive, send)


class _TooLarge(Exception):
    pass


class BodyLimit:
    """Refuse request bodies over `limit` bytes (413), by Content-Length or as they arrive
    (a chunked body has none), before the application reads them whole."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        too_large = _error(413, f"The request body is larger than {self.limit // 2**20} MB")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return await too_large(scope, receive, send)
        total = 0

        async def limited():
            nonlocal total
            message = await receive()
            if message["type"] == "http.request":
                total += len(message.get("body", b""))
                if total > self.limit:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await too_large(scope, receive, send)


@dataclass
class ServerState:
    """What the app shows about the server: its requests as they come and go."""

    engine_getter: Callable[[], Any]  # the engine to use now (the app may load another model)
    model_name: str | Callable[[], str]  # the name clients see (a callable: the loaded model's, now)
    api_key: str | None = None
    queue_size: int = 4
    draft_max: int | str = AUTO  # for requests that do not choose
    waiting: int = 0
    last: dict = field(default_factory=dict)  # the latest generation: tokens and how it ended
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)
    on_log: Callable[[dict], None] | None = None  # one entry per finished request

    @property
    def name(self) -> str:
        return self.model_name() if callable(self.model_name) else self.model_name

    def log(self, **entry) -> None:
        if self.on_log is not None:
            try:
                self.on_log(entry)
            except Exception:
                pass


def _text_of(content) -> str:
    """Message content as text: a string, or OpenAI content parts of which the text parts count."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for p in content:
        if p.get("type") == "text" and isinstance(p.get("text"), str):
            parts.append(p["text"])
        else:
            raise ApiError(400, f"content parts of type {p.get('type')!r} are not supported (text only)")
    return "".join(parts)


def _timings(stats) -> dict:
    t = {"prompt_n": stats.prefill_tokens, "prompt_ms": stats.prefill_s * 1e3,
         "prompt_per_second": stats.prefill_tps or 0.0, "predicted_n": stats.generated_tokens,
         "predicted_ms": stats.decode_s * 1e3, "predicted_per_second": stats.decode_tps or 0.0,
         "cache_n": stats.reused_tokens}
    if stats.draft_tokens > 0:  # as llama-server: only when drafts were made
        t.update(draft_n=stats.draft_tokens, draft_n_accepted=stats.accepted_tokens)
    return t


def _usage(stats) -> dict:
    return {"prompt_tokens": stats.prompt_tokens, "completion_tokens": stats.generated_tokens,
            "total_tokens": stats.prompt_tokens + stats.generated_tokens}


def create_app(state: ServerState, cors: str | None = None, max_body: int = MAX_BODY_BYTES) -> FastAPI:
    app = FastAPI(title="Tandem", docs_url=None, redoc_url=None, openapi_url=None)
    if cors:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=[cors], allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])

    # plain ASGI middleware: Starlette's BaseHTTPMiddleware would hide a client's disconnect
    # from the streaming response, and a generation nobody reads must stop at once
    app.add_middleware(BodyLimit, limit=max_body)
    if state.api_key:
        app.add_middleware(ApiKey, key=state.api_key)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", [])[1:]) or "body"
        what = "the body is not valid JSON" if first.get("type") == "json_invalid" else first.get("msg", "invalid")
        return _error(400, f"Invalid request: {where}: {what}")

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError):
        return _error(exc.status, exc.message, exc.kind, exc.code, exc.param)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):  # 404, 405: OpenAI's shape too
        what = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return _error(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", code=what)

    @app.get("/health")
    async def health():
        return {"status": "ok" if state.engine_getter() is not None else "no model loaded",
                "generating": state.turn.locked(), "waiting": state.waiting, "last": state.last}

    @app.get("/v1/models")
    async def models():
        e = state.engine_getter()
        return {"object": "list", "data": [{"id": state.name, "object": "model", "created": 0,
                                            "owned_by": "tandem", "max_model_len": e.n_ctx if e else None,
                                            "mtp": bool(e and e.has_mtp)}]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str):
        found = [m for m in (await models())["data"] if m["id"] == model_id]
        if not found:
            raise ApiError(404, f"The model {model_id!r} does not exist; this server serves {state.name!r}",
                           code="model_not_found", param="model")
        return found[0]

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest, request: Request):
        messages = [{"role": m.role, "content": _text_of(m.content)} for m in req.messages]
        for m in messages:
            if m["role"] not in ("system", "user", "assistant"):
                raise ApiError(400, f"message role {m['role']!r} is not supported (system, user, assistant)")
        thinking = bool((req.chat_template_kwargs or {}).get("enable_thinking", False))
        return await _respond(state, req, request, "chat", lambda e, cfg, stop: e.chat(messages, cfg, thinking,
                                                                                  should_stop=stop))

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        return await _respond(state, req, request, "text", lambda e, cfg, stop: e.generate(
            e.tokenize(req.prompt, add_special=True, parse_special=False), cfg, stop))

    return app


def _config(engine, req: Sampling, default_k="auto"):
    from .generation import GenerationConfig, check_draft_length

    n = req.max_completion_tokens or req.max_tokens or min(2048, engine.n_ctx // 2)
    if n >= engine.n_ctx:
        raise ApiError(400, f"max_tokens {n} does not fit the context of {engine.n_ctx} tokens")
    sp = SamplingParams(temperature=req.temperature, top_k=req.top_k, top_p=req.top_p, min_p=req.min_p,
                        repeat_penalty=req.repeat_penalty)
    try:
        sp.validate()
    except ValueError as e:
        raise ApiError(400, str(e)) from None
    _refuse_unsupported(req)
    constraint = _response_format(req.response_format)
    t = req.tandem or TandemOptions()
    k = t.draft_max if t.draft_max is not None else default_k
    try:
        k = check_draft_length(k)
    except ValueError as e:
        raise ApiError(400, f"tandem.draft_max: {e}") from None
    return GenerationConfig(max_tokens=n, use_mtp=t.mtp is not False, draft_max=k, sampling=sp, seed=req.seed,
                            **constraint)


def _unsupported(field: str, why: str = "") -> ApiError:
    return ApiError(400, f"{field!r} is not supported by tandem serve yet{': ' + why if why else ''}; "
                         "leave it out", code="unsupported_parameter", param=field)


def _refuse_unsupported(req: Sampling) -> None:
    """Fields that would change the answer and are not implemented: a 400 naming the field,
    never a 200 as if they had worked."""
    if req.n not in (None, 1):
        raise _unsupported("n", "one choice per request")
    if req.best_of not in (None, 1):
        raise _unsupported("best_of")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(req, name) not in (None, 0, 0.0):
            raise _unsupported(name, "repeat_penalty is")
    if req.logprobs not in (None, False, 0) or req.top_logprobs not in (None, 0):
        raise _unsupported("logprobs" if req.logprobs not in (None, False, 0) else "top_logprobs")
    for name in ("logit_bias", "tools", "functions"):
        if getattr(req, name):
            raise _unsupported(name)
    for name in ("tool_choice", "function_call"):
        if getattr(req, name) not in (None, "none", "auto"):
            raise _unsupported(name)
    if req.echo:
        raise _unsupported("echo")
    if req.suffix:
        raise _unsupported("suffix")


def _response_format(fmt: dict | None) -> dict:
    """response_format as GenerationConfig fields: a grammar for json_object, a JSON schema for
    json_schema (checked now: a bad or hostile schema is a 400 naming the problem)."""
    from .grammar import JSON_OBJECT_GBNF, GrammarError, schema_to_gbnf

    kind = (fmt or {}).get("type", "text")
    if kind == "text":
        return {}
    if kind == "json_object":
        return {"grammar": JSON_OBJECT_GBNF}
    if kind != "json_schema":
        raise ApiError(400, f"response_format.type must be 'text', 'json_object' or 'json_schema', got {kind!r}",
                       param="response_format")
    spec = fmt.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        raise ApiError(400, "response_format.json_schema.schema must be a JSON schema object",
                       param="response_format")
    try:
        return {"grammar": schema_to_gbnf(schema)}
    except GrammarError as e:
        raise ApiError(400, f"response_format: {e}", param="response_format") from None


async def _generate(state: ServerState, start: Callable):
    """The engine's events for one request, on a worker thread, in turn with the others."""
    if state.waiting >= state.queue_size:
        raise ApiError(503, f"The server is busy ({state.queue_size} requests waiting); try again shortly",
                       "server_error", "queue_full")
    state.waiting += 1
    try:
        await state.turn.acquire()
    finally:
        state.waiting -= 1
    loop = asyncio.get_running_loop()
    q: asyncio.Queue = asyncio.Queue()
    done = object()
    engine = state.engine_getter()
    if engine is None:
        state.turn.release()
        raise ApiError(503, "No model is loaded", "server_error", "no_model")

    stop = threading.Event()  # this request's own: it never stops the next holder of the engine's turn

    def work():
        with engine.turn:  # shared with the app's own chats
            try:
                for ev in start(engine, stop.is_set):
                    loop.call_soon_threadsafe(q.put_nowait, ev)
                loop.call_soon_threadsafe(q.put_nowait, done)
            except Exception as e:  # reported to the client in OpenAI's error shape
                loop.call_soon_threadsafe(q.put_nowait, e)

    fut = loop.run_in_executor(None, work)
    stats = None
    try:
        while True:
            item = await q.get()
            if item is done:
                return
            if isinstance(item, Exception):
                raise item
            stats = item.stats
            yield item
    finally:
        stop.set()  # a client that went away, or the end: either way this generation stops

        # Nothing is awaited here: a disconnect cancels this task, and under anyio every await in a
        # cancelled scope is cancelled again. The turn passes on when the worker thread has ended.
        def ended(_fut):
            last = stats
            while not q.empty():  # the events it made before it saw the cancel
                item = q.get_nowait()
                last = item.stats if hasattr(item, "stats") else last
            if last is not None:
                state.last = {"tokens": last.generated_tokens, "finish": last.finish_reason or "cancelled",
                              "draft_tokens": last.draft_tokens, "accepted_tokens": last.accepted_tokens}
            state.turn.release()

        fut.add_done_callback(ended)


class StopStrings:
    """Stop strings: the text is held back while it could be the start of one, and cut where
    one begins."""

    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.sent, self.text, self.hit = 0, "", False

    def feed(self, piece: str) -> str:
        self.text += piece
        for s in self.stops:
            i = self.text.find(s, max(0, self.sent - len(s)))
            if s and i >= 0:
                self.text, self.hit = self.text[:i], True
        hold = 0 if self.hit else max((n for s in self.stops for n in range(len(s), 0, -1)
                                       if self.text.endswith(s[:n])), default=0)
        out = self.text[self.sent:len(self.text) - hold]
        self.sent += len(out)
        return out

    def rest(self) -> str:
        out = self.text[self.sent:]
        self.sent = len(self.text)
        return out


def _api_error(e: Exception) -> ApiError:
    if isinstance(e, ApiError):
        return e
    if isinstance(e, ModelUnloaded):  # the app loaded another model meanwhile: try again
        return ApiError(503, str(e), "server_error", "model_unloaded")
    if isinstance(e, ContextOverflowError):
        return ApiError(400, str(e), code="context_length_exceeded")
    if isinstance(e, (TandemError, ValueError)):
        return ApiError(400, str(e))
    return ApiError(500, f"{type(e).__name__}: {e}", "server_error")


async def _respond(state: ServerState, req: Sampling, request: Request, kind: str, make: Callable):
    engine = state.engine_getter()
    if engine is None:
        raise ApiError(503, "No model is loaded", "server_error", "no_model")
    cfg = _config(engine, req, state.draft_max)
    stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    rid = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
    created = int(time.time())
    obj = "chat.completion" if kind == "chat" else "text_completion"
    t0 = time.perf_counter()

    def start(engine, stop):
        return make(engine, cfg, stop)

    def choice(text: str, thinking: str, finish):
        if kind == "chat":
            delta = {"content": text} if text else {}
            if thinking:
                delta["reasoning_content"] = thinking
            return {"index": 0, "delta": delta, "finish_reason": finish}
        return {"index": 0, "text": text, "finish_reason": finish}

    def finish_of(stats, stopper) -> str:
        return "stop" if stopper.hit else {"length": "length", "context": "length"}.get(stats.finish_reason, "stop")

    gen = _generate(state, start)
    if req.stream:
        # the first event is awaited here, so what fails before any text (a full queue, a prompt
        # longer than the context) gets its HTTP status, not a 200 with an error inside
        try:
            first = await gen.__anext__()
        except StopAsyncIteration:
            first = None
        except Exception as e:
            await gen.aclose()
            raise _api_error(e) from None

        async def chained():
            if first is not None:
                yield first
                async for ev in gen:
                    yield ev

        async def events():
            stopper, stats = StopStrings(stops), None
            if kind == "chat":  # as OpenAI does: the first chunk says who speaks
                yield {"data": json.dumps({"id": rid, "object": obj + ".chunk", "created": created, "model": state.name,
                                           "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                        "finish_reason": None}]})}
            try:
                async for ev in chained():
                    stats = ev.stats
                    text = stopper.feed(ev.answer if kind == "chat" else ev.answer + ev.thinking)
                    thinking = ev.thinking if kind == "chat" else ""
                    if text or thinking:
                        chunk = {"id": rid, "object": obj + ".chunk" if kind == "chat" else obj, "created": created,
                                 "model": state.name, "choices": [choice(text, thinking, None)]}
                        if req.timings_per_token:
                            chunk["timings"] = _timings(stats)
                        yield {"data": json.dumps(chunk)}
                    if stopper.hit:
                        break
            except Exception as e:
                err = _api_error(e)
                yield {"data": json.dumps({"error": {"message": err.message, "type": err.kind, "code": err.code}})}
                return
            finally:
                await gen.aclose()
            if stats is None:
                return
            tail = stopper.rest()
            final = {"id": rid, "object": obj + ".chunk" if kind == "chat" else obj, "created": created,
                     "model": state.name, "choices": [choice(tail, "", finish_of(stats, stopper))],
                     "timings": _timings(stats)}
            yield {"data": json.dumps(final)}
            if req.stream_options and req.stream_options.include_usage:
                yield {"data": json.dumps({"id": rid, "object": obj + ".chunk" if kind == "chat" else obj,
                                           "created": created, "model": state.name, "choices": [],
                                           "usage": _usage(stats), "timings": _timings(stats)})}
            yield {"data": "[DONE]"}
            state.log(kind=kind, stream=True, tokens=stats.generated_tokens, tps=stats.decode_tps,
                      accepted=stats.acceptance_rate, seconds=time.perf_counter() - t0)

        return EventSourceResponse(events(), ping=15)

    stopper, stats, thinking = StopStrings(stops), None, []
    try:
        async for ev in gen:
            stats = ev.stats
            stopper.feed(ev.answer if kind == "chat" else ev.answer + ev.thinking)
            thinking.append(ev.thinking if kind == "chat" else "")
            if stopper.hit:
                break
            if await request.is_disconnected():
                break
    except Exception as e:
        raise _api_error(e) from None
    finally:
        await gen.aclose()
    text = stopper.text
    if kind == "chat":
        message = {"role": "assistant", "content": text}
        if "".join(thinking):
            message["reasoning_content"] = "".join(thinking)
        ch = {"index": 0, "message": message, "finish_reason": finish_of(stats, stopper)}
    else:
        ch = {"index": 0, "text": text, "finish_reason": finish_of(stats, stopper)}
    state.log(kind=kind, stream=False, tokens=stats.generated_tokens, tps=stats.decode_tps,
              accepted=stats.acceptance_rate, seconds=time.perf_counter() - t0)
    return {"id": rid, "object": obj, "created": created, "model": state.name, "choices": [ch],
            "usage": _usage(stats), "timings": _timings(stats)}


def check_host(host: str, api_key: str | None) -> None:
    if host not in LOOPBACK and not api_key:
        raise ValueError(f"serving on {host} (reachable from other machines) needs --api-key")


def run(engine, model_name: str, host: str = "127.0.0.1", port: int = 8080, api_key: str | None = None,
        cors: str | None = None, queue_size: int = 4, draft_max=AUTO, log_level: str = "warning") -> None:
    """Serve until interrupted (the CLI's `tandem serve`)."""
    import uvicorn

    check_host(host, api_key)
    state = ServerState(lambda: engine, model_name, api_key, queue_size, draft_max,
                        on_log=lambda e: print(f"{e['kind']}: {e['tokens']} tokens, "
                                               f"{(e['tps'] or 0):.1f} tok/s"
                                               + (f", {e['accepted'] * 100:.0f} % accepted" if e['accepted'] is not None
                                                  else "") + f", {e['seconds']:.1f} s", flush=True))
    uvicorn.run(create_app(state, cors), host=host, port=port, log_level=log_level)


class BackgroundServer:
    """The server on a thread of its own, for the app's "Serve on localhost" switch: started and
    stopped at will while the app keeps running. `start` returns once it listens, or raises."""

    def __init__(self, state: ServerState, host: str = "127.0.0.1", port: int = 8080, cors: str | None = None):
        import uvicorn

        check_host(host, state.api_key)
        self.url = f"http://{host}:{port}/v1"
        self.server = uvicorn.Server(uvicorn.Config(create_app(state, cors), host=host, port=port,
                                                    log_level="critical", lifespan="off"))
        self.thread = threading.Thread(target=self._run, name="tandem-serve", daemon=True)
        self.error: str | None = None

    def _run(self) -> None:
        try:
            self.server.run()
        except SystemExit:  # uvicorn exits when it cannot bind
            self.error = "the port is in use or cannot be opened"
        except Exception as e:
            self.error = str(e)

    def start(self, timeout: float = 10.0) -> None:
        self.thread.start()
        t = time.time()
        while not self.server.started and self.thread.is_alive() and time.time() - t < timeout:
            time.sleep(0.02)
        if not self.server.started:
            self.stop()
            raise TandemError(f"cannot serve at {self.url}: {self.error or 'the port is in use or cannot be opened'}")

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(10)
