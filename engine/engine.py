"""Engine: loaded models + a conversation cache + streaming generation.

    engine = Engine.load("target.gguf", "drafter.gguf")
    for ev in engine.chat([{"role": "user", "content": "Hi"}], GenerationConfig(draft_max="auto")):
        print(ev.answer, end="", flush=True)

A generation is an iterator of `GenerationEvent`s (one per decoding step). The KV cache
of the previous generation is kept and only the new suffix of a prompt is decoded.
"""

from __future__ import annotations

import ctypes
import re
import threading
import time
from dataclasses import replace
from functools import partial
from typing import Callable, Iterator

import numpy as np

from .chat import FALLBACK_TEMPLATE, ChatTemplate
from .errors import ContextOverflowError, EngineError, ModelUnloaded, MTPUnavailableError
from .generation import (AUTO, MAX_LOGPROBS, SPEC_NONE, Backend, GenerationConfig, GenerationEvent,  # noqa: F401
                         GenerationResult, check_draft_length, check_spec)
from .llama import lib
from .runtime import LoadOptions, Runtime
from .stats import GenerationStats
from .strategies import CostModel, make_strategy
from .strategies.base import DecodeState, Step
from .text import TextAssembler

SEEDED_DRAFT_MAX = 2  # the draft length of a seeded generation when auto was asked for
MEDIA_BATCH = 2048  # batch and micro-batch with a projector: a whole image in one micro-batch
MEDIA_MARK = re.compile("\ue002(\\d+)\ue003")  # where a message's media go in the rendered chat


