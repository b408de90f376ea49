"""A remote OpenAI-compatible server as a backend: llama.cpp's llama-server, vLLM, SGLang,
Ollama. The server decodes (with its own MTP drafter where it has one); Tandem streams the
answer with the `openai` SDK and builds the same `GenerationStats` as for local runs:

  - tokens/s and TTFT are measured here, on the client, as the text arrives;
  - draft and accepted token counts come from the response (llama-server's `timings`,
    vLLM's per-request `metrics.speculative_decoding`) and otherwise from deltas of the
    server's Prometheus `/metrics` counters; per-position acceptance from those counters;
  - what a server does not report stays unknown (`drafts_reported` False), never 0 %.

The HTTP read runs in its own thread feeding a queue, so Stop works at once even while a
slow server sends nothing.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from dataclasses import dataclass
from typing import Iterator
from urllib.parse import urlsplit, urlunsplit

import httpx2 as httpx  # the HTTP client the openai SDK is built on (httpx's maintained successor)
import openai

from ..errors import TandemError
from ..stats import GenerationStats
from ..gemma4.text import TokenPiece
from ..generation import SERVER_DRAFT, Backend, GenerationEvent
from .remote_tools import StreamedCalls, openai_message, tool_fields, tools_refused

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 600.0  # a big model's first token after a long prompt can take minutes
POLL_S = 0.05  # how often a waiting reply checks for Stop
MAX_METRICS_BYTES = 4 * 2**20  # a /metrics page larger than this is not read


class RemoteError(TandemError):
    """A server problem, in words a user understands."""


@dataclass
class ServerInfo:
    base_url: str
    engine: str  # "llama-server", "vllm", "sglang", "ollama" or "openai-compatible"
    models: list[str]
    n_ctx: int | None = None
    speculative: bool | None = None  # its counters show drafting; None: not known before a reply


def normalize_url(url: str) -> str:
    """'localhost:8080' -> 'http://localhost:8080/v1'; a URL must be http(s) with a host."""
    url = url.strip()
    if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", url):
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError(f"{url!r} is not a server address (expected e.g. http://127.0.0.1:8080/v1)")
    path = parts.path.rstrip("/")
    if not path.endswith("/v1"):
        path += "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _root(base_url: str) -> str:
    """The server's root (where /metrics, /props, /version live), from its /v1 URL."""
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


def _explain(err: Exception, base_url: str, model: str | None = None) -> RemoteError:
    """One sentence for each way a server request fails."""
    if isinstance(err, RemoteError):
        return err
    if isinstance(err, openai.AuthenticationError) or getattr(err, "status_code", None) in (401, 403):
        return RemoteError(f"The server at {base_url} refused the API key ({getattr(err, 'status_code', 401)}): "
                           "check the key in Connections (or --api-key)")
    if isinstance(err, openai.NotFoundError):
        if model:
            return RemoteError(f"The server at {base_url} has no model {model!r} (404)")
        return RemoteError(f"The server at {base_url} has no OpenAI-compatible API there (404): check the "
                           "address (it usually ends in /v1)")
    if isinstance(err, openai.APITimeoutError):
        return RemoteError(f"The server at {base_url} did not answer in time")
    if isinstance(err, openai.APIConnectionError) or isinstance(err, httpx.TransportError):
        return RemoteError(f"Cannot reach a server at {base_url}: is it running, and is the address right?")
    if isinstance(err, openai.APIStatusError):
        detail = ""
        try:
            body = err.response.json()
            detail = (body.get("error") or {}).get("message", "") if isinstance(body, dict) else ""
        except Exception:
            pass
        return RemoteError(f"The server at {base_url} answered {err.status_code}"
                           + (f": {str(detail)[:300]}" if detail else ""))
    return RemoteError(f"The server at {base_url} failed: {type(err).__name__}: {str(err)[:300]}")


