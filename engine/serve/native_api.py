"""llama-server's native completion (`POST /completion`, and `/completions` without `/v1`, as
llama-server has it). The prompt is text (special tokens read, as llama-server reads them), token
ids, both mixed in one list, `{"prompt_string": ...}`, or a list of those: a batch, answered as a
list (streamed: each chunk carries its `index`). The reply is `content` with llama-server's fields
(`tokens_predicted`, `tokens_evaluated`, `stop_type`, `stopping_word`, `tokens_cached`,
`generation_settings`, `timings`; `tokens` with `return_tokens`; `completion_probabilities`
with `n_probs`; only `response_fields` when asked), whole or streamed as `data:` chunks, one
per token (its id in `tokens`), ending in one with `"stop": true`.

Sampling takes the OpenAI route's checks, and llama-server's own forms: `logit_bias` as
[[token id or text, bias or false], ...] or {"id or text": bias}, `ignore_eos`, `repeat_last_n`,
`samplers` (which of Tandem's samplers run; their order is Tandem's). llama-server's fields for
what Tandem does not do (mirostat, DRY, XTC, typical-p, LoRA, prompt progress, ...) are
refused by name unless they say "off"; none is silently ignored.
"""

from __future__ import annotations

import contextlib
import json
import time
import weakref
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request
from pydantic import ConfigDict, Field
from sse_starlette.sse import EventSourceResponse

from ..generation import MAX_LOGPROBS
from ..gemma4.reply import ReplyAssembler
from . import request as rq
from .admission import ServerState, admit, watched
from .choice import Choice, merged, off_loop, open_together, timings
from .errors import ApiError, from_exception
from .request import MAX_CHOICES, CompletionRequest, _Loose

BAN = float("-inf")  # llama-server's `false` (and ignore_eos): the token is never sampled (null in JSON)

# llama-server's fields for what Tandem does not do, with what says "off" there: any other value
# is a 400 naming the field. Fields that act only through one of these (dry_base with
# dry_multiplier, mirostat_tau with mirostat, xtc_threshold with xtc_probability, ...) or that
# change nothing in the answer (n_keep, n_discard: Tandem never shifts the context; cache_prompt,
# n_cache_reuse, backend_sampling) are taken as they are.
OFF: dict[str, tuple[Any, str]] = {
    "mirostat": (lambda v: v == 0, "it has no Mirostat sampling"),
    "dry_multiplier": (lambda v: v == 0, "it has no DRY sampling"),
    "xtc_probability": (lambda v: v <= 0, "it has no XTC sampling"),
    "typical_p": (lambda v: v >= 1, "it has no locally typical sampling"),
    "top_n_sigma": (lambda v: v < 0, "it has no top-n-sigma sampling"),
    "dynatemp_range": (lambda v: v <= 0, "it has no dynamic temperature"),
    "min_keep": (lambda v: v <= 1, "its samplers keep at least one token"),
    "n_indent": (lambda v: v == 0, "it does not check indentation"),
    "t_max_predict_ms": (lambda v: v <= 0, "it has no time limit on the prediction"),
    "n_cmpl": (lambda v: v == 1, "one completion per prompt here; /v1/completions takes n"),
    "n": (lambda v: v == 1, "one completion per prompt here; /v1/completions takes n"),
    "lora": (lambda v: not v, "it loads no LoRA adapters"),
    "grammar_lazy": (lambda v: not v, "its grammars apply from the start"),
    "grammar_triggers": (lambda v: not v, "its grammars apply from the start"),
    "preserved_tokens": (lambda v: not v, "it has no preserved tokens"),
    "reasoning_budget_tokens": (lambda v: v == -1, "it has no reasoning budget"),
    "reasoning_control": (lambda v: not v, "it has no reasoning control"),
    "echo": (lambda v: not v, "the prompt comes back in `prompt`"),
    "verbose": (lambda v: not v, "it writes no __verbose"),
    "return_progress": (lambda v: not v, "it sends no prompt progress"),
    "post_sampling_probs": (lambda v: not v, "n_probs gives the model's probabilities, before sampling"),
    "id_slot": (lambda v: v == -1, "it chooses the slot that holds the longest part of the prompt"),
}

# the samplers Tandem applies, in its order (engine/sampling.py); llama-server's names for them,
# and for those it has and Tandem has not (each a no-op at its "off" value, which OFF checks)
CHAIN = ("penalties", "top_k", "top_p", "min_p", "temperature")
OTHERS = ("dry", "top_n_sigma", "typ_p", "xtc")
ALIASES = {"nucleus": "top_p", "temp": "temperature", "typ": "typ_p", "typical_p": "typ_p", "topk": "top_k",
           "topp": "top_p", "minp": "min_p", "typp": "typ_p", "topnsigma": "top_n_sigma"}
