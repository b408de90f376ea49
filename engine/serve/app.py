"""The `tandem serve` application: the HTTP layer's middlewares, one router per API, and errors
in each API's own shape.

APIs (each a module translating its request into the engine's chat and the reply assembler's
Deltas back into its shapes):
  openai_api     POST /v1/chat/completions, /v1/completions (and unprefixed)
  anthropic_api  POST /v1/messages, /v1/messages/count_tokens (Claude Code, the anthropic SDK)
  responses_api  POST /v1/responses, /v1/responses/input_tokens (Codex, the OpenAI Agents SDK)
  llama_api      /health, /v1/models, /tokenize, /detokenize, /apply-template, /props, /metrics,
                 /v1/chat/completions/input_tokens (llama-server's)
  native_api     POST /completion and /completions (llama-server's native completion)
Every reply carries llama-server's `timings` where its API has room for them (OpenAI's shapes),
with Tandem's per-source draft counts; a request may switch drafting with `"tandem": {...}`.
"""

from __future__ import annotations

import logging
import signal
import threading
import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import TandemError
from ..generation import AUTO
from . import anthropic_api, llama_api, native_api, openai_api, responses_api
from .admission import RETRY_AFTER_S, ServerState, api_of, log_line
from .errors import ApiError, error_response
from .http import MAX_BODY_BYTES, Origins, add_middlewares, check_host, listening_socket, uvicorn_config

log = logging.getLogger("tandem.serve")


def create_app(state: ServerState, cors: list[str] | str | None = None, max_body: int = MAX_BODY_BYTES,
               host: str | list[str] = "127.0.0.1") -> FastAPI:
    """`host`: the addresses served on; on loopback ones only, only loopback Host names are answered.
    `cors`: the browser origins allowed (exact, `*`, or `localhost` for any page of this computer)."""
    app = FastAPI(title="Tandem", docs_url=None, redoc_url=None, openapi_url=None)
    add_middlewares(app, state.api_key, Origins([cors] if isinstance(cors, str) else cors), max_body, host)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        bad_json = first.get("type") == "json_invalid"
        where = "body" if bad_json else ".".join(str(x) for x in first.get("loc", [])[1:]) or "body"
        what = "the body is not valid JSON" if bad_json else first.get("msg", "invalid")
        if first.get("type") == "extra_forbidden" and where.startswith("tandem."):
            what = "not one of Tandem's options (mtp, draft_max, spec)"
        error = ApiError(400, f"Invalid request: {where}: {what}", param=where if where != "body" else None)
        state.note(api_of(request.url.path), f"400: {error.message}")
        return error_response(request.url.path, error)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError):
        retry = {"Retry-After": str(RETRY_AFTER_S)} if exc.code == "queue_full" else None
        state.note(api_of(request.url.path), f"{exc.status}: {exc.message}")
        return error_response(request.url.path, exc, retry)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):  # 404, 405: the API's shape too
        what = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        detail = exc.detail
        if detail == "There was an error parsing the body":  # FastAPI's words for JSON too deep to read
            detail = "the body is not JSON that can be read (malformed, or nested too deeply)"
        return error_response(request.url.path, ApiError(exc.status_code, f"{request.method} {request.url.path}: "
                                                                          f"{detail}", code=what))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        """Any error no route expected: logged with its traceback, and answered in the API's own
        shape (a client reads a 500 it can parse, not Starlette's plain text)."""
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        error = ApiError(500, f"internal error ({type(exc).__name__}); the server's log has the details",
                         "server_error", "internal_error")
        state.note(api_of(request.url.path), f"500: {type(exc).__name__}: {exc}")
        return error_response(request.url.path, error)

    for api in (llama_api, native_api, openai_api, anthropic_api, responses_api):
        app.include_router(api.router(state))
    return app


def run(engine, model_name: str, host: str | list[str] = "127.0.0.1", port: int = 8080, api_key: str | None = None,
        cors: list[str] | None = None, queue_size: int = 4, draft_max=AUTO, log_level: str = "warning",
        aliases: list[str] = (), tags: list[str] = ()) -> None:
    """Serve until interrupted (the CLI's `tandem serve`), on one address or several (llama-server's
    --host a,b); `aliases` and `tags`: what /v1/models lists beside the name."""
    import uvicorn

    hosts = [host] if isinstance(host, str) else list(host)
    for h in hosts:
        check_host(h, api_key, cors)

    state = ServerState(lambda: engine, model_name, api_key, queue_size, draft_max,
                        on_log=lambda e: print(log_line(e), flush=True), aliases=list(aliases), tags=list(tags))
    server = uvicorn.Server(uvicorn_config(create_app(state, cors, host=hosts), hosts[0], port, log_level=log_level))
    if threading.current_thread() is threading.main_thread():
        # uvicorn shuts down on SIGTERM, then raises the signal again with the handler that was
        # there before it: the default one killed the process before the caller closed the
        # engine (and saved the prompt cache to disk); this one ends it as a clean exit
        signal.signal(signal.SIGTERM, _exit_cleanly)
    server.run(sockets=[listening_socket(h, port) for h in hosts] if len(hosts) > 1 else None)


def _exit_cleanly(signum, frame):
    raise SystemExit(0)


class BackgroundServer:
    """The server on a thread of its own, for the app's "Serve on localhost" switch: started and
    stopped at will while the app keeps running. `start` returns once it listens, or raises."""

    def __init__(self, state, host: str = "127.0.0.1", port: int = 8080, cors: list[str] | None = None):
        import uvicorn

        check_host(host, state.api_key, cors)
        self.url = f"http://{host}:{port}/v1"
        self.server = uvicorn.Server(uvicorn_config(create_app(state, cors, host=host), host, port,
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