# ---- Prometheus counters ------------------------------------------------------------------
_METRIC = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+([0-9.eE+-]+|NaN|\+Inf|-Inf)\s*$')
# what each engine calls the counters (llama-server prefixes "llamacpp:", vLLM "vllm:")
DRAFT_COUNTERS = ("spec_decode_num_draft_tokens_total",)
ACCEPTED_COUNTERS = ("spec_decode_num_accepted_tokens_total",)
DRAFTS_COUNTERS = ("spec_decode_num_drafts_total",)
PER_POS_COUNTERS = ("spec_decode_num_accepted_tokens_per_pos_total",)


@dataclass
class SpecCounters:
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    drafts: float = 0.0
    accepted_per_pos: dict[int, float] | None = None


def parse_metrics(text: str) -> SpecCounters | None:
    """The speculative-decoding counters in a Prometheus text page, or None if it has none."""
    c = SpecCounters(accepted_per_pos={})
    found = False
    for line in text.splitlines():
        m = _METRIC.match(line)
        if not m:
            continue
        name, labels, value = m.group(1).split(":")[-1], m.group(2) or "", m.group(3)
        try:
            v = float(value)
        except ValueError:
            continue
        if name in DRAFT_COUNTERS:
            c.draft_tokens += v
        elif name in ACCEPTED_COUNTERS:
            c.accepted_tokens += v
        elif name in DRAFTS_COUNTERS:
            c.drafts += v
        elif name in PER_POS_COUNTERS:
            pos = re.search(r'position="(\d+)"', labels)
            if pos and int(pos.group(1)) < 64:
                c.accepted_per_pos[int(pos.group(1))] = c.accepted_per_pos.get(int(pos.group(1)), 0.0) + v
        else:
            continue
        found = True
    return c if found else None