LETTERS = {"e": "penalties", "k": "top_k", "p": "top_p", "m": "min_p", "t": "temperature", "d": "dry",
           "s": "top_n_sigma", "y": "typ_p", "x": "xtc", "i": "infill", "a": "adaptive_p"}


class NativeRequest(_Loose):
    model_config = ConfigDict(extra="allow")  # llama-server's other fields: checked against OFF

    prompt: Any  # text, token ids, both mixed, {"prompt_string": ...}, or a list of those (a batch)
    n_predict: int | None = Field(default=None, ge=-1)  # -1: until the model ends or the context is full
    max_tokens: int | None = Field(default=None, ge=-1)  # llama-server's other names for n_predict
    max_completion_tokens: int | None = Field(default=None, ge=-1)
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repeat_penalty: float | None = None
    repeat_last_n: int | None = Field(default=None, ge=-1)  # -1: the whole context
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None  # -1: random
    stop: str | list[str] | None = None
    logit_bias: list | dict | None = None
    ignore_eos: bool = False
    samplers: list[str] | str | None = None
    grammar: str | None = None
    json_schema: Any = None
    response_format: dict | None = None
    n_probs: int | None = Field(default=None, ge=0)
    logprobs: int | None = Field(default=None, ge=0)  # llama-server's other name for n_probs
    return_tokens: bool = False
    response_fields: list[str] | None = None
    timings_per_token: bool = False
    stream: bool = False
    sse_ping_interval: int | None = None  # seconds between keep-alive comments; <= 0: none
    cache_prompt: bool = True  # the prefix cache is always on: it changes no answer
    tandem: dict | None = None


# ---- the request --------------------------------------------------------------------------
def check_off(req: NativeRequest) -> None:
    for name, value in (req.model_extra or {}).items():
        if name in OFF and value is not None:
            off, what = OFF[name]
            try:
                ok = off(value)
            except TypeError:
                ok = False
            if not ok:
                raise ApiError(400, f"{name!r} = {json.dumps(value)[:40]} is not supported by tandem serve ({what}); "
                                    "leave it out",
                               code="unsupported_parameter", param=name)


