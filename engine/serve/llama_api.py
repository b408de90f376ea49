"""llama-server's own routes that clients and llama.cpp-aware tools use: /health, the model
list, /tokenize and /detokenize, /apply-template, the input-token counts, /props, /slots (each
sequence of the context: busy or not, and how far a busy one is) and /metrics (Prometheus text,
with Tandem's draft counts per source).

Rendering a chat template runs in a sandbox process (bounded time and memory): these handlers
run it on a worker thread so the event loop keeps serving the streams.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response
from pydantic import Field

from . import chat_messages as cm
from . import request as rq
from .admission import ServerState
from .choice import off_loop
from .http import carries_key
from .errors import ApiError
from .request import ChatRequest, _Loose

MAX_TOKENIZE_CHARS = 1_000_000  # the body limit bounds it too; a tokenizer pass over this is ~0.1 s
STARTED = int(time.time())


class TokenizeRequest(_Loose):
    content: str
    add_special: bool = False  # llama-server's defaults
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeRequest(_Loose):
    tokens: list[int] = Field(max_length=1_000_000)


def count_prompt(engine, messages: list[dict], thinking: bool, tools: list | None) -> int:
    """The prompt's tokens exactly as a generation would see them (template, tools, media)."""
    return len(engine.format_chat(messages, thinking, tools=tools)) if messages else 0


def router(state: ServerState) -> APIRouter:
    r = APIRouter()

    @r.get("/health")
    async def health(request: Request):
        """Open to all (a load balancer's probe needs no key); behind a key, what the server is
        doing (the last request's tokens and drafts) only for a request that carries it."""
        status = {"status": "ok" if state.engine_getter() is not None else "no model loaded"}
        if state.api_key and not carries_key(dict(request.scope.get("headers") or []), state.api_key):
            return status
        generating, waiting = state.counts()
        return {**status, "generating": generating, "waiting": waiting, "last": state.last}

    @r.get("/v1/models")
    @r.get("/models")
    async def models():
        e = state.engine_getter()
        return {"object": "list", "data": [{"id": state.name, "object": "model", "created": 0,
                                            "owned_by": "tandem", "max_model_len": e.n_ctx if e else None,
                                            "mtp": bool(e and e.has_mtp), "aliases": [state.name, *state.aliases], "tags": state.tags,
                                            # Anthropic's model list: Claude Code and its SDK read these
                                            "type": "model", "display_name": state.name,
                                            "created_at": "1970-01-01T00:00:00Z"}]}

    @r.get("/v1/models/{model_id:path}")
    async def model(model_id: str):
        found = [m for m in (await models())["data"] if m["id"] == model_id]
        if not found:
            raise ApiError(404, f"The model {model_id!r} does not exist; this server serves {state.name!r}",
                           code="model_not_found", param="model")
        return found[0]

    @r.post("/tokenize")
    async def tokenize(req: TokenizeRequest):
        engine = state.engine()
        if len(req.content) > MAX_TOKENIZE_CHARS:
            raise ApiError(400, f"content: at most {MAX_TOKENIZE_CHARS} characters", param="content")
        tokens = await off_loop(engine.tokenize, req.content, req.add_special, req.parse_special)
        if not req.with_pieces:
            return {"tokens": tokens}
        pieces = []
        for t in tokens:
            b = engine.token_bytes(t)
            try:
                piece: Any = b.decode("utf-8")
            except UnicodeDecodeError:  # part of a character: its bytes, as llama-server gives them
                piece = list(b)
            pieces.append({"id": t, "piece": piece})
        return {"tokens": pieces}

    @r.post("/detokenize")
    async def detokenize(req: DetokenizeRequest):
        engine = state.engine()
        bad = [t for t in req.tokens if not 0 <= t < engine.n_vocab]
        if bad:
            raise ApiError(400, f"tokens: {bad[0]} is outside the vocabulary (0..{engine.n_vocab - 1})",
                           param="tokens")
        return {"content": await off_loop(engine.detokenize, req.tokens)}

    @r.post("/apply-template")
    async def apply_template(req: ChatRequest):
        engine = state.engine()
        if rq.picture_parts(req):  # before any is decoded
            raise ApiError(400, "apply-template renders text; leave pictures out", param="messages")
        messages, thinking = await off_loop(cm.messages, req, engine), rq.thinking(req)
        tools = rq.tool_use(req, engine, thinking)
        prompt = await off_loop(lambda: engine.template.render(messages, True, thinking, tools=tools.tools))
        return {"prompt": prompt}

    @r.post("/v1/chat/completions/input_tokens")
    @r.post("/chat/completions/input_tokens")
    async def chat_input_tokens(req: ChatRequest):
        engine = state.engine()
        messages, thinking = await off_loop(cm.messages, req, engine), rq.thinking(req)
        tools = rq.tool_use(req, engine, thinking)
        n = await off_loop(count_prompt, engine, messages, thinking, tools.tools)
        return {"object": "response.input_tokens", "input_tokens": n}

    @r.get("/props")
    async def props():
        e = state.engine()
        template = e.template
        defaults = {k: rq.Sampling.model_fields[k].default for k in ("temperature", "top_k", "top_p", "min_p")}
        return {"default_generation_settings": {"n_ctx": e.n_ctx, "params": defaults},  # a request's own
                "total_slots": e.scheduler.n_slots, "model_alias": state.name,
                "model_path": _file_name(e),  # the file's name: the folders it sits in are the user's
                "modalities": {"vision": bool(e.projector and e.projector.vision),
                               "audio": bool(e.projector and e.projector.audio), "video": False},
                "chat_template": template.source if template else "",
                "chat_template_caps": {"supports_tools": bool(template and template.supports_tools)},
                "bos_token": template.bos_token if template else "", "eos_token": template.eos_token if template else "",
                "build_info": _build_info(), "endpoint_metrics": True, "endpoint_props": False,
                "endpoint_slots": True, "is_sleeping": False,
                "tandem": {"mtp": e.has_mtp, "draft_sources": e.spec_sources, "draft_max": state.draft_max,
                           "draft_head": e.draft_head.as_dict() if e.draft_head else None,
                           "prompt_cache": _prompt_cache(e), "memory": _memory(e)}}

    @r.get("/slots")
    async def slots():
        e = state.engine()
        return await off_loop(slot_list, e)  # the scheduler's lock: not on the event loop

    @r.get("/metrics")
    async def metrics():
        return _exact_case(PlainTextResponse(prometheus(state), media_type="text/plain; version=0.0.4"),
                           "Process-Start-Time-Unix", str(STARTED))

    return r