class RemoteBackend(Backend):
    kind = "remote"
    can_switch_mtp = False  # engines choose speculation per server, not per request

    def __init__(self, base_url: str, api_key: str | None = None, model: str | None = None,
                 timeout: float = READ_TIMEOUT_S):
        super().__init__()
        self._connect(base_url, api_key, timeout)
        self._cancel = threading.Event()
        try:
            self.info = self._probe()
        except Exception:
            self.close()
            raise
        self.engine_name = self.info.engine
        if model is None:
            if len(self.info.models) != 1:
                raise RemoteError(f"The server at {self.base_url} serves {len(self.info.models)} models: choose "
                                  f"one ({', '.join(self.info.models[:8]) or 'none listed'})")
            model = self.info.models[0]
        elif self.info.models and model not in self.info.models:
            raise RemoteError(f"The server at {self.base_url} has no model {model!r}; it serves: "
                              f"{', '.join(self.info.models[:8])}")
        self.model = model
        # `tandem serve` switches drafting per request; other servers only when they start
        self.can_switch_mtp = self.engine_name == "tandem"
        if self.engine_name == "tandem":
            entry = next((m for m in self._models if m.id == model), None)
            self.info.speculative = bool((entry.model_extra or {}).get("mtp")) if entry is not None else None
        self._set_mtp(self.info.speculative)

    def _set_mtp(self, drafts: bool | None) -> None:
        """Whether the server drafts: from its counters or its replies; None until one says."""
        self.has_mtp = drafts
        self.mtp_reason = ("" if drafts else
                           f"{self.engine_name} at {self.base_url} reports no drafting (its speculation is set "
                           "when the server starts)" if drafts is False else
                           f"not known yet: {self.engine_name} shows whether it drafts with its first reply")

    def _connect(self, base_url: str, api_key: str | None, timeout: float) -> None:
        self.base_url = normalize_url(base_url)
        self.api_key = api_key or None
        self.client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key or "none", max_retries=0,
                                    timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT_S))
        self.http = httpx.Client(timeout=httpx.Timeout(10.0, connect=CONNECT_TIMEOUT_S),
                                 headers={"Authorization": f"Bearer {self.api_key}"} if self.api_key else {})

    @classmethod
    def probe(cls, base_url: str, api_key: str | None = None) -> ServerInfo:
        """What a server is and which models it serves, without choosing one."""
        b = cls.__new__(cls)
        b._connect(base_url, api_key, CONNECT_TIMEOUT_S * 2)
        try:
            return b._probe()
        finally:
            b.client.close()
            b.http.close()

    # ---- what the server is -----------------------------------------------------------
    def _probe(self) -> ServerInfo:
        try:
            page = self.client.models.list()
            self._models = list(page.data)[:256]
            models = [m.id for m in page.data][:256]
            owners = {str(getattr(m, "owned_by", "") or "") for m in page.data}
        except Exception as e:
            raise _explain(e, self.base_url) from None
        info = ServerInfo(self.base_url, "openai-compatible", models)
        root = _root(self.base_url)
        if "llamacpp" in owners:
            info.engine = "llama-server"
            props = self._get_json(f"{root}/props")
            if isinstance(props, dict):
                gen = props.get("default_generation_settings") or {}
                n_ctx = gen.get("n_ctx") if isinstance(gen, dict) else None
                info.n_ctx = n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None
        elif "vllm" in owners or "tandem" in owners:
            info.engine = "vllm" if "vllm" in owners else "tandem"
            for m in page.data:
                n = getattr(m, "max_model_len", None) or (m.model_extra or {}).get("max_model_len")
                if m.id in models and isinstance(n, int):
                    info.n_ctx = n
        elif "sglang" in owners:
            info.engine = "sglang"
        elif "library" in owners or "ollama" in owners:
            info.engine = "ollama"
        if info.speculative is None:
            counters = self._counters()
            info.speculative = True if counters is not None and counters.drafts > 0 else None
        return info

    def _get_json(self, url: str):
        try:
            r = self.http.get(url)
            return r.json() if r.status_code == 200 and len(r.content) < MAX_METRICS_BYTES else None
        except (httpx.HTTPError, ValueError):
            return None

    def _counters(self) -> SpecCounters | None:
        """The server's speculative-decoding counters now (None: no /metrics, or none there)."""
        if getattr(self, "_no_metrics", False):
            return None
        try:
            with self.http.stream("GET", f"{_root(self.base_url)}/metrics") as r:
                if r.status_code != 200:
                    self._no_metrics = r.status_code == 404  # not served: not asked again
                    return None
                body = b""
                for chunk in r.iter_bytes():
                    body += chunk
                    if len(body) > MAX_METRICS_BYTES:
                        return None
            return parse_metrics(body.decode("utf-8", "replace"))
        except httpx.HTTPError:
            return None

    @property
    def n_ctx(self) -> int | None:
        return self.info.n_ctx

    # ---- generation -------------------------------------------------------------------
    def cancel(self) -> None:
        self._cancel.set()

    def close(self) -> None:
        self._cancel.set()
        self.client.close()
        self.http.close()

    _draft_label = SERVER_DRAFT  # the draft length is the server's, except on tandem serve

    def _request(self, messages: list[dict], config, enable_thinking: bool, answer_prefix: str,
                 tools: list[dict] | None = None, force_tool: str = "") -> dict:
        sp = config.sampling
        if any(m.get("media") for m in messages):
            raise RemoteError("pictures and sounds are not sent to servers yet: use a local model for them")
        msgs = [openai_message(m) for m in messages]
        if answer_prefix:  # Continue: the answer so far as the last (assistant) message, which
            msgs.append({"role": "assistant", "content": answer_prefix})  # servers continue
        extra = {"top_k": sp.top_k, "min_p": sp.min_p,
                 "chat_template_kwargs": {"enable_thinking": bool(enable_thinking)}}
        if self.engine_name in ("llama-server", "tandem"):
            extra.update(timings_per_token=True, repeat_penalty=sp.repeat_penalty, cache_prompt=True)
        if self.engine_name == "tandem":  # what only Tandem's server does: drafting per request
            extra["tandem"] = {"draft_max": config.draft_max, "spec": config.spec}
            self._draft_label = config.draft_max
        elif sp.repeat_penalty != 1.0:
            extra["repetition_penalty"] = sp.repeat_penalty
        if answer_prefix and self.engine_name == "vllm":
            extra.update(add_generation_prompt=False, continue_final_message=True)
        req = dict(model=self.model, messages=msgs, stream=True, max_tokens=config.max_tokens,
                   temperature=sp.temperature, top_p=sp.top_p, stream_options={"include_usage": True},
                   extra_body=extra, **tool_fields(tools, force_tool, self.engine_name))
        if config.seed is not None:
            req["seed"] = config.seed
        return req

    def chat(self, messages, config, enable_thinking=False, should_stop=None, answer_prefix="",
             tools: list[dict] | None = None, force_tool: str = "") -> Iterator:
        """`tools`: OpenAI function declarations offered to the model; `force_tool`: the one this
        answer must call (the server's tool_choice). Calls come back on the last event."""
        config.sampling.validate()
        if config.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        self._cancel.clear()
        before = self._counters()
        req = self._request(messages, config, enable_thinking, answer_prefix, tools, force_tool)
        t0 = time.perf_counter()
        try:
            stream = self.client.chat.completions.create(**req)
        except Exception as e:
            err = _explain(e, self.base_url, self.model)
            if tools and isinstance(e, openai.APIStatusError) and e.status_code not in (401, 403, 404):
                err = RemoteError(f"{err}. {tools_refused(self.engine_name, force_tool)}")  # the tools may be why
            raise err from None
        calls = StreamedCalls([t["function"]["name"] for t in tools or ()], f"{self.engine_name} at {self.base_url}")
        return self._events(stream, before, t0, should_stop, calls)

    def _events(self, stream, before: SpecCounters | None, t0: float, should_stop, calls: StreamedCalls) -> Iterator:
        chunks: queue.Queue = queue.Queue()  # unbounded: a reader never blocks on a consumer that stopped
        done = object()

        def read():  # in its own thread: a blocked read never delays Stop
            try:
                for chunk in stream:
                    chunks.put(chunk)
                    if self._cancel.is_set():
                        break
                chunks.put(done)
            except Exception as e:  # dropped connection, bad chunk: reported after the text so far
                chunks.put(e)

        reader = threading.Thread(target=read, name="tandem-remote-read", daemon=True)
        reader.start()
        stats = GenerationStats(mode="remote", draft_max=self._draft_label, engine=self.engine_name,
                                drafts_reported=False)
        first = last = None
        counted = 0  # text pieces seen, when the server gives no token count
        finish = None
        try:
            while True:
                if self._cancel.is_set() or (should_stop is not None and should_stop()):
                    finish = "cancelled"
                    break
                try:
                    item = chunks.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                if item is done:
                    break
                if isinstance(item, Exception):
                    raise _explain(item, self.base_url, self.model) from None
                now = time.perf_counter()
                answer, thinking = self._apply(item, stats)
                if item.choices:
                    calls.feed(getattr(item.choices[0].delta, "tool_calls", None))
                    finish = item.choices[0].finish_reason or finish
                if not (answer or thinking):
                    continue
                counted += 1
                if first is None:
                    first = now
                    stats.ttft_s = now - t0
                last = now
                stats.decode_s = last - first
                stats.generated_tokens = max(stats.generated_tokens, counted)  # servers' own count wins
                pieces = [TokenPiece(-1, t, None, ch) for t, ch in ((thinking, "thinking"), (answer, "answer")) if t]
                yield GenerationEvent(pieces, answer, thinking, stats.snapshot())
        finally:
            stream.close()  # also on Stop: closing the connection ends the server's work on this request
        if finish is None:  # every server ends a reply with a finish reason: the stream was cut
            raise RemoteError(f"the connection to {self.base_url} ended before the reply was complete "
                              "(the server stopped?); the text so far is kept")
        stats.finish_reason = {"stop": "stop", "length": "length", "cancelled": "cancelled"}.get(finish, finish or "stop")
        made = calls.calls(finish) if finish != "cancelled" else []  # a stopped reply's calls never run
        self._counter_deltas(stats, before)
        if stats.drafts_reported:
            stats.mode = "mtp" if stats.draft_tokens else "baseline"
            stats.steps = max(1, stats.generated_tokens - stats.accepted_tokens)
            if stats.generated_tokens > 1:  # one token is too few to tell
                self._set_mtp(stats.draft_tokens > 0)
        yield GenerationEvent([], "", "", stats.snapshot(), stats.finish_reason, calls=made)

    def _apply(self, chunk, stats: GenerationStats) -> tuple[str, str]:
        """Text and statistics of one streamed chunk."""
        extra = chunk.model_extra or {}
        timings = extra.get("timings")
        if isinstance(timings, dict):  # llama-server: cumulative for this request
            if isinstance(timings.get("predicted_n"), int):
                stats.generated_tokens = timings["predicted_n"]
            if isinstance(timings.get("prompt_n"), int):
                stats.prompt_tokens = stats.prefill_tokens = timings["prompt_n"]
            pps = timings.get("prompt_per_second")
            if isinstance(pps, (int, float)) and pps > 0 and stats.prefill_tokens:
                stats.prefill_s = stats.prefill_tokens / pps
            # llama-server and tandem serve name draft_n only when they drafted: absent is zero
            stats.draft_tokens = int(timings.get("draft_n") or 0)
            stats.accepted_tokens = int(timings.get("draft_n_accepted") or 0)
            stats.lookup_draft_tokens = int(timings.get("draft_n_lookup") or 0)  # tandem serve's
            stats.lookup_accepted_tokens = int(timings.get("draft_n_accepted_lookup") or 0)
            stats.drafts_reported = True
        usage = chunk.usage
        if usage is not None:
            if usage.completion_tokens:
                stats.generated_tokens = usage.completion_tokens
            if usage.prompt_tokens:
                stats.prompt_tokens = usage.prompt_tokens
            spec = ((usage.model_extra or {}).get("metrics") or extra.get("metrics") or {})
            spec = spec.get("speculative_decoding") if isinstance(spec, dict) else None
            if isinstance(spec, dict) and isinstance(spec.get("num_draft_tokens"), int):  # vLLM, per request
                stats.draft_tokens = spec["num_draft_tokens"]
                stats.accepted_tokens = int(spec.get("num_accepted_draft_tokens") or 0)
                stats.drafts_reported = True
                hist = spec.get("acceptance_histogram")  # hist[j]: drafts of which j tokens were accepted
                if isinstance(hist, list) and 1 < len(hist) <= 64 and all(isinstance(h, int) for h in hist):
                    n = len(hist) - 1
                    stats.drafted_at = [sum(hist)] * n
                    stats.accepted_at = [sum(hist[i + 1:]) for i in range(n)]
        if not chunk.choices:
            return "", ""
        delta = chunk.choices[0].delta
        dx = delta.model_extra or {}
        thinking = dx.get("reasoning_content") or dx.get("reasoning") or ""
        return delta.content or "", thinking if isinstance(thinking, str) else ""

    def _counter_deltas(self, stats: GenerationStats, before: SpecCounters | None) -> None:
        """Fill in from the server's counters what the response did not report. Counters
        are server-wide: another client's request in the same moment would be counted too."""
        after = self._counters() if before is not None else None
        if after is None:
            return
        drafts = after.drafts - before.drafts
        if not stats.drafts_reported:
            stats.draft_tokens = int(after.draft_tokens - before.draft_tokens)
            stats.accepted_tokens = int(after.accepted_tokens - before.accepted_tokens)
            stats.drafts_reported = True
        if drafts > 0 and after.accepted_per_pos and not stats.drafted_at:
            n = max(after.accepted_per_pos) + 1
            # the counters give accepted tokens per position and the number of drafts, not how
            # many drafts reached each position: the rate at i is accepted at i / drafts
            stats.drafted_at = [int(drafts)] * n
            stats.accepted_at = [int(after.accepted_per_pos.get(i, 0) - (before.accepted_per_pos or {}).get(i, 0))
                                 for i in range(n)]
