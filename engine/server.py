"""`tandem serve`: the loaded pair as a local OpenAI-compatible API (FastAPI + uvicorn, SSE with
sse-starlette), so editors (Continue, Zed, Aider, Cline) get MTP speed offline.

Endpoints: GET /health, GET /v1/models, POST /v1/chat/completions and /v1/completions
(streaming and not). Responses carry `usage` and a llama-server-compatible `timings` object
(with `draft_n` / `draft_n_accepted`, and of them lookup's), per chunk with
`"timings_per_token": true`. A request may switch drafting with `"tandem": {"mtp": false}`,
`{"draft_max": 3}` or `{"spec": "lookup"}`, which servers cannot do; Tandem's remote backend
uses it to Compare against one server.

Up to `parallel` generations at once, decoded together in one batch per step (the engine's
scheduler); more requests wait in a bounded queue (503 with Retry-After when it is full); a
client that goes away, queued or running, is dropped at once; the engine's prefix cache (one
per sequence) serves the next request of the same conversation. The engine runs in a worker
thread, never on the event loop. Safe by default: 127.0.0.1, an API key required for any other
address, a body size limit, max_tokens within the context, CORS only when asked, errors in
OpenAI's shape.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from sse_starlette.sse import EventSourceResponse

from . import api_request as rq
from .api_reply import ChoiceReply
from .api_request import ApiError, ChatRequest, CompletionRequest, Sampling
from .errors import ContextOverflowError, ModelUnloaded, TandemError
from .generation import AUTO

MAX_BODY_BYTES = 4 * 2**20
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
HEADER_TIMEOUT_S = 10.0  # a connection whose request headers are not in by then is closed
RETRY_AFTER_S = 1  # what a 503 for a full queue tells the client to wait


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None,
           param: str | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status_code=status,
                        headers=headers)


class LoopbackHosts:
    """A server on a loopback address answers only requests addressed to a loopback name. A web
    page can point a name of its own at 127.0.0.1 (DNS rebinding) and so reach a keyless local
    server from the user's browser; its requests carry that name in `Host` and get a 403.
    (Starlette's TrustedHostMiddleware reads "[::1]:8080" as the host "[", refusing IPv6.)"""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
            try:
                name = urlsplit("//" + host).hostname
            except ValueError:
                name = None
            if name not in LOOPBACK:
                return await _error(403, f"this server answers requests to 127.0.0.1, localhost or [::1] only, "
                                    f"not to {host[:100]!r}", "permission_error", "host_not_allowed")(
                    scope, receive, send)
        return await self.app(scope, receive, send)


class BrowserOrigins:
    """A browser says where a request comes from (`Origin`); other clients send none. A web page
    can POST a "simple" request (text/plain, no preflight) and so make the model run, even if it
    cannot read the answer: requests from any origin but the one allowed with --cors get a 403."""

    def __init__(self, app, allowed: str | None):
        self.app, self.allowed = app, allowed

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            origin = dict(scope.get("headers") or []).get(b"origin")
            if origin is not None and origin.decode("latin-1") != self.allowed:
                return await _error(403, f"requests from web pages ({origin.decode('latin-1')[:100]}) are refused; "
                                    "start the server with --cors ORIGIN to allow one", "permission_error",
                                    "origin_not_allowed")(scope, receive, send)
        return await self.app(scope, receive, send)


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


class BodyLimit:
    """Refuse request bodies over `limit` bytes (413), by Content-Length or as they arrive
    (a chunked body has none), before the application sees them: the body is read here (at
    most `limit` bytes) and handed on whole, since an error raised while the application reads
    would reach the client as FastAPI's 400 "error parsing the body"."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        too_large = _error(413, f"The request body is larger than {self.limit // 2**20} MB")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return await too_large(scope, receive, send)
        chunks, total = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            total += len(chunks[-1])
            if total > self.limit:
                return await too_large(scope, receive, send)
            if not message.get("more_body", False):
                break
        body, replayed = b"".join(chunks), False
        headers = dict(scope.get("headers") or [])
        if body.lstrip()[:1] == b"{" and b"json" not in headers.get(b"content-type", b""):
            # `curl -d '{...}'` says form data; the body is JSON, as llama-server reads it too
            headers[b"content-type"] = b"application/json"
            scope = {**scope, "headers": list(headers.items())}

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # then: the disconnect, when it comes

        await self.app(scope, replay, send)


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
    on_log: Callable[[dict], None] | None = None  # one entry per finished request
    parallel: int = 1  # generations at once (the engine must have as many sequences)
    running: int = 0

    def __post_init__(self):
        self.turn = asyncio.Semaphore(self.parallel)

    @property
    def name(self) -> str:
        return self.model_name() if callable(self.model_name) else self.model_name

    def log(self, **entry) -> None:
        if self.on_log is not None:
            try:
                self.on_log(entry)
            except Exception:
                pass


def _timings(stats) -> dict:
    t = {"prompt_n": stats.prefill_tokens, "prompt_ms": stats.prefill_s * 1e3,
         "prompt_per_second": stats.prefill_tps or 0.0, "predicted_n": stats.generated_tokens,
         "predicted_ms": stats.decode_s * 1e3, "predicted_per_second": stats.decode_tps or 0.0,
         "cache_n": stats.reused_tokens}
    if stats.draft_tokens > 0:  # as llama-server: only when drafts were made
        t.update(draft_n=stats.draft_tokens, draft_n_accepted=stats.accepted_tokens)
        if stats.lookup_draft_tokens:  # Tandem's own: how many of them lookup proposed (and had accepted)
            t.update(draft_n_lookup=stats.lookup_draft_tokens, draft_n_accepted_lookup=stats.lookup_accepted_tokens)
    return t


def _usage(stats) -> dict:
    return {"prompt_tokens": stats.prompt_tokens, "completion_tokens": stats.generated_tokens,
            "total_tokens": stats.prompt_tokens + stats.generated_tokens}


def create_app(state: ServerState, cors: str | None = None, max_body: int = MAX_BODY_BYTES,
               host: str = "127.0.0.1") -> FastAPI:
    """`host`: the address served on; on a loopback one, only loopback Host names are answered."""
    app = FastAPI(title="Tandem", docs_url=None, redoc_url=None, openapi_url=None)
    # plain ASGI middleware: Starlette's BaseHTTPMiddleware would hide a client's disconnect
    # from the streaming response, and a generation nobody reads must stop at once. The last
    # added runs first: the Host check, the page's origin, then CORS (a browser's preflight
    # carries no key, so it must be answered before the key is checked), then the key, then
    # the body's size.
    app.add_middleware(BodyLimit, limit=max_body)
    if state.api_key:
        app.add_middleware(ApiKey, key=state.api_key)
    if cors:
        from fastapi.middleware.cors import CORSMiddleware

        # any request header: SDKs send their own (openai-node: x-stainless-*); the origin is
        # what is checked
        app.add_middleware(CORSMiddleware, allow_origins=[cors], allow_methods=["GET", "POST"], allow_headers=["*"])
    app.add_middleware(BrowserOrigins, allowed=cors)
    if host in LOOPBACK:
        app.add_middleware(LoopbackHosts)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        bad_json = first.get("type") == "json_invalid"
        where = "body" if bad_json else ".".join(str(x) for x in first.get("loc", [])[1:]) or "body"
        what = "the body is not valid JSON" if bad_json else first.get("msg", "invalid")
        if first.get("type") == "extra_forbidden" and where.startswith("tandem."):
            what = "not one of Tandem's options (mtp, draft_max, spec)"
        return _error(400, f"Invalid request: {where}: {what}", param=where if where != "body" else None)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError):
        retry = {"Retry-After": str(RETRY_AFTER_S)} if exc.code == "queue_full" else None
        return _error(exc.status, exc.message, exc.kind, exc.code, exc.param, retry)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):  # 404, 405: OpenAI's shape too
        what = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        detail = exc.detail
        if detail == "There was an error parsing the body":  # FastAPI's words for JSON too deep to read
            detail = "the body is not JSON that can be read (malformed, or nested too deeply)"
        return _error(exc.status_code, f"{request.method} {request.url.path}: {detail}", code=what)

    @app.get("/health")
    async def health():
        return {"status": "ok" if state.engine_getter() is not None else "no model loaded",
                "generating": state.running, "waiting": state.waiting, "last": state.last}

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
        messages = rq.messages(req)
        thinking = bool((req.chat_template_kwargs or {}).get("enable_thinking", False))
        engine = _engine(state)
        tools = rq.tool_use(req, engine, thinking)
        cfg = rq.config(engine, req, "chat", state.draft_max, tools.grammar)
        return await _respond(state, req, request, "chat", cfg, tools, lambda e, cfg, stop: e.chat(
            messages, cfg, thinking, should_stop=stop, tools=tools.tools))

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        cfg = rq.config(_engine(state), req, "text", state.draft_max)
        return await _respond(state, req, request, "text", cfg, rq.ToolUse(), lambda e, cfg, stop: e.generate(
            e.tokenize(req.prompt, add_special=True, parse_special=False), cfg, stop))

    return app


class _ClientGone(Exception):
    """The client went away while its request waited for its turn."""


async def _wait_turn(state: ServerState, gone: Callable | None) -> None:
    """Wait for the engine's turn, watching the client: one that leaves while queued gives
    up its place at once (its prompt is never decoded). Raises _ClientGone then."""
    acquire = asyncio.ensure_future(state.turn.acquire())
    try:
        while True:
            done, _ = await asyncio.wait({acquire}, timeout=0.25)
            if done:
                return acquire.result()
            if gone is not None and await gone():
                raise _ClientGone()
    except BaseException:
        acquire.cancel()
        if acquire.done() and not acquire.cancelled():
            state.turn.release()  # acquired as we gave up: pass it on
        raise


async def _generate(state: ServerState, start: Callable, gone: Callable | None = None):
    """The engine's events for one request, on a worker thread, in turn with the others.
    `gone`: async, true once the client has disconnected."""
    if state.running + state.waiting >= state.parallel + state.queue_size:
        waiting = f"{state.queue_size} request{'' if state.queue_size == 1 else 's'} waiting"
        raise ApiError(503, f"The server is busy ({waiting}); try again shortly",
                       "server_error", "queue_full")
    state.waiting += 1
    try:
        await _wait_turn(state, gone)
    finally:
        state.waiting -= 1
    loop = asyncio.get_running_loop()
    q: asyncio.Queue = asyncio.Queue()
    done = object()
    engine = state.engine_getter()
    if engine is None:
        state.turn.release()
        raise ApiError(503, "No model is loaded", "server_error", "no_model")
    state.running += 1  # from the turn's acquiring on: a request counts once, waiting or running

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
            state.running -= 1
            state.turn.release()

        fut.add_done_callback(ended)


def _api_error(e: Exception) -> ApiError:
    if isinstance(e, ApiError):
        return e
    if isinstance(e, _ClientGone):  # nobody reads this answer (nginx's code for it)
        return ApiError(499, "the client closed the request while it waited", code="client_closed_request")
    if isinstance(e, ModelUnloaded):  # the app loaded another model meanwhile: try again
        return ApiError(503, str(e), "server_error", "model_unloaded")
    if isinstance(e, ContextOverflowError):
        return ApiError(400, str(e), code="context_length_exceeded")
    if isinstance(e, (TandemError, ValueError)):
        return ApiError(400, str(e))
    return ApiError(500, f"{type(e).__name__}: {e}", "server_error")


def _engine(state: ServerState):
    engine = state.engine_getter()
    if engine is None:
        raise ApiError(503, "No model is loaded", "server_error", "no_model")
    return engine


def _sum_usage(all_stats) -> dict:
    """n choices of one prompt: the prompt counts once, as OpenAI counts it."""
    done = sum(s.generated_tokens for s in all_stats)
    prompt = all_stats[0].prompt_tokens if all_stats else 0
    return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}


async def _respond(state: ServerState, req: Sampling, request: Request, kind: str, cfg, tools: rq.ToolUse,
                   make: Callable):
    """The reply to one request: `req.n` choices, one generation after another, whole or streamed."""
    engine = _engine(state)
    stops = rq.stop_strings(req)
    rid = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
    created = int(time.time())
    obj = "chat.completion" if kind == "chat" else "text_completion"
    chunk_obj = obj + ".chunk" if kind == "chat" else obj
    echo = req.prompt if kind == "text" and getattr(req, "echo", False) else ""
    t0 = time.perf_counter()
    done: list = []  # each finished choice's stats

    def reply() -> ChoiceReply:
        return ChoiceReply(kind, stops, engine.token_bytes, tools.names, tools.parallel, cfg.logprobs is not None)

    def generation(i: int):  # with a seed, each choice has its own (seed + i), so choices differ
        c = cfg if cfg.seed is None or i == 0 else replace(cfg, seed=cfg.seed + i)
        return _generate(state, lambda e, stop: make(e, c, stop), request.is_disconnected)

    def log(stream: bool) -> None:
        s = done[-1]
        state.log(kind=kind, stream=stream, tokens=sum(x.generated_tokens for x in done), tps=s.decode_tps,
                  accepted=s.acceptance_rate, seconds=time.perf_counter() - t0)

    if not req.stream:
        choices = []
        for i in range(req.n):
            r, gen = reply(), generation(i)
            try:
                async for ev in gen:
                    r.feed(ev)
                    if r.hit or await request.is_disconnected():
                        break
            except Exception as e:
                raise _api_error(e) from None
            finally:
                await gen.aclose()
            m = r.message()
            if echo:
                m["text"] = echo + m["text"]
            choices.append({"index": i, **m, "finish_reason": r.finish_reason()})
            done.append(r.stats)
        log(False)
        return {"id": rid, "object": obj, "created": created, "model": state.name, "choices": choices,
                "usage": _sum_usage(done), "timings": _timings(done[-1])}

    # the first event is awaited here, so what fails before any text (a full queue, a prompt
    # longer than the context) gets its HTTP status, not a 200 with an error inside
    gen0 = generation(0)
    try:
        first = await gen0.__anext__()
    except StopAsyncIteration:
        first = None
    except Exception as e:
        await gen0.aclose()
        raise _api_error(e) from None

    def chunk(choices: list, **extra) -> dict:
        return {"data": json.dumps({"id": rid, "object": chunk_obj, "created": created, "model": state.name,
                                    "choices": choices, **extra})}

    async def chained(first, gen):
        if first is not None:
            yield first
            async for ev in gen:
                yield ev

    async def choice(i: int, gen, first):
        r = reply()
        if kind == "chat":  # as OpenAI does: the first chunk says who speaks
            yield chunk([{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                          "finish_reason": None}])
        elif echo:
            yield chunk([{"index": i, "text": echo, "logprobs": None, "finish_reason": None}])
        try:
            async for ev in chained(first, gen):
                calls, offset = len(r.calls), len(echo) + r.stopper.sent
                for part in r.deltas(r.feed(ev), calls, offset):
                    extra = {"timings": _timings(ev.stats)} if req.timings_per_token else {}
                    yield chunk([{"index": i, **part, "finish_reason": None}], **extra)
                if r.hit:
                    break
        finally:
            await gen.aclose()
        if r.stats is None:
            return
        tail = r.rest()
        last = {"delta": {"content": tail} if tail else {}} if kind == "chat" else {"text": tail}
        yield chunk([{"index": i, **last, "logprobs": None, "finish_reason": r.finish_reason()}],
                    timings=_timings(r.stats))
        done.append(r.stats)

    async def events():
        try:
            for i in range(req.n):
                gen = gen0 if i == 0 else generation(i)
                async for c in choice(i, gen, first if i == 0 else await gen.__anext__()):
                    yield c
        except Exception as e:
            err = _api_error(e)
            yield {"data": json.dumps({"error": {"message": err.message, "type": err.kind, "code": err.code}})}
            return
        if not done:
            return
        if req.stream_options and req.stream_options.include_usage:
            yield chunk([], usage=_sum_usage(done), timings=_timings(done[-1]))
        yield {"data": "[DONE]"}
        log(True)

    return EventSourceResponse(events(), ping=15)

def _header_deadline_protocol():
    """uvicorn's h11 protocol, closing a connection whose request headers are not in within
    HEADER_TIMEOUT_S: uvicorn's own keep-alive timeout starts only after a response, so a
    client that opens connections and never finishes its headers would hold them forever."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadline(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._deadline = self.loop.call_later(HEADER_TIMEOUT_S, self._headers_late)

        def _headers_late(self) -> None:
            if self.cycle is None and not self.transport.is_closing():  # no request read yet
                self.transport.close()

        def connection_lost(self, exc) -> None:
            self._deadline.cancel()
            super().connection_lost(exc)

    return HeaderDeadline


def _uvicorn_config(state: ServerState, host: str, port: int, cors: str | None, **kw):
    import uvicorn

    return uvicorn.Config(create_app(state, cors, host=host), host=host, port=port,
                          http=_header_deadline_protocol(), **kw)


def check_host(host: str, api_key: str | None) -> None:
    if host not in LOOPBACK and not api_key:
        raise ValueError(f"serving on {host} (reachable from other machines) needs --api-key")


def run(engine, model_name: str, host: str = "127.0.0.1", port: int = 8080, api_key: str | None = None,
        cors: str | None = None, queue_size: int = 4, draft_max=AUTO, log_level: str = "warning",
        parallel: int = 1) -> None:
    """Serve until interrupted (the CLI's `tandem serve`)."""
    import uvicorn

    check_host(host, api_key)
    state = ServerState(lambda: engine, model_name, api_key, queue_size, draft_max, parallel=parallel,
                        on_log=lambda e: print(f"{e['kind']}: {e['tokens']} tokens, "
                                               f"{(e['tps'] or 0):.1f} tok/s"
                                               + (f", {e['accepted'] * 100:.0f} % accepted" if e['accepted'] is not None
                                                  else "") + f", {e['seconds']:.1f} s", flush=True))
    uvicorn.Server(_uvicorn_config(state, host, port, cors, log_level=log_level)).run()


class BackgroundServer:
    """The server on a thread of its own, for the app's "Serve on localhost" switch: started and
    stopped at will while the app keeps running. `start` returns once it listens, or raises."""

    def __init__(self, state: ServerState, host: str = "127.0.0.1", port: int = 8080, cors: str | None = None):
        import uvicorn

        check_host(host, state.api_key)
        self.url = f"http://{host}:{port}/v1"
        self.server = uvicorn.Server(_uvicorn_config(state, host, port, cors, log_level="critical", lifespan="off"))
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