def _is_id(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def token_bias(engine, bias) -> dict[int, float]:
    """llama-server's logit_bias, {token id: bias}: [[id or text, bias or false], ...] or
    {"id or text": bias}; a text biases each of its tokens (tokenized as plain text)."""
    if bias is None:
        return {}
    if isinstance(bias, dict):
        pairs = list(bias.items())
    elif all(isinstance(p, list) and len(p) == 2 for p in bias):
        pairs = [tuple(p) for p in bias]
    else:
        raise ApiError(400, "logit_bias must be [[token id or text, bias], ...] or {\"token id or text\": bias}",
                       param="logit_bias")
    out = {}
    for key, value in pairs:
        if value is False:
            value = BAN
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ApiError(400, f"logit_bias: the bias of {str(key)[:40]!r} must be a number or false",
                           param="logit_bias")
        if _is_id(key) or (isinstance(key, str) and key.isdigit()):
            ids = [int(key)]
        elif isinstance(key, str):
            ids = engine.tokenize(key, False, False)
        else:
            raise ApiError(400, f"logit_bias: {str(key)[:40]!r} is neither a token id nor a text", param="logit_bias")
        out.update((t, float(value)) for t in ids)
    return out


def _chain(samplers) -> dict:
    """What `samplers` turns off of Tandem's chain (those it leaves out), as request fields; a 400
    for an order Tandem cannot apply or a sampler it does not have."""
    names = [LETTERS.get(c, c) for c in samplers] if isinstance(samplers, str) else list(samplers)
    names = [ALIASES.get(n, n.replace("-", "_")) for n in names]
    def refuse(why: str) -> ApiError:
        return ApiError(400, f"samplers: {why}", code="unsupported_parameter", param="samplers")

    for n in names:
        if n not in CHAIN and n not in OTHERS:
            raise refuse(f"tandem serve has no {n!r} sampler (it has {', '.join(CHAIN)})")
    ours = [n for n in names if n in CHAIN]
    if ours != sorted(ours, key=CHAIN.index):
        raise refuse(f"tandem serve applies its samplers in the order {', '.join(CHAIN)}; give them so")
    if "temperature" not in ours:
        raise refuse("leaving out temperature would sample at another temperature than asked")
    off = {}
    if "penalties" not in ours:
        off.update(repeat_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0)
    off.update({name: value for name, value in (("top_k", 0), ("top_p", 1.0), ("min_p", 0.0)) if name not in ours})
    return off


def n_probs(req: NativeRequest) -> int:
    return next((v for v in (req.n_probs, req.logprobs) if v is not None), 0)


def completion_request(req: NativeRequest, engine) -> CompletionRequest:
    """The request as the OpenAI route's completion request (the same checks); what only
    llama-server has (repeat_last_n, ignore_eos) is applied by `config`."""
    check_off(req)
    n = next((v for v in (req.n_predict, req.max_tokens, req.max_completion_tokens) if v is not None), -1)
    if n == 0:
        raise ApiError(400, "n_predict: 0 (only reading the prompt into the cache) is not done by tandem serve; "
                            "ask for at least one token", code="unsupported_parameter", param="n_predict")
    if n_probs(req) > MAX_LOGPROBS:
        raise ApiError(400, f"n_probs: at most {MAX_LOGPROBS}", param="n_probs")
    body = {"prompt": "", "max_tokens": n if n > 0 else 2**31 - 1, "stop": req.stop,
            "seed": None if req.seed == -1 else req.seed, "grammar": req.grammar, "json_schema": req.json_schema,
            "response_format": req.response_format, "logprobs": n_probs(req) or None, "tandem": req.tandem}
    for name in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty"):
        if getattr(req, name) is not None:
            body[name] = getattr(req, name)
    if req.samplers is not None:
        body.update(_chain(req.samplers))
    return rq.translated(CompletionRequest, body)


_EOG: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def eog_tokens(engine) -> list[int]:
    """The vocabulary's end-of-generation tokens (found once per model)."""
    if engine not in _EOG:
        _EOG[engine] = [t for t in range(engine.n_vocab) if engine.is_eog(t)]
    return _EOG[engine]


async def config(engine, state: ServerState, req: NativeRequest):
    creq = completion_request(req, engine)
    bias = await off_loop(token_bias, engine, req.logit_bias)
    if req.ignore_eos:
        bias.update((t, BAN) for t in await off_loop(eog_tokens, engine))
    # the bias goes through the OpenAI route's check (ids in the vocabulary, -100..100); bans after it
    bans = tuple((t, b) for t, b in bias.items() if b == BAN)
    cfg = rq.config(engine, creq.model_copy(update={"logit_bias": {str(t): b for t, b in bias.items()
                                                                   if b != BAN} or None}), "text", state.draft_max)
    if bans:
        if any(t >= engine.n_vocab or t < 0 for t, _ in bans):
            raise ApiError(400, f"logit_bias names a token outside the vocabulary (0..{engine.n_vocab - 1})",
                           param="logit_bias")
        cfg = replace(cfg, sampling=replace(cfg.sampling, logit_bias=cfg.sampling.logit_bias + bans))
    if req.repeat_last_n is not None:
        last_n = engine.n_ctx if req.repeat_last_n == -1 else req.repeat_last_n
        cfg = replace(cfg, sampling=replace(cfg.sampling, repeat_last_n=last_n))
        try:
            cfg.sampling.validate()
        except ValueError as e:
            raise ApiError(400, str(e), param="repeat_last_n") from None
    return creq, cfg


def tokenized(engine, prompt) -> list[list[int]]:
    """The prompts' tokens, as llama-server reads them: a list holding a token id is one prompt
    (ids, or ids and texts mixed); any other list is a batch."""
    batch = isinstance(prompt, list) and not any(_is_id(x) for x in prompt)
    prompts = prompt if batch else [prompt]
    if not prompts:
        raise ApiError(400, "prompt must not be empty", param="prompt")
    if len(prompts) > MAX_CHOICES:
        raise ApiError(400, f"prompt: at most {MAX_CHOICES} prompts in one request", param="prompt")
    out = []
    for i, p in enumerate(prompts):
        where = f"prompt[{i}]" if batch else "prompt"
        if isinstance(p, dict) and isinstance(p.get("prompt_string"), (str, list)):
            if p.get("multimodal_data"):
                raise ApiError(400, f"{where}.multimodal_data: tandem serve reads pictures in chats only; send them "
                                    "through /v1/chat/completions", code="unsupported_parameter",
                               param=f"{where}.multimodal_data")
            p = p["prompt_string"]
        if not (isinstance(p, str) or (isinstance(p, list) and all(_is_id(x) or isinstance(x, str) for x in p))):
            raise ApiError(400, f"{where} must be a text, a list of token ids (and texts), or "
                                "{\"prompt_string\": text}", param=where)
        tokens, first = [], True
        for part in [p] if isinstance(p, str) else p:  # the start of the prompt only begins with BOS
            tokens += engine.tokenize(part, first, True) if isinstance(part, str) else [part]
            first = False
        bad = [t for t in tokens if not 0 <= t < engine.n_vocab]
        if bad:
            raise ApiError(400, f"{where}: token {bad[0]} is outside the vocabulary (0..{engine.n_vocab - 1})",
                           param=where)
        if not tokens:
            raise ApiError(400, f"{where} is empty", param=where)
        out.append(tokens)
    return out


# ---- the reply ----------------------------------------------------------------------------
class NativeReply(ReplyAssembler):
    """One completion as llama-server gives it: all the model wrote is text; each generated
    token's id (the end-of-generation token apart) and log-probabilities with their ids."""

    def __init__(self, stops: list[str], token_bytes, is_eog, logprobs: bool):
        super().__init__(None, stops, split_thinking=False, token_bytes=token_bytes, logprobs=logprobs)
        self.is_eog = is_eog
        self.ids: list[int] = []
        self.step: list[tuple[int, str, dict | None]] = []  # the latest step's tokens: id, text, logprobs

    def feed(self, ev):
        d = super().feed(ev)
        lps = iter(d.logprobs)
        self.step = []
        for p in ev.pieces:
            lp = next(lps, None) if self.want_logprobs and p.logprob is not None and p.channel != "control" else None
            if not self.is_eog(p.id):
                self.step.append((p.id, p.text, lp))
        self.ids += [t for t, _, _ in self.step]
        return d

    def _entry(self, tok: int, logprob: float) -> dict:
        return {"id": tok, **super()._entry(tok, logprob)}

    def per_token(self, text: str) -> list[tuple[str, int | None, dict | None]]:
        """The latest step as llama-server streams it, one token at a time: (text, id, logprobs);
        the step's text is spread over its tokens as they wrote it (text held back while it
        could begin a stop string comes with a later token)."""
        if not self.step:
            return [(text, None, None)] if text else []
        out = []
        for i, (tok, piece, lp) in enumerate(self.step):
            part = text if i == len(self.step) - 1 else text[:len(piece)]
            text = text[len(part):]
            out.append((part, tok, lp))
        return out


def generation_settings(cfg, req: NativeRequest) -> dict:
    sp = cfg.sampling
    return {"n_predict": cfg.max_tokens, "max_tokens": cfg.max_tokens, "temperature": sp.temperature,
            "top_k": sp.top_k, "top_p": sp.top_p, "min_p": sp.min_p, "repeat_last_n": sp.repeat_last_n,
            "repeat_penalty": sp.repeat_penalty, "presence_penalty": sp.presence_penalty,
            "frequency_penalty": sp.frequency_penalty, "seed": cfg.seed if cfg.seed is not None else -1,
            "stop": rq.stop_strings(req), "ignore_eos": req.ignore_eos, "stream": req.stream,
            "logit_bias": [{"bias": b if b != BAN else None, "token": t} for t, b in sp.logit_bias],
            "n_probs": n_probs(req),
            "grammar": cfg.grammar or "", "samplers": [n for n in CHAIN if _on(n, sp)],
            "timings_per_token": req.timings_per_token, "post_sampling_probs": False,
            # what Tandem does not do, at its "off" value
            "mirostat": 0, "dry_multiplier": 0.0, "xtc_probability": 0.0, "typical_p": 1.0, "top_n_sigma": -1.0,
            "dynatemp_range": 0.0, "adaptive_target": -1.0, "adaptive_decay": 0.9, "min_keep": 0, "lora": []}


def _on(name: str, sp) -> bool:
    return {"penalties": sp.penalized, "top_k": sp.top_k > 0, "top_p": sp.top_p < 1.0, "min_p": sp.min_p > 0.0,
            "temperature": True}[name]


def native_timings(stats) -> dict:
    """llama-server's `timings`, with its per-token times (the first generated token comes with
    the prompt's last batch: the generation's time is over the others, as its rate)."""
    t = {k: v for k, v in timings(stats).items() if v is not None}
    steps = max(stats.generated_tokens - 1, 0)
    t["prompt_per_token_ms"] = t["prompt_ms"] / t["prompt_n"] if t["prompt_n"] else 0.0
    t["predicted_per_token_ms"] = t["predicted_ms"] / steps if steps else 0.0
    return t


def picked(fields: list[str], res: dict) -> dict:
    """llama-server's response_fields: only these, a/b naming b inside a (missing ones left out)."""
    out = {}
    for path in fields:
        value, found = res, True
        for key in path.split("/"):
            if isinstance(value, dict) and key in value:
                value = value[key]
            else:
                found = False
                break
        if found:
            out[path] = value
    return out


def final(state: ServerState, r: NativeReply, index: int, prompt: str, cfg, req: NativeRequest,
          content: str | None = None) -> dict:
    s = r.stats
    why = "word" if r.stopper.hit else "limit" if s.finish_reason in ("length", "context") else "eos"
    res = {"index": index, "content": r.text if content is None else content,
           "tokens": r.ids if req.return_tokens else [], "id_slot": 0, "stop": True, "model": state.name,
           "tokens_predicted": s.generated_tokens, "tokens_evaluated": s.prompt_tokens,
           "generation_settings": generation_settings(cfg, req), "prompt": prompt, "has_new_line": "\n" in r.text,
           "truncated": False, "stop_type": why, "stopping_word": r.stopper.matched or "",
           "tokens_cached": s.reused_tokens, "timings": native_timings(s)}
    if r.want_logprobs and not req.stream:
        res["completion_probabilities"] = r.logprobs
    return picked(req.response_fields, res) if req.response_fields else res


def router(state: ServerState) -> APIRouter:
    r = APIRouter()

    @r.post("/completion")
    @r.post("/completions")
    async def completion(req: NativeRequest, request: Request):
        engine = state.engine()
        creq, cfg = await config(engine, state, req)
        prompts = await off_loop(tokenized, engine, req.prompt)
        texts = [await off_loop(engine.detokenize, p) for p in prompts]
        stops = rq.stop_strings(creq)
        t0 = time.perf_counter()

        async def open_one(tokens: list[int]) -> Choice:
            c = await Choice.open(state, request, "text", cfg, rq.ToolUse(), stops,
                                  lambda e, cfg, sink: e.generate(tokens, cfg, sink=sink), place)
            reply = NativeReply(stops, engine.token_bytes, engine.is_eog, cfg.logprobs is not None)
            reply.stats, c.reply = c.reply.stats, reply  # llama-server's shapes, over the same events
            return c

        place = admit(state)  # one place in the queue for the request; its prompts are decoded together
        try:
            opened = await open_together([open_one(p) for p in prompts])  # errors before any text: their status
        finally:
            place.taken()
        batch = isinstance(req.prompt, list) and not any(_is_id(x) for x in req.prompt)
        if not req.stream:
            results = []
            for i, c in enumerate(opened):
                results.append(final(state, await c.run(request), i, texts[i], cfg, req))
            state.finished("completion", [c.reply.stats for c in opened], False, time.perf_counter() - t0)
            return results if batch else results[0]

        async def one(i: int, c: Choice):
            rep = c.reply
            async for d in c.deltas():
                for text, tok, lp in rep.per_token(d.text):
                    chunk = {"index": i, "content": text, "tokens": [] if tok is None else [tok], "stop": False,
                             "id_slot": 0, "tokens_predicted": rep.stats.generated_tokens,
                             "tokens_evaluated": rep.stats.prompt_tokens}
                    if rep.want_logprobs:
                        chunk["completion_probabilities"] = [lp] if lp is not None else []
                    if req.timings_per_token:
                        chunk["timings"] = native_timings(rep.stats)
                    yield chunk
            if rep.stats is not None:
                yield final(state, rep, i, texts[i], cfg, req, content=rep.rest())

        async def events():
            try:
                async with contextlib.aclosing(merged([one(i, c) for i, c in enumerate(opened)])) as chunks:
                    async for chunk in chunks:
                        yield {"data": json.dumps(chunk)}
            except Exception as e:
                err = from_exception(e)
                state.note("completion", f"{err.status}: {err.message}")
                yield {"data": json.dumps({"error": {"code": err.status, "message": err.message, "type": err.kind}})}
                return
            state.finished("completion", [c.reply.stats for c in opened], True, time.perf_counter() - t0)

        ping = 15 if req.sse_ping_interval is None else max(req.sse_ping_interval, 0)
        return EventSourceResponse(watched(state, "completion", events(), opened), ping=ping)

    return r
