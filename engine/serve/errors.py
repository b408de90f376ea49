"""Errors of `tandem serve`, each in the shape of the API it answers: OpenAI's
`{"error": {message, type, param, code}}` for the OpenAI routes, llama-server's
`{"error": {code: the HTTP status, message, type}}` (with `param`) for its own routes (/completion,
/tokenize, /slots, ...), Anthropic's `{"type": "error", "error": {type, message}}` for
/v1/messages. One exception, ApiError, is raised everywhere; the shape is chosen by the request's
path, so middlewares (key, origin, body size) answer a Claude Code request in Anthropic's envelope too.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

from ..errors import ContextOverflowError, ModelUnloaded, TandemError

# Anthropic's error types by HTTP status (their docs' table); OpenAI's `type` is kept in `code`
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                   404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large",
                   429: "rate_limit_error", 499: "invalid_request_error", 500: "api_error",
                   503: "overloaded_error", 408: "timeout_error"}


class ApiError(Exception):
    """`extra`: more fields for the error object (llama-server's n_prompt_tokens and n_ctx)."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", code: str | None = None,
                 param: str | None = None, extra: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.code, self.param = status, message, kind, code, param
        self.extra = extra or {}


def unsupported(field: str, why: str = "") -> ApiError:
    return ApiError(400, f"{field!r} is not supported by tandem serve{': ' + why if why else ''}; leave it out",
                    code="unsupported_parameter", param=field)


class ClientGone(Exception):
    """The client went away before the reply began (waiting for its turn, or during the prefill)."""


# llama-server's own routes (not OpenAI's): their errors carry the HTTP status as `code`, as its do
LLAMA_ROUTES = ("/completion", "/completions", "/tokenize", "/detokenize", "/apply-template", "/props", "/slots",
                "/metrics", "/health")


def is_anthropic(path: str) -> bool:
    return path.rstrip("/").startswith(("/v1/messages", "/messages"))


def error_body(path: str, e: ApiError) -> dict:
    if is_anthropic(path):
        message = e.message
        if e.code == "context_length_exceeded" and "n_prompt_tokens" in e.extra:
            # Anthropic's own words, which agents (Claude Code) look for to compact the conversation
            message = f"prompt is too long: {e.extra['n_prompt_tokens']} tokens > {e.extra['n_ctx']} maximum ({message})"
        return {"type": "error", "error": {"type": ANTHROPIC_TYPES.get(e.status, "api_error"), "message": message}}
    if path.rstrip("/") in LLAMA_ROUTES:
        return {"error": {"code": e.status, "message": e.message, "type": e.kind, "param": e.param, **e.extra}}
    return {"error": {"message": e.message, "type": e.kind, "param": e.param, "code": e.code, **e.extra}}


def error_response(path: str, e: ApiError, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(error_body(path, e), status_code=e.status, headers=headers)


def from_exception(e: Exception) -> ApiError:
    """What the engine (or waiting for it) raised, as the error the client gets."""
    if isinstance(e, ApiError):
        return e
    if isinstance(e, ClientGone):  # nobody reads this answer (nginx's code for it)
        return ApiError(499, "the client went away before the reply began", code="client_closed_request")
    if isinstance(e, ModelUnloaded):  # the app loaded another model meanwhile: try again
        return ApiError(503, str(e), "server_error", "model_unloaded")
    if isinstance(e, ContextOverflowError):  # llama-server's shape: clients read the numbers to trim
        return ApiError(400, str(e), "exceed_context_size_error", "context_length_exceeded",
                        extra={"n_prompt_tokens": e.needed, "n_ctx": e.n_ctx})
    if isinstance(e, (TandemError, ValueError)):
        return ApiError(400, str(e))
    return ApiError(500, f"{type(e).__name__}: {e}", "server_error")
