"""What every backend takes and yields: the generation settings, events and result, and the
`Backend` interface itself. No llama.cpp here, so the interface imports no implementation.

Two implementations yield the same `GenerationEvent`s and `GenerationStats`:
  - `engine.local.engine.Engine`: llama.cpp in this process (baseline and MTP, Tandem's own loop);
  - `engine.backends.remote.RemoteBackend`: an OpenAI-compatible server (llama-server, vLLM,
    SGLang, Ollama) doing the decoding; draft statistics come from what the server reports.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, Iterator

from .sampling import SamplingParams
from .stats import GenerationStats
from .gemma4.text import TokenPiece

AUTO = "auto"  # the draft length chosen every step from measured costs and acceptance: its one spelling
MAX_DRAFT = 15  # the longest fixed draft length
MAX_LOOKUP_RUN = 47  # the longest lookup proposal auto checks (see strategies/lookup.py)
MAX_LOGPROBS = 20  # alternatives per token, as OpenAI allows
SERVER_DRAFT = "server"  # in a remote reply's stats: the server chose the draft length when it started


SPECS = (AUTO, "mtp", "lookup", "none")  # where drafts come from; auto: every source the model has
SPEC_NONE = "none"


def check_spec(value) -> str:
    """One of SPECS, else ValueError (one line, for CLI, server and app)."""
    if value not in SPECS:
        raise ValueError(f"draft source must be one of {', '.join(SPECS)}, got {value!r}")
    return value


def choose_spec(spec: str | None = None, drafting: bool = True) -> str:
    """The one draft source a request's two switches mean: `drafting` off (the CLI's --no-mtp,
    the server's "mtp": false, the app's switch) is SPEC_NONE, `spec` names a source (None:
    AUTO). The one place they are checked against each other: off beside a named source is a
    ValueError (one line; the caller names its own fields)."""
    spec = check_spec(AUTO if spec is None else spec)
    if drafting:
        return spec
    if spec not in (AUTO, SPEC_NONE):
        raise ValueError(f"drafting is off and the draft source {spec!r} asks for it: give one of them")
    return SPEC_NONE


def check_draft_length(value) -> int | str:
    """AUTO or a whole number 1..MAX_DRAFT, else ValueError (one line, for CLI, server and app)."""
    if value == AUTO:
        return AUTO
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DRAFT:
        raise ValueError(f"draft length must be '{AUTO}' or between 1 and {MAX_DRAFT}, got {value!r}")
    return value


@dataclass(frozen=True)
class GenerationConfig:
    """One generation's settings, checked when built (a bad draft source or length is a
    ValueError here, not in each backend)."""

    max_tokens: int = 512
    # The one drafting choice (SPECS): auto = every source the model has (the drafter, if
    # loaded, and lookup), so it never fails; mtp = the drafter, and without one the engine
    # raises MTPUnavailableError rather than quietly decoding a baseline; none = baseline.
    spec: str = AUTO
    draft_max: int | str = AUTO  # AUTO: chosen every step from measured costs and acceptance
    sampling: SamplingParams = SamplingParams()
    seed: int | None = None
    grammar: str | None = None  # a grammar the output must follow (engine.local.grammar.from_*: llguidance's form), or
    json_schema: dict | str | None = None  # a JSON schema it must match (made a grammar)
    logprobs: int | None = None  # 0..MAX_LOGPROBS: each token's log-probability and this many alternatives

    def __post_init__(self):
        check_spec(self.spec)
        check_draft_length(self.draft_max)


@dataclass
class GenerationEvent:
    pieces: list[TokenPiece]
    answer: str  # answer text added by this step
    thinking: str  # thinking text added by this step
    stats: GenerationStats
    finish_reason: str | None = None  # "stop", "length", "context", "cancelled"
    # tool calls a server read out of the reply itself (a remote backend's, on its last event);
    # a local engine's calls are read from the text by the reply assembler
    calls: list = field(default_factory=list)

    @property
    def tokens(self) -> list[int]:
        return [p.id for p in self.pieces]


@dataclass
class GenerationResult:
    answer: str = ""
    thinking: str = ""
    tokens: list[int] = field(default_factory=list)
    drafted: list[bool] = field(default_factory=list)
    stats: GenerationStats | None = None

    @property
    def finish_reason(self):
        return self.stats.finish_reason if self.stats else None


# generations `tandem serve` decodes together unless told otherwise (--parallel); the app's
# server serves as many, and the app's engine has one sequence more, for the window's own chat
DEFAULT_PARALLEL = 4


class Backend(ABC):
    """Generations may run at once (the app's chat beside `tandem serve`'s requests): the local
    engine decodes them together, up to one per sequence of its context, and queues the rest.
    A generation stops when its own `should_stop()` says so; `cancel()` stops whatever runs
    (closing, unloading)."""

    kind: str = "local"  # "local" or "remote"
    engine_name: str = "llama.cpp"  # what decodes: llama.cpp, llama-server, vllm, openai-compatible
    has_mtp: bool = False  # drafting happens (remote: the server reported drafts, or its setup says so)
    mtp_reason: str = ""  # why not, in words
    can_switch_mtp: bool = True  # per request; servers choose speculation per server

    @property
    @abstractmethod
    def n_ctx(self) -> int | None:
        """Context size in tokens, if known."""

    @abstractmethod
    def chat(self, messages: list[dict], config: GenerationConfig, enable_thinking: bool = False,
             should_stop: Callable[[], bool] | None = None, answer_prefix: str = "") -> Iterator[GenerationEvent]:
        """Stream the answer to a chat. Errors in the request raise here, before iterating."""

    @abstractmethod
    def cancel(self) -> None:
        """Stop the generation in progress at once (callable from another thread)."""

    @abstractmethod
    def close(self) -> None:
        """Free what the backend holds (models, connections)."""

    def count_tokens(self, messages: list[dict], enable_thinking: bool = False,
                     tools: list[dict] | None = None, should_stop: Callable[[], bool] | None = None) -> int | None:
        """Tokens the chat's prompt takes in the context (its tool declarations included), or
        None where the backend cannot tell. `should_stop` cuts a slow template's render short."""
        return None

    def drop_oldest_turns(self, messages: list[dict], enable_thinking: bool = False,
                          should_stop: Callable[[], bool] | None = None,
                          tools: list[dict] | None = None) -> list[dict]:
        return messages

    def reset(self) -> None:
        """Forget cached context (Compare runs start from scratch). Servers keep their own."""