def _memory(e) -> dict:
    """The memory plan of the loaded pair and what llama.cpp allocated, in bytes (a remote
    backend has neither)."""
    memory = getattr(e, "memory", None)
    if memory is None:
        return {}
    planned, allocated = memory
    return {k: {"weights": m.weights, "drafter": m.drafter, "kv_cache": m.kv, "compute": m.compute, "total": m.total}
            for k, m in (("planned", planned), ("allocated", allocated))}


def _exact_case(response: Response, name: str, value: str) -> Response:
    """A header spelt as llama-server spells it (Starlette lowercases the names it is given; HTTP
    names are case-insensitive, but clients that keep headers in a plain dict look it up so)."""
    response.raw_headers.append((name.encode("latin-1"), value.encode("latin-1")))
    return response


def slot_list(engine) -> list[dict]:
    """llama-server's /slots: each sequence of the context (they share it: each may use all of
    it), busy or not; a busy one's prompt and how many tokens it has made and may still make."""
    sch = engine.scheduler
    with sch.lock:
        running = {id(seq.slot): seq for seq in sch.running if seq.slot is not None and seq.st is not None}
        out = []
        for i, slot in enumerate(sch.slots):
            entry = {"id": i, "n_ctx": engine.n_ctx, "speculative": bool(engine.spec_sources),
                     "is_processing": slot.busy,
                     # what the slot keeps for the next request (llama-server: its last task's tokens)
                     "n_prompt_tokens": len(slot.cached),
                     "tandem": {"n_cached_tokens": len(slot.cached), "n_checkpoints": len(slot.checkpoints),
                                "checkpoint_bytes": sum(len(c.data) for c in slot.checkpoints)}}
            seq = running.get(id(slot))
            if seq is not None:
                st = seq.st.stats
                entry.update(n_prompt_tokens=len(seq.job.prompt), n_prompt_tokens_processed=st.prefill_tokens,
                             n_prompt_tokens_cache=st.reused_tokens,
                             next_token=[{"has_next_token": True, "n_decoded": st.generated_tokens,
                                          "n_remain": max(seq.job.config.max_tokens - st.generated_tokens, 0)}])
            out.append(entry)
    return out


def _prompt_cache(engine) -> dict | None:
    """The prompt cache beyond the slots: its bounds and what it holds (None: a remote engine)."""
    counts = getattr(engine, "cache_counts", None)
    if counts is None:
        return None
    host = engine.host_cache
    disk = host.disk if host is not None else None
    return {"ram_bytes_max": host.budget if host else 0, "ram_bytes": counts.host_bytes,
            "ram_entries": counts.host_entries, "disk_bytes_max": disk.budget if disk else 0,
            "disk_bytes": counts.disk_bytes, "disk_entries": counts.disk_entries,
            "disk_folder": str(disk.folder) if disk else None}


def _file_name(engine) -> str:
    info = getattr(getattr(engine, "rt", None), "target_info", None)
    return getattr(getattr(info, "path", None), "name", "") or ""


def _build_info() -> str:
    from .. import __version__

    return f"tandem-{__version__}"


