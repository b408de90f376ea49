"""llama-server's native completion (`POST /completion`, and `/completions` without `/v1`, as
llama-server has it): a prompt as text or token ids, `n_predict`, and the reply as `content`
with llama-server's fields (`tokens_predicted`, `tokens_evaluated`, `stop_type`,
`stopping_word`, `tokens_cached`, `timings`), whole or streamed as `data:` chunks ending in
one with `"stop": true`. The sampling fields are the OpenAI route's, so the same request
checks apply; `n_probs` and `ignore_eos` are refused by name.
"""

from __future__ import annotations

import json
import time

from fastapi import APIRouter, Request
from pydantic import Field
from sse_starlette.sse import EventSourceResponse

from . import request as rq
from .admission import ServerState, watched
from .choice import Choice, off_loop, timings
from .errors import ApiError, from_exception
from .request import CompletionRequest, _Loose


class NativeRequest(_Loose):
    prompt: str | list[int]
    n_predict: int = Field(default=-1, ge=-1)  # -1: until the model ends or the context is full
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repeat_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None
    stop: list[str] | None = None
    logit_bias: list | dict | None = None
    stream: bool = False
    n_probs: int = 0
    ignore_eos: bool = False
    cache_prompt: bool = True  # the prefix cache is always on
    tandem: dict | None = None


def _bias(bias) -> dict | None:
    """llama-server's [[token, bias], ...] (false: never) as OpenAI's {"token": bias}."""
    if bias is None or isinstance(bias, dict):
        return bias
    try:
        return {str(int(t)): (-100.0 if b is False else float(b)) for t, b in bias}
    except (TypeError, ValueError):
        raise ApiError(400, "logit_bias must be [[token id, bias], ...]", param="logit_bias") from None


def completion_request(req: NativeRequest) -> CompletionRequest:
    if req.n_probs:
        raise ApiError(400, "'n_probs' is not supported by tandem serve; use /v1/completions with logprobs",
                       code="unsupported_parameter", param="n_probs")
    if req.ignore_eos:
        raise ApiError(400, "'ignore_eos' is not supported by tandem serve: a reply ends where the model ends it",
                       code="unsupported_parameter", param="ignore_eos")
    body = {"prompt": req.prompt if isinstance(req.prompt, str) else "",
            "max_tokens": req.n_predict if req.n_predict > 0 else 2**31 - 1, "stop": req.stop, "seed": req.seed,
            "logit_bias": _bias(req.logit_bias), "tandem": req.tandem}
    for name in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty"):
        if getattr(req, name) is not None:
            body[name] = getattr(req, name)
    return rq.translated(CompletionRequest, body)


def _final(state: ServerState, r, prompt_text: str, cfg) -> dict:
    s = r.stats
    why = "word" if r.stopper.hit else "limit" if s.finish_reason in ("length", "context") else "eos"
    sp = cfg.sampling
    settings = {"n_predict": cfg.max_tokens, "temperature": sp.temperature, "top_k": sp.top_k, "top_p": sp.top_p,
                "min_p": sp.min_p, "seed": cfg.seed, "stop": r.stopper.stops}
    return {"content": r.text, "id_slot": 0, "stop": True, "model": state.name, "tokens_predicted": s.generated_tokens,
            "tokens_evaluated": s.prompt_tokens, "generation_settings": settings, "prompt": prompt_text,
            "has_new_line": "\n" in r.text, "truncated": False, "stop_type": why,
            "stopping_word": r.stopper.matched or "", "tokens_cached": s.reused_tokens, "timings": timings(s)}


def router(state: ServerState) -> APIRouter:
    r = APIRouter()

    @r.post("/completion")
    @r.post("/completions")
    async def completion(req: NativeRequest, request: Request):
        engine = state.engine()
        creq = completion_request(req)
        cfg = rq.config(engine, creq, "text", state.draft_max)
        if isinstance(req.prompt, str):
            tokens = await off_loop(engine.tokenize, req.prompt, True, False)
            prompt_text = req.prompt
        else:
            bad = [t for t in req.prompt if not 0 <= t < engine.n_vocab]
            if bad:
                raise ApiError(400, f"prompt: token {bad[0]} is outside the vocabulary", param="prompt")
            tokens, prompt_text = list(req.prompt), await off_loop(engine.detokenize, req.prompt)
        t0 = time.perf_counter()
        choice = await Choice.open(state, request, "text", cfg, rq.ToolUse(), rq.stop_strings(creq),
                                   lambda e, cfg, sink: e.generate(tokens, cfg, sink=sink))
        if not req.stream:
            rep = await choice.run(request)
            state.finished("completion", [rep.stats], False, time.perf_counter() - t0)
            return _final(state, rep, prompt_text, cfg)

        async def events():
            try:
                async for d in choice.deltas():
                    if d.text:
                        yield {"data": json.dumps({"content": d.text, "stop": False, "id_slot": 0})}
            except Exception as e:
                err = from_exception(e)
                state.note("completion", f"{err.status}: {err.message}")
                yield {"data": json.dumps({"error": {"code": err.status, "message": err.message, "type": err.kind}})}
                return
            tail = choice.reply.rest()
            yield {"data": json.dumps({**_final(state, choice.reply, prompt_text, cfg), "content": tail})}
            state.finished("completion", [choice.reply.stats], True, time.perf_counter() - t0)

        return EventSourceResponse(watched(state, "completion", events()), ping=15)

    return r
