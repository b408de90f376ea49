"""The HTTP layer of `tandem serve`: the middlewares every request passes (Host names, browser
origins, CORS, the API key, the body's size), uvicorn's configuration, and running the server
in the foreground (the CLI) or on a thread of its own (the app's switch).

Plain ASGI middleware: Starlette's BaseHTTPMiddleware would hide a client's disconnect from the
streaming response, and a generation nobody reads must stop at once.
"""

from __future__ import annotations

import asyncio
import hmac
import re
from urllib.parse import urlsplit

from .errors import ApiError, error_response

MAX_BODY_BYTES = 4 * 2**20
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
HEADER_TIMEOUT_S = 10.0  # a connection whose request headers are not in by then is closed
# and a body not in by then, once its headers are, is a 408 (4 MB at 1 Mbit/s takes 34 s)
BODY_TIMEOUT_S = 60.0
# --cors localhost (llama-server's word): a page served from this computer, on any port
LOOPBACK_ORIGIN = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"


def _refuse(scope, status: int, message: str, kind: str, code: str):
    return error_response(scope.get("path", ""), ApiError(status, message, kind, code))


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
                return await _refuse(scope, 403, f"this server answers requests to 127.0.0.1, localhost or [::1] "
                                     f"only, not to {host[:100]!r}", "permission_error", "host_not_allowed")(
                    scope, receive, send)
        return await self.app(scope, receive, send)


class Origins:
    """The browser origins --cors allows: exact origins, `*` (any), or `localhost` (any page
    served from this computer, whatever its port)."""

    def __init__(self, allowed: list[str] | None):
        self.allowed = [a.rstrip("/") for a in allowed or []]
        self.any = "*" in self.allowed
        self.loopback = "localhost" in self.allowed
        self.exact = [a for a in self.allowed if a not in ("*", "localhost")]

    def __bool__(self) -> bool:
        return bool(self.allowed)

    def allows(self, origin: str) -> bool:
        return self.any or origin in self.exact or (self.loopback and re.fullmatch(LOOPBACK_ORIGIN, origin) is not None)

    def cors_options(self) -> dict:
        """CORSMiddleware's arguments for the same origins."""
        if self.any:
            return {"allow_origins": ["*"]}
        return {"allow_origins": self.exact, "allow_origin_regex": LOOPBACK_ORIGIN if self.loopback else None}


class BrowserOrigins:
    """A browser says where a request comes from (`Origin`); other clients send none. A web page
    can POST a "simple" request (text/plain, no preflight) and so make the model run, even if it
    cannot read the answer: requests from any origin but those allowed with --cors get a 403."""

    def __init__(self, app, origins: Origins):
        self.app, self.origins = app, origins

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            origin = dict(scope.get("headers") or []).get(b"origin")
            if origin is not None and not self.origins.allows(origin.decode("latin-1")):
                return await _refuse(scope, 403, f"requests from web pages ({origin.decode('latin-1')[:100]}) are "
                                     "refused; start the server with --cors ORIGIN to allow one", "permission_error",
                                     "origin_not_allowed")(scope, receive, send)
        return await self.app(scope, receive, send)


def carries_key(headers: dict, key: str) -> bool:
    """The request's headers (raw ASGI ones) carry `key`, as a bearer token or as x-api-key,
    compared in constant time."""
    bearer_ok = hmac.compare_digest(headers.get(b"authorization", b""), f"Bearer {key}".encode())
    key_ok = hmac.compare_digest(headers.get(b"x-api-key", b""), key.encode())
    return bearer_ok or key_ok


class ApiKey:
    """Every path but /health needs the key, as 'Authorization: Bearer <key>' (OpenAI's clients)
    or 'x-api-key: <key>' (Anthropic's), compared in constant time."""

    def __init__(self, app, key: str):
        self.app, self.key = app, key

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope.get("path") != "/health":
            if not carries_key(dict(scope.get("headers") or []), self.key):
                return await _refuse(scope, 401, "Invalid API key: send it as 'Authorization: Bearer <key>' or "
                                     "'x-api-key: <key>'", "authentication_error", "invalid_api_key")(
                    scope, receive, send)
        return await self.app(scope, receive, send)


class BodyLimit:
    """Refuse request bodies over `limit` bytes (413), by Content-Length or as they arrive
    (a chunked body has none), before the application sees them: the body is read here (at
    most `limit` bytes) and handed on whole, since an error raised while the application reads
    would reach the client as FastAPI's 400 "error parsing the body". A body that is not all in
    within `timeout` seconds is a 408: a client sending a byte now and then would hold its
    connection, and its place in the server, for ever."""

    def __init__(self, app, limit: int, timeout: float = BODY_TIMEOUT_S):
        self.app, self.limit, self.timeout = app, limit, timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        too_large = _refuse(scope, 413, f"The request body is larger than {self.limit // 2**20} MB",
                            "invalid_request_error", "request_too_large")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return await too_large(scope, receive, send)
        try:
            async with asyncio.timeout(self.timeout):
                body = await self._read(receive)
        except TimeoutError:
            return await _refuse(scope, 408, f"The request body did not arrive within {self.timeout:g} s",
                                 "invalid_request_error", "request_timeout")(scope, receive, send)
        if body is None:  # the client went away
            return
        if len(body) > self.limit:
            return await too_large(scope, receive, send)
        replayed = False
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

    async def _read(self, receive) -> bytes | None:
        """The body, or None if the client went away; at most one chunk past the limit."""
        chunks, total = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunks.append(message.get("body", b""))
            total += len(chunks[-1])
            if total > self.limit or not message.get("more_body", False):
                return b"".join(chunks)


def add_middlewares(app, api_key: str | None, origins: Origins, max_body: int, host: str | list[str]) -> None:
    """The last added runs first: the Host check, the page's origin, then CORS (a browser's
    preflight carries no key, so it must be answered before the key is checked), then the key,
    then the body's size."""
    app.add_middleware(BodyLimit, limit=max_body)
    if api_key:
        app.add_middleware(ApiKey, key=api_key)
    if origins:
        from fastapi.middleware.cors import CORSMiddleware

        # any request header: SDKs send their own (openai-node: x-stainless-*; Anthropic's:
        # x-api-key, anthropic-version); the origin is what is checked
        app.add_middleware(CORSMiddleware, allow_methods=["GET", "POST"], allow_headers=["*"],
                           **origins.cors_options())
    app.add_middleware(BrowserOrigins, origins=origins)
    if all(h in LOOPBACK for h in ([host] if isinstance(host, str) else host)):
        app.add_middleware(LoopbackHosts)


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


def uvicorn_config(app, host: str, port: int, **kw):
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, http=_header_deadline_protocol(), **kw)


def listening_socket(host: str, port: int):
    """A socket bound to host:port and listening, as uvicorn binds one (for serving on several)."""
    import socket

    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # this address only, as asked
    sock.bind(addr)
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def check_host(host: str, api_key: str | None, cors: list[str] | str | None = None) -> None:
    """Refuse, before anything loads, what would open the model to others without a key: an
    address other machines reach, or `--cors '*'` (any web page the user opens could use it)."""
    if host not in LOOPBACK and not api_key:
        raise ValueError(f"serving on {host} (reachable from other machines) needs --api-key")
    origins = [cors] if isinstance(cors, str) else (cors or [])
    if "*" in origins and not api_key:
        raise ValueError("--cors '*' lets any web page you open use the model: it needs --api-key (or name the "
                         "origins, or localhost for this computer's pages)")