def prometheus(state: ServerState) -> str:
    """llama-server's metric names where Tandem counts the same thing, and Tandem's own: requests
    per API and draft tokens per source (MTP drafter, lookup)."""
    t = state.totals
    lines = []

    def item(name: str, kind: str, help_: str, values: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{labels} {value:g}" for labels, value in values)

    item("llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed (not from the cache)",
         [("", t.prompt_tokens)])
    item("llamacpp:prompt_tokens_cached_total", "counter", "Number of prompt tokens served from the cache",
         [("", t.cached_tokens)])
    item("llamacpp:prompt_seconds_total", "counter", "Prompt process time", [("", t.prompt_seconds)])
    item("llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed",
         [("", t.predicted_tokens)])
    item("llamacpp:tokens_predicted_seconds_total", "counter", "Predict process time", [("", t.predicted_seconds)])
    item("llamacpp:spec_decode_num_draft_tokens_total", "counter", "Speculative: Total draft tokens generated",
         [("", sum(t.drafted.values()))])
    item("llamacpp:spec_decode_num_accepted_tokens_total", "counter",
         "Speculative: Total draft tokens accepted by the target model", [("", sum(t.accepted.values()))])
    item("llamacpp:spec_decode_num_drafts_total", "counter", "Speculative: Total number of drafts (steps that "
         "verified a draft)", [("", t.drafts)])
    target = getattr(getattr(state.engine_getter(), "rt", None), "target", None)  # None: no model, or a remote one
    decodes, busy = getattr(target, "n_decodes", 0), getattr(target, "n_busy", 0)
    item("llamacpp:n_decode_total", "counter", "Total number of llama_decode() calls (of the model, for any "
         "request since it was loaded)", [("", decodes)])
    item("llamacpp:n_tokens_max", "counter", "Largest observed n_tokens (prompt and reply of one request)",
         [("", t.n_tokens_max)])
    item("llamacpp:n_busy_slots_per_decode", "gauge", "Average number of busy slots (sequences) per llama_decode() "
         "call", [("", busy / decodes if decodes else 0.0)])
    item("llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s",
         [("", t.prompt_tokens / t.prompt_seconds if t.prompt_seconds else 0.0)])
    item("llamacpp:predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s",
         [("", t.predicted_tokens / t.predicted_seconds if t.predicted_seconds else 0.0)])
    generating, waiting = state.counts()
    item("llamacpp:requests_processing", "gauge", "Number of requests processing", [("", generating)])
    item("llamacpp:requests_deferred", "gauge", "Number of requests deferred", [("", waiting)])
    item("tandem:requests_total", "counter", "Requests answered, by API",
         [(f'{{api="{api}"}}', n) for api, n in sorted(t.requests.items())] or [('{api="chat"}', 0)])
    item("tandem:draft_tokens_total", "counter", "Draft tokens proposed, by source (mtp: the drafter; lookup: "
         "the text so far)", [(f'{{source="{s}"}}', t.drafted[s]) for s in ("mtp", "lookup")])
    item("tandem:draft_accepted_tokens_total", "counter", "Draft tokens the model accepted, by source",
         [(f'{{source="{s}"}}', t.accepted[s]) for s in ("mtp", "lookup")])
    counts = getattr(state.engine_getter(), "cache_counts", None)
    events = counts.events if counts is not None else {}
    item("tandem:prompt_cache_events_total", "counter", "What the prompt cache did: slot_hits (a slot kept the "
         "prefix), checkpoint_restores, host_hits and disk_restores (a conversation came back), misses (read in "
         "full), slot_evictions, idle_parked (an idle slot's conversation sent to the host cache while another "
         "prompt is read), host_saves, host_evictions, disk_saves, disk_evictions, disk_refused (a file "
         "that did not hold its checks), checkpoints (taken)",
         [(f'{{event="{k}"}}', events.get(k, 0)) for k in CACHE_EVENTS])
    item("tandem:prompt_cache_bytes", "gauge", "Bytes the prompt cache holds, by place",
         [('{place="ram"}', getattr(counts, "host_bytes", 0)), ('{place="disk"}', getattr(counts, "disk_bytes", 0))])
    item("tandem:prompt_cache_entries", "gauge", "Conversations the prompt cache holds, by place",
         [('{place="ram"}', getattr(counts, "host_entries", 0)),
          ('{place="disk"}', getattr(counts, "disk_entries", 0))])
    item("tandem:hosted_tools_left_out_total", "counter", "Hosted tools (web search, file search, ...) left out "
         "of what the model was offered: this server runs none", [("", t.hosted_tools_left_out)])
    return "\n".join(lines) + "\n"


CACHE_EVENTS = ("slot_hits", "checkpoint_restores", "host_hits", "disk_restores", "misses", "slot_evictions",
                "idle_parked", "host_saves", "host_evictions", "disk_saves", "disk_evictions", "disk_refused", "checkpoints",
                "checkpoint_failures", "host_failures")
