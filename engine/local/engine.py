"""Engine: the loaded models, and generations streamed from them.

    engine = Engine.load("target.gguf", "drafter.gguf", LoadOptions(n_seq=4))
    for ev in engine.chat([{"role": "user", "content": "Hi"}], GenerationConfig(draft_max="auto")):
        print(ev.answer, end="", flush=True)

A generation is an iterator of `GenerationEvent`s (one per decoding step). Generations on
several threads at once decode together (scheduler.py: one batch per step, up to n_seq of
them, the rest wait); each sequence keeps what its last generation left in the cache, and a
prompt goes where the longest part of it is cached, so only the new suffix is decoded.
Tokenizing and chat formatting are prompt.py's; decoding strategies are strategies/.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from ..errors import ContextOverflowError, ModelUnloaded, MTPUnavailableError
from ..generation import (AUTO, MAX_LOGPROBS, SPEC_NONE, Backend, GenerationConfig, GenerationEvent,  # noqa: F401
                         GenerationResult)
from .llama import recording_allocations
from .runtime import LoadOptions, Runtime
from .grammar import Tokenizer
from .prompt import Prompts
from .disk_cache import DiskCache, cache_root, default_disk_budget, model_key
from .prompt_cache import CacheCounts, HostCache, default_host_budget
from .scheduler import Job, Scheduler, Sequence
from ..stats import GenerationStats
from ..strategies import CostModel, make_strategy
from ..strategies.base import DecodeState
from ..gemma4.text import TextAssembler

SEEDED_DRAFT_MAX = 2  # the draft length of a seeded generation when auto was asked for
MEDIA_BATCH = 2048  # batch and micro-batch with a projector: a whole image in one micro-batch


log = logging.getLogger("tandem.prompt_cache")


class Engine(Backend):
    """The local backend: llama.cpp in this process, baseline and MTP decoding (Tandem's loop)."""

    kind = "local"
    engine_name = "llama.cpp"

    def __init__(self, runtime: Runtime):
        super().__init__()
        self.rt = runtime
        self.projector = None  # engine.local.media.Projector when an mmproj is loaded: images / audio
        self.closed = False
        self.prompts = Prompts(runtime.vocab, runtime.target_model, runtime.n_ctx)
        self.cache_counts = CacheCounts()  # what the prompt cache did (/metrics)
        self.host_cache = self._host_cache(runtime)
        # step costs measured on this machine (the scheduler records them), for auto's choices
        self.scheduler = Scheduler(runtime, self._new_state, runtime.n_seq, CostModel(), self.is_eog,
                                   self.host_cache, self._turn_token(), self.cache_counts)
        self.grammar_tokenizer = Tokenizer(runtime.vocab)  # built on the first constrained request

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
        engine = cls(Runtime(target, drafter, options, progress, projector_path=mmproj))
        if mmproj:
            try:
                engine.attach_projector(mmproj)
            except BaseException:
                engine.close()
                raise
        return engine

    def attach_projector(self, path) -> None:
        from .media import Projector

        from ..models.gguf_info import read_gguf_info

        info = self.rt.projector_info  # read already where Engine.load named it
        if info is None or info.path != Path(path):
            self.rt.projector_info = read_gguf_info(path)  # in the memory plan, with what clip allocates
        with recording_allocations() as self.rt.allocated["projector"]:
            self.projector = Projector(path, self.rt, self.rt.n_threads,
                                       use_gpu=self.rt.options.target_gpu_layers != 0)
        self.scheduler.projector = self.prompts.projector = self.projector

    def close(self) -> None:
        """Free the models. Waits for a generation in progress (it is cancelled first) and for
        the turn of whoever holds it; afterwards every call refuses with EngineError instead of
        touching freed memory (a request `tandem serve` had queued may still arrive)."""
        self.cancel()
        if self.closed:
            return
        self.closed = True
        self.scheduler.close()  # after the running generations saw the cancel
        with self.scheduler.contexts:
            self.scheduler.table.save_to_disk()  # what the slots hold, for the next start
            if self.projector is not None:  # it reads the target's vocabulary: freed first
                self.projector.close()
                self.projector = None
            self.scheduler.projector = self.prompts.projector = None
            self.rt.close()

    @property
    def costs(self) -> CostModel:
        return self.scheduler.costs

    @costs.setter
    def costs(self, value: CostModel) -> None:
        self.scheduler.costs = value

    @property
    def template(self):
        """The model's chat template (prompt.py renders it)."""
        return self.prompts.template

    @template.setter
    def template(self, value) -> None:
        self.prompts.template = value

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
    def memory(self):
        """(planned, allocated) MemoryPlans: what engine/models/memory_plan.py planned for these
        files at this context, and what llama.cpp allocated."""
        return self.rt.memory()

    @property
    def placement(self):
        """engine/models/fit.py's Placement of this pair: its `note` says what was chosen for the
        user (the context or GPU layers left to it) and why, and what they should know of their own."""
        return self.rt.placement

    @property
    def draft_head(self):
        """The drafter's head (engine/models/draft_head.py's DraftHead: full or clustered, and
        the tokens each draft step scores), or None without a drafter."""
        return self.rt.draft_head if self.rt.has_drafter else None

    @property
    def n_vocab(self) -> int:
        return self.rt.target.n_vocab

    @property
    def mtp_reason(self) -> str:
        if self.has_mtp:
            return ""
        info = self.rt.target_info
        return "no drafter loaded" if info.is_gemma4_target else f"{info.arch} models have no MTP drafter"

    def count_tokens(self, messages: list[dict], enable_thinking: bool = False,
                     tools: list[dict] | None = None, should_stop: Callable[[], bool] | None = None) -> int:
        """The prompt's tokens, as `chat` would decode them: tool declarations take room even
        before the first message."""
        return len(self.format_chat(messages, enable_thinking, should_stop, tools=tools)) if messages or tools else 0

    def cancel(self) -> None:
        """Ask every running generation (on another thread) to stop after its current step."""
        self.scheduler.cancel_all()

    # ---- text <-> tokens, chats -> prompts (prompt.py) -------------------------------
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        self._check_open()
        return self.prompts.tokenize(text, add_special, parse_special)

    def detokenize(self, tokens: list[int]) -> str:
        return self.prompts.detokenize(tokens)

    def token_bytes(self, tok: int) -> bytes:
        """A token's bytes as the model wrote them, a control token's marker included."""
        return self.prompts.token_bytes(tok)

    def grammar_marker(self, text: str) -> str:
        """A control marker (Gemma 4's <|tool_call>, <|"|>, ...) in a grammar: its token where the
        vocabulary has it as one, else its text (a converted fine-tune, a test model)."""
        from ..gemma4.call_grammar import text_marker

        ids = self.prompts.tokenize(text, False, True)
        if len(ids) == 1 and self.prompts.token_bytes(ids[0]) == text.encode():
            return f"<[{ids[0]}]>"
        return text_marker(text)

    def is_eog(self, tok: int) -> bool:
        return self.prompts.is_eog(tok)

    def piece(self, tok: int, special: bool = False) -> bytes:
        """A token's bytes in the reply's text (`special`: a control token writes its marker too)."""
        return self.prompts.piece(tok, special)

    def control_text(self, tok: int) -> str | None:
        """A control token's marker (<|turn>, <|channel>, ...); None for any other token."""
        return self.prompts.control_text(tok)

    def format_chat(self, messages: list[dict], enable_thinking: bool = False,
                    should_stop: Callable[[], bool] | None = None, answer_prefix: str = "",
                    tools: list[dict] | None = None) -> list[int]:
        """The prompt tokens of a chat (see Prompts.format_chat)."""
        self._check_open()
        return self.prompts.format_chat(messages, enable_thinking, should_stop, answer_prefix, tools)

    def drop_oldest_turns(self, messages: list[dict], enable_thinking: bool = False,
                          should_stop: Callable[[], bool] | None = None,
                          tools: list[dict] | None = None) -> list[dict]:
        return self.prompts.drop_oldest_turns(messages, enable_thinking, should_stop, tools)

    def chat(self, messages: list[dict], config: GenerationConfig = GenerationConfig(),
             enable_thinking: bool = False, should_stop: Callable[[], bool] | None = None,
             answer_prefix: str = "", tools: list[dict] | None = None, sink=None) -> Iterator[GenerationEvent]:
        self._check_open()
        return self.generate(self.format_chat(messages, enable_thinking, should_stop, answer_prefix, tools),
                             config, should_stop, sink)

    # ---- generation ----------------------------------------------------------------
    def generate(self, prompt: list[int], config: GenerationConfig = GenerationConfig(),
                 should_stop: Callable[[], bool] | None = None, sink=None) -> Iterator[GenerationEvent]:
        """Check the request now (errors raise here, not on first iteration), then stream. The
        generation ends after the step in which `should_stop()` (or `cancel()`) says so, or the
        stream is closed. Generations wait for a free sequence in the scheduler's queue, in order.
        `sink(event)`: the events go there instead (called on the scheduler's thread), and
        the stream returned only stops the generation when closed."""
        self._check_open()
        config.sampling.validate()
        if config.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
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
        if config.spec == "mtp" and not self.has_mtp:  # asked by name: no quiet baseline (auto falls back)
            raise MTPUnavailableError(
                "MTP needs a Gemma 4 target with its matching gemma-4 assistant drafter; "
                "none is loaded")
        strategy_name = self.strategy_for(config.spec)
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
        text = TextAssembler(self.piece, self.control_text)
        text.prime(prompt)
        job = Job(list(prompt), config, strategy, should_stop or (lambda: False), grammar, text, sink)
        return self.scheduler.submit(job).stream()

    def _new_state(self, seq: Sequence) -> None:
        """A sequence's decode state, made when it gets its slot."""
        job, rt = seq.job, self.rt
        strategy = job.strategy
        stats = GenerationStats(mode=strategy.name,
                                draft_max=strategy.draft_label if strategy.name != "baseline" else 0,
                                prompt_tokens=len(job.prompt),
                                draft_head=rt.draft_head.label if strategy.needs_drafter else "")
        seq.st = DecodeState(rt=rt, params=job.config.sampling, rng=np.random.default_rng(job.config.seed),
                             stats=stats, costs=self.costs, tokens=list(job.prompt), n_past=0,
                             pending_h=np.zeros(rt.n_embd, np.float32) if strategy.needs_drafter else None,
                             n_ctx=self.n_ctx, grammar=job.grammar,
                             top_logprobs=-1 if job.config.logprobs is None else job.config.logprobs)

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
        from .grammar import Grammar, GrammarError, from_json_schema

        if config.grammar is not None and config.json_schema is not None:
            raise GrammarError("give a grammar or a JSON schema, not both")
        grammar = config.grammar if config.grammar is not None else from_json_schema(config.json_schema)
        return Grammar(self.grammar_tokenizer, grammar, self.rt.target.n_vocab)

    def _host_cache(self, rt: Runtime) -> HostCache | None:
        """The host cache of conversations out of the slots, writing through to the disk cache
        (None where turned off, LoadOptions.cache_ram_mib)."""
        o = rt.options
        budget = default_host_budget() if o.cache_ram_mib < 0 else o.cache_ram_mib << 20
        if budget <= 0:
            return None
        disk = None
        if o.cache_disk_mib != 0:
            try:
                key = model_key(rt.target_info.path, o.kv_type, o.flash_attn)
                folder = cache_root() / key
                disk_budget = default_disk_budget(folder) if o.cache_disk_mib < 0 else o.cache_disk_mib << 20
                disk = DiskCache(folder, key, disk_budget, self.cache_counts) if disk_budget > 0 else None
            except OSError as e:  # a read-only or full disk: the memory cache alone
                log.warning("prompt cache: no disk cache (%s)", e)
        return HostCache(budget, self.cache_counts, disk)

    def _turn_token(self) -> int | None:
        """The control token that starts a chat turn (Gemma 4's, Gemma 3's), if the vocabulary
        has one: prompts are checkpointed before it."""
        for marker in ("<|turn>", "<start_of_turn>"):
            toks = self.prompts.tokenize(marker, add_special=False, parse_special=True)
            if len(toks) == 1 and self.prompts.control_text(toks[0]) == marker:
                return toks[0]
        return None

    def warm_up(self) -> None:
        """Pay now what the first request would pay once (~0.4 s): the chat template compiled in
        its sandbox, the vocabulary's marker texts read (a prompt's text is checked against
        them) and llama.cpp's first decode. `tandem serve` and the window call it after loading,
        as llama-server warms up."""
        self._check_open()
        self.format_chat([{"role": "system", "content": "<|turn>"}, {"role": "user", "content": "Hi"}],
                         tools=[{"type": "function", "function": {
                             "name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}}])
        self._alone(lambda target: target.decode(self.prompts.tokenize("Hi"), 0, outputs="last"))

    def reset(self) -> None:
        """Forget the cached conversations no generation is using (the next prompt is decoded
        from scratch)."""
        self._check_open()
        self.scheduler.forget_idle()

    def _alone(self, fn: Callable):
        """fn(target) with the contexts to itself, once no generation runs, on the scheduler's
        thread like every computation (Scheduler.call); the slots start empty after it."""
        self._check_open()

        def alone():
            self.scheduler.forget_all()
            try:
                return fn(self.rt.target)
            finally:
                self.scheduler.forget_all()
        return self.scheduler.call(alone)

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

    @staticmethod
    def _logits_after(tgt, prompt: list[int], generated: list[int], one_by_one: bool = True) -> np.ndarray:
        """The target's logits for the token after prompt+generated, decoded from the start: the
        prompt in batches, then the generated tokens one at a time (as baseline decoding writes
        their cache cells) or in batches (as verifies write them)."""
        tgt.truncate(0)
        at = 0
        for part, step in ((list(prompt), tgt.n_batch), (list(generated), 1 if one_by_one else tgt.n_batch)):
            for i in range(0, len(part), step):  # as the scheduler's prefill: logits of a part's last chunk
                chunk = part[i:i + step]
                tgt.decode(chunk, at, outputs="last" if i + step >= len(part) else "none")
                at += len(chunk)
        return tgt.logits(-1).copy()  # the last output row of the last batch

    def next_token_margin(self, prompt: list[int], generated: list[int]) -> float:
        """Gap between the best and second-best logit for the token after prompt+generated,
        computed the way baseline decoding computes it (prompt batched, then one token at a
        time): how close the target was to a tie there."""
        def margin(tgt):
            tgt.set_hidden_output(False)
            return np.sort(self._logits_after(tgt, prompt, generated))
        top = self._alone(margin)
        return float(top[-1] - top[-2])

    def batch_noise_at(self, prompt: list[int], generated: list[int], max_rows: int = 9) -> float:
        """How far llama.cpp's batched decode (a verify of 2..max_rows rows) moves the logits of
        the token after prompt+generated from a one-row decode. llama.cpp's CPU kernels are not
        batch-invariant (quantized matrix products and flash attention take other paths for
        other batch sizes): on Gemma 3 270M Q4_K_M this reaches 0.8 logits at 2k tokens, so a
        greedy choice with a smaller margin than this may differ between decoding one token
        at a time and verifying drafts, whatever drafts them (llama.cpp's own speculative
        decoding too). Measured both ways a drafting run differs: the rows of one verify, and
        the cache cells of the generated tokens written in batches rather than one by one."""
        seq = list(prompt) + list(generated)

        def noise(tgt) -> float:
            tgt.set_hidden_output(False)
            n = len(seq) - 1
            single = self._logits_after(tgt, seq[:-1], seq[-1:])
            worst = 0.0
            for rows in range(2, max_rows + 1):
                tgt.truncate(n)
                tgt.decode([seq[-1]] * rows, n, outputs="all")
                worst = max(worst, float(np.max(np.abs(tgt.logits_rows(rows)[0] - single))))
            if generated:
                # the cache itself: a drafting run wrote the generated tokens' cells in verify
                # batches, the baseline one at a time (on Gemma 3 270M Q4_K_M this alone moves
                # the next logits by 0.8-2.3 within 64 tokens, where the rows above moved none)
                ends = [self._logits_after(tgt, prompt, generated, one_by_one) for one_by_one in (True, False)]
                worst = max(worst, float(np.max(np.abs(ends[0] - ends[1]))))
            return worst
        return self._alone(noise)