def _segments(tokens: list[int]) -> list[tuple[int, int]]:
    """[start, end) runs of text tokens and of one media item's pseudo-tokens (negative ids)."""
    out, start = [], 0
    for i in range(1, len(tokens) + 1):
        if i == len(tokens) or (tokens[i] < 0) != (tokens[start] < 0) or (tokens[i] < 0 and tokens[i] != tokens[start]):
            out.append((start, i))
            start = i
    return out


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Engine(Backend):
    """The local backend: llama.cpp in this process, baseline and MTP decoding (Tandem's loop)."""

    kind = "local"
    engine_name = "llama.cpp"

    def __init__(self, runtime: Runtime):
        super().__init__()  # the turn
        self.rt = runtime
        self._cached: list[int] = []  # tokens whose K/V are in the target cache, in order
        self._cancel = threading.Event()
        self._busy = threading.Lock()
        self._piece_cache: dict[int, bytes] = {}
        self._control: dict[int, str | None] = {}
        self._control_text_cache: dict[str, bool] = {}
        self.costs = CostModel()  # step costs measured on this machine, for adaptive MTP
        self.projector = None  # engine.media.Projector when an mmproj is loaded: images / audio
        self._should_stop: Callable[[], bool] = self._cancel.is_set  # the running generation's
        self.closed = False
        tmpl_ptr = lib.llama_model_chat_template(runtime.target_model, None)
        source = tmpl_ptr.decode("utf-8", "replace") if tmpl_ptr else FALLBACK_TEMPLATE
        self.template = ChatTemplate(
            source,
            bos_token=self._token_text(lib.llama_vocab_bos(runtime.vocab)),
            eos_token=self._token_text(lib.llama_vocab_eos(runtime.vocab)),
        )

    # ---- loading ---------------------------------------------------------------------
    @classmethod
    def load(cls, target, drafter=None, options: LoadOptions | None = None,
             progress: Callable[[str, float], bool] | None = None, mmproj=None) -> "Engine":
        options = options or LoadOptions()
        if mmproj:
            from .media import read_projector_info

            read_projector_info(mmproj)  # refuse a wrong file before loading anything
            # Some Gemma 4 sizes attend over an image both ways (non-causally), which needs the
            # whole image (up to 1120 positions) in one micro-batch
            options = replace(options, n_batch=max(options.n_batch, MEDIA_BATCH),
                              n_ubatch=max(options.n_ubatch, MEDIA_BATCH))
        engine = cls(Runtime(target, drafter, options, progress))
        if mmproj:
            try:
                engine.attach_projector(mmproj)
            except BaseException:
                engine.close()
                raise
        return engine

    def attach_projector(self, path) -> None:
        from .media import Projector

        self.projector = Projector(path, self.rt, self.rt.n_threads,
                                   use_gpu=self.rt.options.target_gpu_layers != 0)

    def close(self) -> None:
        """Free the models. Waits for a generation in progress (it is cancelled first) and for
        the turn of whoever holds it; afterwards every call refuses with EngineError instead of
        touching freed memory (a request `tandem serve` had queued may still arrive)."""
        self.cancel()
        with self.turn, self._busy:
            if self.closed:
                return
            self.closed = True
            if self.projector is not None:  # it reads the target's vocabulary: freed first
                self.projector.close()
                self.projector = None
            self.rt.close()

    def _check_open(self) -> None:
        if self.closed:
            raise ModelUnloaded("the model was unloaded; send the request again to use the loaded one")

    @property
    def has_mtp(self) -> bool:
        return self.rt.has_drafter

    @property
    def n_ctx(self) -> int:
        return self.rt.n_ctx

    @property
    def n_vocab(self) -> int:
        return self.rt.target.n_vocab

    @property
    def mtp_reason(self) -> str:
        if self.has_mtp:
            return ""
        info = self.rt.target_info
        return "no drafter loaded" if info.is_gemma4_target else f"{info.arch} models have no MTP drafter"

    def count_tokens(self, messages: list[dict], enable_thinking: bool = False) -> int:
        return len(self.format_chat(messages, enable_thinking)) if messages else 0

    def cancel(self) -> None:
        """Ask a running generation (on another thread) to stop after its current step."""
        self._cancel.set()

    # ---- text <-> tokens -----------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        self._check_open()
        data = text.encode("utf-8")
        n_max = len(data) + 16
        buf = (lib.llama_token * n_max)()
        n = lib.llama_tokenize(self.rt.vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            n_max = -n
            buf = (lib.llama_token * n_max)()
            n = lib.llama_tokenize(self.rt.vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            raise EngineError("tokenization failed")
        return list(buf[:n])

    def _token_text(self, tok: int) -> str:
        if tok < 0:
            return ""
        return self._piece(tok, special=True).decode("utf-8", "replace")

    def _piece(self, tok: int, special: bool = False) -> bytes:
        key = tok if not special else -1 - tok
        b = self._piece_cache.get(key)
        if b is None:
            buf = ctypes.create_string_buffer(64)
            n = lib.llama_token_to_piece(self.rt.vocab, tok, buf, 64, 0, special)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = lib.llama_token_to_piece(self.rt.vocab, tok, buf, -n, 0, special)
            b = buf.raw[: max(n, 0)]
            self._piece_cache[key] = b
        return b

    def _control_text(self, tok: int) -> str | None:
        """The marker text of a control token, None for ordinary text tokens."""
        if tok not in self._control:
            is_ctl = lib.llama_vocab_is_control(self.rt.vocab, tok)
            self._control[tok] = self._token_text(tok) if is_ctl else None
        return self._control[tok]

    def token_bytes(self, tok: int) -> bytes:
        """A token's bytes as the model wrote them, a control token's marker included."""
        return self._piece(tok, special=True)

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self._piece(t) for t in tokens).decode("utf-8", "replace")

    def is_eog(self, tok: int) -> bool:
        return bool(lib.llama_vocab_is_eog(self.rt.vocab, tok))

    # ---- chat --------------------------------------------------------------------------
    def format_chat(self, messages: list[dict], enable_thinking: bool = False,
                    should_stop: Callable[[], bool] | None = None, answer_prefix: str = "",
                    tools: list[dict] | None = None) -> list[int]:
        """The prompt tokens of a chat. The template's own markup may contain control tokens;
        the messages' text never becomes one: '<end_of_turn>' typed by the user (or written
        by the model as plain text) stays plain text. `answer_prefix` is the start of the
        model's answer (Continue on a cut reply): it follows the generation prompt, as text.
        `tools` are OpenAI function declarations for a template that renders them; their text
        and that of earlier calls' arguments never become control tokens either."""
        if tools or any(m.get("tool_calls") for m in messages):
            from .errors import TemplateError

            if not self.template.supports_tools:
                raise TemplateError("this model's chat template has no tool calling (Gemma 4's has)")
            tools = self._defused(tools) if tools else None
            messages = [{**m, "tool_calls": self._defused(m["tool_calls"])} if m.get("tool_calls") else m
                        for m in messages]
        render = partial(self._render, tools=tools)
        if any(m.get("media") for m in messages):
            tokens = self._format_media(messages, enable_thinking, should_stop, render)
        else:
            tokens = self._format_chat(messages, enable_thinking, should_stop, render)
        if answer_prefix:
            tokens += self.tokenize(answer_prefix, add_special=False, parse_special=False)
        return tokens

    def _render(self, messages, enable_thinking, should_stop, tools=None) -> str:
        return self.template.render(messages, add_generation_prompt=True, enable_thinking=enable_thinking,
                                    should_stop=should_stop, tools=tools)

    def _format_chat(self, messages, enable_thinking, should_stop, render) -> list[int]:
        text = render(messages, enable_thinking, should_stop)
        if not any(self._has_control_text(m["content"]) for m in messages):
            return self.tokenize(text, add_special=False, parse_special=True)
        spans = self._message_spans(text, messages, enable_thinking, should_stop, render)
        if spans is None:  # the template changed the text beyond recognition: defuse the markers
            return self._format_defused(messages, enable_thinking, should_stop, render)
        return self._tokenize_spans(text, spans, lambda s, e: self.tokenize(text[s:e], add_special=False,
                                                                           parse_special=False))

    def _tokenize_spans(self, text: str, spans, inside: Callable[[int, int], list[int]]) -> list[int]:
        """The rendered chat's tokens: the template's markup between the message spans may hold
        control tokens; each message span is tokenized by `inside` (never as control tokens)."""
        tokens, pos = [], 0
        for start, end in spans:
            if start > pos:
                tokens += self.tokenize(text[pos:start], add_special=False, parse_special=True)
            tokens += inside(start, end)
            pos = end
        return tokens + (self.tokenize(text[pos:], add_special=False, parse_special=True) if pos < len(text) else [])

    def _format_media(self, messages, enable_thinking, should_stop, render) -> list[int]:
        """A chat whose messages carry images or audio: each item's marker goes before its
        message's text, the template is rendered, and the rendered text is tokenized piece
        by piece (message text never as control tokens), each marker replaced by the item's
        positions from the projector."""
        from .errors import TemplateError
        from .media import MediaError

        if self.projector is None:
            raise MediaError("this model has no projector (mmproj) loaded: it cannot read pictures or audio")
        items, marked = [], []
        for m in messages:
            text = str(m.get("content", "")).replace("\ue002", "").replace("\ue003", "")
            marks = ""
            for media in m.get("media") or []:
                marks += f"\ue002{len(items)}\ue003"
                items.append(media)
            marked.append({**m, "content": marks + ("\n" if marks and text else "") + text})
        for media in items:
            why = self.projector.supports(media)
            if why:
                raise MediaError(f"{media.name}: {why}")
        text = render(marked, enable_thinking, should_stop)
        spans = self._message_spans(text, marked, enable_thinking, should_stop, render)
        if spans is None:
            raise TemplateError("this model's chat template changes messages in a way that leaves no place "
                                "for pictures or audio")

        def inside(start: int, end: int) -> list[int]:  # message text, with each marker's media positions
            tokens, at = [], start
            for mk in MEDIA_MARK.finditer(text, start, end):
                if mk.start() > at:
                    tokens += self.tokenize(text[at:mk.start()], add_special=False, parse_special=False)
                tokens += self.projector.tokens(items[int(mk.group(1))])[0]
                at = mk.end()
            return tokens + (self.tokenize(text[at:end], add_special=False, parse_special=False) if end > at else [])

        return self._tokenize_spans(text, spans, inside)

    def _message_spans(self, text, messages, enable_thinking, should_stop, render) -> list[tuple[int, int]] | None:
        """Where each message's text sits in the rendered prompt: render again with a marker
        in place of each message, then match the real render piece by piece (a template may
        trim a message). None if the two renders do not line up."""
        marks = [{**m, "content": f"\ue000{i}\ue001"} for i, m in enumerate(messages)]
        probe = render(marks, enable_thinking, should_stop)
        parts = re.split("\ue000(\\d+)\ue001", probe)  # piece, index, piece, index, ..., piece
        spans, pos = [], 0
        for j in range(0, len(parts) - 1, 2):
            if int(parts[j + 1]) >= len(messages):
                return None
            piece, content, after = parts[j], messages[int(parts[j + 1])]["content"], parts[j + 2]
            if not text.startswith(piece, pos):
                return None
            pos += len(piece)
            for cand in (content, content.strip()):
                if text.startswith(cand, pos) and text.startswith(after, pos + len(cand)):
                    spans.append((pos, pos + len(cand)))
                    pos += len(cand)
                    break
            else:
                return None
        return spans if text[pos:] == parts[-1] else None

    def _has_control_text(self, text: str) -> bool:
        if text not in self._control_text_cache:
            if len(self._control_text_cache) > 4096:
                self._control_text_cache.clear()
            self._control_text_cache[text] = (
                self.tokenize(text, add_special=False, parse_special=True)
                != self.tokenize(text, add_special=False, parse_special=False))
        return self._control_text_cache[text]

    def _format_defused(self, messages, enable_thinking, should_stop, render) -> list[int]:
        """Fallback: every special-token text in the messages defused (see _defuse)."""
        out = [{**m, "content": self._defuse(m["content"])} for m in messages]
        return self.tokenize(render(out, enable_thinking, should_stop), add_special=False, parse_special=True)

    def _defuse(self, text: str) -> str:
        """A word joiner after the first character of every special-token text, so none of them
        can be read as the token."""
        if not self._has_control_text(text):
            return text
        special = set(self.tokenize(text, add_special=False, parse_special=True))
        for tok in special - set(self.tokenize(text, add_special=False, parse_special=False)):
            marker = self._token_text(tok)
            if len(marker) > 1:
                text = text.replace(marker, marker[0] + "\u2060" + marker[1:])
        return text

    def _defused(self, value):
        """`_defuse` on every string (keys too) of JSON-like data: tool declarations and calls."""
        if isinstance(value, str):
            return self._defuse(value)
        if isinstance(value, list):
            return [self._defused(v) for v in value]
        if isinstance(value, dict):
            return {self._defuse(k) if isinstance(k, str) else k: self._defused(v) for k, v in value.items()}
        return value

    def drop_oldest_turns(self, messages: list[dict], enable_thinking: bool = False,
                          should_stop: Callable[[], bool] | None = None) -> list[dict]:
        """Remove the oldest user/assistant exchanges (keeping a system message and the last
        user message) until the prompt leaves room to answer; what a user accepts when told
        the conversation no longer fits. Binary search over how many to drop: a prompt only
        gets shorter as exchanges go, so this renders the chat O(log n) times, not n."""
        msgs = list(messages)
        head = [m for m in msgs[:1] if m.get("role") == "system"]
        body = msgs[len(head):]
        room = max(64, self.n_ctx // 8)
        cuts = [0]  # body[cuts[j]:] is what remains after dropping j exchanges
        while len(body) - cuts[-1] > 1:
            c = cuts[-1]
            cuts.append(c + (2 if len(body) - c > 2 and body[c + 1].get("role") == "assistant" else 1))

        def fits(j):
            return len(self.format_chat(head + body[cuts[j]:], enable_thinking, should_stop)) + room <= self.n_ctx

        lo, hi = 0, len(cuts) - 1  # the answer is in [lo, hi]; hi (one message left) is the floor
        while lo < hi:
            mid = (lo + hi) // 2
            if fits(mid):
                hi = mid
            else:
                lo = mid + 1
        return head + body[cuts[lo]:]

    def chat(self, messages: list[dict], config: GenerationConfig = GenerationConfig(),
             enable_thinking: bool = False, should_stop: Callable[[], bool] | None = None,
             answer_prefix: str = "", tools: list[dict] | None = None) -> Iterator[GenerationEvent]:
        self._check_open()
        return self.generate(self.format_chat(messages, enable_thinking, should_stop, answer_prefix, tools),
                             config, should_stop)

    # ---- generation ----------------------------------------------------------------
    def generate(self, prompt: list[int], config: GenerationConfig = GenerationConfig(),
                 should_stop: Callable[[], bool] | None = None) -> Iterator[GenerationEvent]:
        """Check the request now (errors raise here, not on first iteration), then stream. The
        generation ends after the step in which `should_stop()` (or `cancel()`) says so: a
        request's own stop never reaches the generation of whoever has the turn next."""
        self._check_open()
        config.sampling.validate()
        if config.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        check_draft_length(config.draft_max)
        if config.logprobs is not None and not 0 <= config.logprobs <= MAX_LOGPROBS:
            raise ValueError(f"logprobs must be between 0 and {MAX_LOGPROBS}")
        if any(tok >= self.rt.target.n_vocab for tok, _ in config.sampling.logit_bias):
            raise ValueError(f"logit_bias names a token id outside the vocabulary (0..{self.rt.target.n_vocab - 1})")
        if not prompt:
            raise ValueError("the prompt is empty")
        if len(prompt) + 1 > self.n_ctx:
            raise ContextOverflowError(
                f"the conversation is {len(prompt)} tokens but the context holds {self.n_ctx}; "
                "drop the oldest turns or raise the context size",
                needed=len(prompt) + 1, n_ctx=self.n_ctx)
        spec = check_spec(config.spec) if config.use_mtp else SPEC_NONE
        if spec == "mtp" and not self.has_mtp and config.strict_mtp:
            raise MTPUnavailableError(
                "MTP needs a Gemma 4 target with its matching gemma-4 assistant drafter; "
                "none is loaded")
        strategy_name = self.strategy_for(spec)
        draft_max = config.draft_max
        if draft_max == AUTO and config.seed is not None:
            # A seed asks for the same answer every time. Auto's lengths follow wall-clock costs:
            # with sampling each length draws different random numbers, and even greedy output
            # can differ where two tokens tie within rounding (llama.cpp's CPU kernels round a
            # batch of other sizes differently). So a seeded generation drafts a fixed length
            # (the distribution is exact either way).
            draft_max = SEEDED_DRAFT_MAX
        strategy = make_strategy(strategy_name, draft_max)
        grammar = self._grammar(config)  # a bad grammar or schema raises here, before streaming
        self._cancel.clear()
        cancel = self._cancel
        stop = cancel.is_set if should_stop is None else (lambda: cancel.is_set() or should_stop())
        return self._run(list(prompt), config, strategy, stop, grammar)

    def strategy_for(self, spec: str) -> str:
        """The decoding strategy a draft-source choice means for this model: auto is every
        source it has (the drafter, if loaded, and lookup, which every model has)."""
        if spec == SPEC_NONE or (spec == "mtp" and not self.has_mtp):
            return "baseline"
        if spec == AUTO:
            return "hybrid" if self.has_mtp else "lookup"
        return spec

    @property
    def spec_sources(self) -> list[str]:
        """The draft sources this model has, for auto: ['mtp', 'lookup'] or ['lookup']."""
        return (["mtp"] if self.has_mtp else []) + ["lookup"]

    def _grammar(self, config: GenerationConfig):
        if config.grammar is None and config.json_schema is None:
            return None
        from .grammar import Grammar, GrammarError, schema_to_gbnf

        if config.grammar is not None and config.json_schema is not None:
            raise GrammarError("give a grammar or a JSON schema, not both")
        gbnf = config.grammar if config.grammar is not None else schema_to_gbnf(config.json_schema)
        return Grammar(self.rt.vocab, gbnf, self.rt.target.n_vocab)

    def _prefill(self, st: DecodeState, prompt: list[int], need_h: bool) -> Step:
        """Decode the prompt, reusing the common prefix cached by the last request, and pick
        the first token from the last prompt row (as llama.cpp's own generate does)."""
        tgt = self.rt.target
        n = len(prompt)
        # the last prompt token is always decoded again: its row gives the first token's
        # logits and, for MTP, the hidden state the first draft starts from
        keep = self._reusable(min(_common_prefix(self._cached, prompt), n - 1))
        while 0 < keep < n and prompt[keep] < 0 and prompt[keep - 1] == prompt[keep]:
            keep -= 1  # never half an image: its positions are decoded together
        if keep == 0 and self._cached:
            tgt.clear()
            self._cached = []
        elif keep < len(self._cached):
            tgt.truncate(keep)
            del self._cached[keep:]
        st.stats.reused_tokens = keep
        todo = prompt[keep:]
        st.stats.prefill_tokens = len(todo)
        if todo[-1] < 0:
            raise EngineError("a prompt cannot end with a picture or sound: text must follow it")
        pos = keep
        segments = _segments(todo)
        for n_seg, (start, end) in enumerate(segments):
            if todo[start] < 0:  # an image or a sound: the projector encodes (once) and decodes it
                run = self.projector.run_for(todo[start]) if self.projector is not None else None
                if run is None or run.n_pos != end - start:
                    raise EngineError("the prompt names a picture or sound that is not prepared")
                if self._should_stop():
                    raise _Cancelled
                st.stats.media_s += self.projector.decode(run, tgt.ctx, pos, tgt.n_batch)
                pos += run.n_pos
                self._cached.extend(todo[start:end])
                continue
            for i in range(start, end, tgt.n_batch):
                if self._should_stop():
                    raise _Cancelled
                chunk = todo[i:min(end, i + tgt.n_batch)]
                last = n_seg == len(segments) - 1 and i + tgt.n_batch >= end
                tgt.decode(chunk, pos, outputs="last" if last else "none")
                pos += len(chunk)
                self._cached.extend(chunk)
        row = len(chunk) - 1
        if need_h:
            tgt.hidden(row, st.pending_h)
        st.n_past = n
        tok = st.pick(tgt.logits(row))
        st.tokens.append(tok)
        return Step([tok], [False])

    def _reusable(self, keep: int) -> int:
        """How much of a cached prefix of `keep` tokens can really be reused. Sliding-window
        layers keep only the newest positions (the cache recycles older cells as it fills);
        the token after the prefix attends to the n_swa positions before it, so if any of
        those is gone the cached prefix would give wrong logits: decode from scratch."""
        if keep == 0 or self.rt.n_swa <= 0:
            return keep
        pos_min = lib.llama_memory_seq_pos_min(self.rt.target.memory, 0)
        return keep if 0 <= pos_min <= max(0, keep - self.rt.n_swa) else 0

    def _run(self, prompt, config: GenerationConfig, strategy, stop, grammar=None) -> Iterator[GenerationEvent]:
        if not self._busy.acquire(blocking=False):
            raise EngineError("the engine is already generating")
        self._should_stop = stop
        try:
            yield from self._run_locked(prompt, config, strategy, grammar)
        finally:
            self._should_stop = self._cancel.is_set
            if grammar is not None:
                grammar.close()
            self._busy.release()

    def _run_locked(self, prompt, config: GenerationConfig, strategy, grammar) -> Iterator[GenerationEvent]:
        rt = self.rt
        stats = GenerationStats(mode=strategy.name,
                                draft_max=strategy.draft_label if strategy.name != "baseline" else 0,
                                prompt_tokens=len(prompt))
        rng = np.random.default_rng(config.seed)
        need_h = strategy.needs_drafter
        st = DecodeState(rt=rt, params=config.sampling, rng=rng, stats=stats, costs=self.costs,
                         tokens=list(prompt), n_past=0,
                         pending_h=np.zeros(rt.n_embd, np.float32) if need_h else None,
                         n_ctx=self.n_ctx, grammar=grammar,
                         top_logprobs=-1 if config.logprobs is None else config.logprobs)
        text = TextAssembler(self._piece, self._control_text)
        text.prime(prompt)
        t_start = time.perf_counter()
        try:
            strategy.prepare(st)
            first = self._prefill(st, prompt, need_h)
        except _Cancelled:
            stats.finish_reason = "cancelled"
            yield GenerationEvent([], "", "", stats, "cancelled")
            return
        except BaseException:
            self._reset_cache()
            raise
        t_prefill = time.perf_counter()
        stats.prefill_s = t_prefill - t_start
        llama0 = rt.target.llama_s + (rt.drafter.llama_s if rt.drafter else 0.0)
        draft0 = rt.drafter.llama_s if rt.drafter else 0.0

        finish = None
        step = first
        cache_valid = True
        try:
            while finish is None:
                if step is None and self._should_stop():
                    finish = "cancelled"
                    yield GenerationEvent([], "", "", stats, finish)
                    break
                if step is None:
                    if st.n_past + 1 > self.n_ctx:
                        finish = "context"
                        yield GenerationEvent([], "", "", stats, finish)
                        break
                    try:
                        step = strategy.step(st, config.max_tokens - stats.generated_tokens)
                    except BaseException:
                        cache_valid = False
                        self._reset_cache()
                        raise
                # Walk the new tokens: stop at end-of-generation or at the token budget.
                keep = len(step.tokens)
                for i, tok in enumerate(step.tokens):
                    if self.is_eog(tok):
                        keep, finish = i, "stop"
                        break
                    if stats.generated_tokens + i + 1 >= config.max_tokens:
                        keep, finish = i + 1, "length"
                        break
                if keep < len(step.tokens):
                    # The cache may hold tokens past the stop; drop them so that it holds
                    # exactly tokens[:n_past] with the last kept token pending.
                    drop = len(step.tokens) - keep
                    n_tok = len(st.tokens) - drop + (1 if finish == "stop" else 0)
                    del st.tokens[n_tok:]
                    if st.n_past > len(st.tokens) - 1:
                        st.n_past = len(st.tokens) - 1
                        rt.target.truncate(st.n_past)
                pieces = [text.feed(t, d) for t, d in zip(step.tokens[:keep], step.drafted[:keep])]
                for piece in pieces:
                    piece.source = step.source if piece.drafted else ""
                for piece, lp in zip(pieces, st.logprobs):  # recorded in the order the tokens were kept
                    piece.logprob = lp
                st.logprobs.clear()
                answer = "".join(p.text for p in pieces if p.channel == "answer")
                thinking = "".join(p.text for p in pieces if p.channel == "thinking")
                now = time.perf_counter()
                if step is first:
                    stats.ttft_s = now - t_start
                    t_first = now
                stats.generated_tokens += keep
                stats.decode_s = now - t_first
                stats.llama_s = rt.target.llama_s + (rt.drafter.llama_s if rt.drafter else 0.0) - llama0
                stats.draft_llama_s = (rt.drafter.llama_s if rt.drafter else 0.0) - draft0
                if finish is not None:
                    a, th = text.flush()  # bytes of an unfinished character, as U+FFFD
                    if pieces and (a or th):
                        pieces[-1].text += a or th
                    answer += a
                    thinking += th
                stats.finish_reason = finish
                step = None
                yield GenerationEvent(pieces, answer, thinking, stats, finish)
        finally:
            # Also when the consumer stops iterating early: the cache then still holds
            # exactly tokens[:n_past], as after every step.
            stats.finish_reason = finish
            if cache_valid:
                self._cached = st.tokens[:st.n_past]

    def reset(self) -> None:
        """Forget the cached conversation (the next prompt is decoded from scratch)."""
        with self._busy:
            self._reset_cache()

    def _reset_cache(self) -> None:
        """After a failed decode the cache content is unknown: start from empty."""
        self._cached = []
        try:
            self.rt.target.clear()
        except Exception:
            pass

    def run(self, prompt: list[int], config: GenerationConfig = GenerationConfig(),
            on_event: Callable[[GenerationEvent], None] | None = None) -> GenerationResult:
        """Run a generation to the end and collect it."""
        res = GenerationResult()
        for ev in self.generate(prompt, config):
            res.answer += ev.answer
            res.thinking += ev.thinking
            res.tokens += ev.tokens
            res.drafted += [p.drafted for p in ev.pieces]
            res.stats = ev.stats
            if on_event:
                on_event(ev)
        return res

    def next_token_margin(self, prompt: list[int], generated: list[int]) -> float:
        """Gap between the best and second-best logit for the token after prompt+generated,
        computed the way baseline decoding computes it (prompt batched, then one token at a
        time): how close the target was to a tie there."""
        tgt = self.rt.target
        self._reset_cache()
        tgt.set_hidden_output(False)
        for i in range(0, len(prompt), tgt.n_batch):
            chunk = prompt[i:i + tgt.n_batch]
            tgt.decode(chunk, i, outputs="last")
        row = len(chunk) - 1
        for j, t in enumerate(generated):
            tgt.decode([t], len(prompt) + j, outputs="last")
            row = 0
        top = np.sort(tgt.logits(row))
        self._reset_cache()
        return float(top[-1] - top[-2])

    def batch_noise_at(self, prompt: list[int], generated: list[int], max_rows: int = 9) -> float:
        """How far llama.cpp's batched decode (a verify of 2..max_rows rows) moves the logits of
        the token after prompt+generated from a one-row decode. llama.cpp's CPU kernels are not
        batch-invariant (quantized matrix products and flash attention take other paths for
        other batch sizes): on Gemma 3 270M Q4_K_M this reaches 0.8 logits at 2k tokens, so a
        greedy choice with a smaller margin than this may differ between decoding one token
        at a time and verifying drafts, whatever drafts them (llama.cpp's own speculative
        decoding too)."""
        tgt = self.rt.target
        seq = list(prompt) + list(generated)
        self._reset_cache()
        tgt.set_hidden_output(False)
        head = seq[:-1]
        for i in range(0, len(head), tgt.n_batch):
            tgt.decode(head[i:i + tgt.n_batch], i, outputs="none")
        n = len(head)
        tgt.decode([seq[-1]], n, outputs="last")
        single = tgt.logits(0).copy()
        worst = 0.0
        for rows in range(2, max_rows + 1):
            tgt.truncate(n)
            tgt.decode([seq[-1]] + [seq[-1]] * (rows - 1), n, outputs="all")
            worst = max(worst, float(np.max(np.abs(tgt.logits_rows(rows)[0] - single))))
        self._reset_cache()
        return worst


class _Cancelled(Exception):
    pass
