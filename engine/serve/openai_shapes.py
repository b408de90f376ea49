"""OpenAI's reply shapes: chat completions and completions, whole and as stream chunks, and the
error a stream ends with; and llama-server's `timings`, which every API here can carry.

How a field is sent is said where it is declared: a field typed `X | None` is always sent
(null when None, as OpenAI sends `logprobs: null`); one declared `= absent()` is left out while
it is None (sent only where it applies, as `tool_calls`). Models are serialized as they are
(`model_dump_json()`, or returned to FastAPI, which dumps them); a misspelt field is an error
(`extra="forbid"`), never a field silently dropped.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


def _none(value) -> bool:
    return value is None


def absent():
    """A field left out of the JSON while it is None."""
    return Field(default=None, exclude_if=_none)


class Shape(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Timings(Shape):
    """llama-server's `timings`, with Tandem's per-source draft counts."""

    prompt_n: int
    prompt_ms: float
    prompt_per_second: float
    predicted_n: int
    predicted_ms: float
    predicted_per_second: float
    cache_n: int
    # as llama-server: only when drafts were made
    draft_n: int | None = absent()
    draft_n_accepted: int | None = absent()
    # Tandem's own: how many of the drafts lookup proposed (and had accepted), when it proposed any
    draft_n_lookup: int | None = absent()
    draft_n_accepted_lookup: int | None = absent()

    @classmethod
    def of(cls, stats) -> "Timings":
        drafts = {}
        if stats.draft_tokens > 0:
            drafts = {"draft_n": stats.draft_tokens, "draft_n_accepted": stats.accepted_tokens}
            if stats.lookup_draft_tokens:
                drafts.update(draft_n_lookup=stats.lookup_draft_tokens,
                              draft_n_accepted_lookup=stats.lookup_accepted_tokens)
        return cls(prompt_n=stats.prefill_tokens, prompt_ms=stats.prefill_s * 1e3,
                   prompt_per_second=stats.prefill_tps or 0.0, predicted_n=stats.generated_tokens,
                   predicted_ms=stats.decode_s * 1e3, predicted_per_second=stats.decode_tps or 0.0,
                   cache_n=stats.reused_tokens, **drafts)


# ---- log-probabilities ----
class TopLogprob(Shape):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(Shape):
    content: list[TokenLogprob]


class CompletionLogprobs(Shape):
    """The completions endpoint's (older) shape."""

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


# ---- chat's message and tool calls ----
class Function(Shape):
    name: str
    arguments: str  # JSON text


class ToolCall(Shape):
    id: str
    type: Literal["function"] = "function"
    function: Function


class Message(Shape):
    role: Literal["assistant"] = "assistant"
    content: str | None  # null when the reply is only calls
    tool_calls: list[ToolCall] | None = absent()
    reasoning_content: str | None = absent()  # the thinking, llama-server's field


FinishReason = Literal["stop", "length", "tool_calls"]


class ChatChoice(Shape):
    index: int
    message: Message
    logprobs: ChatLogprobs | None
    finish_reason: FinishReason


class TextChoice(Shape):
    """A completion's choice, whole or one chunk of it (finish_reason null until the last)."""

    index: int
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: FinishReason | None


class PromptTokensDetails(Shape):
    cached_tokens: int  # the part of the prompt not decoded again


class Usage(Shape):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


class SchemaCheck(Shape):
    """A choice decoded under a JSON schema whose grammar left some keywords unenforced (no
    strict: true): which, and whether the finished reply meets the whole schema (None: the check
    did not finish in time)."""

    index: int
    unenforced: list[str]
    valid: bool | None
    errors: list[str]


class TandemExtras(Shape):
    """Tandem's own part of a reply (OpenAI's shape has no place for it)."""

    schema_check: list[SchemaCheck]


class Completion(Shape):
    """A whole reply, chat's or completions'."""

    id: str
    object: Literal["chat.completion", "text_completion"]
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChatChoice | TextChoice]
    usage: Usage
    timings: Timings
    tandem: TandemExtras | None = absent()


# ---- streamed ----
class FunctionDelta(Shape):
    name: str | None = absent()  # in a call's first delta, with its id; then the arguments
    arguments: str


class ToolCallDelta(Shape):
    index: int
    id: str | None = absent()
    type: Literal["function"] | None = absent()
    function: FunctionDelta


class RoleDelta(Shape):
    """A chat stream's first delta: who speaks, with no content yet (as OpenAI's and llama-server's)."""

    role: Literal["assistant"] = "assistant"
    content: None = None


class Delta(Shape):
    content: str | None = absent()
    reasoning_content: str | None = absent()
    tool_calls: list[ToolCallDelta] | None = absent()


class ChunkChoice(Shape):
    index: int
    delta: RoleDelta | Delta
    logprobs: ChatLogprobs | None = None
    finish_reason: FinishReason | None = None


class Chunk(Shape):
    id: str
    object: Literal["chat.completion.chunk", "text_completion"]
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChunkChoice | TextChoice]  # none in the usage chunk
    usage: Usage | None = absent()  # the last chunk's, when stream_options.include_usage
    timings: Timings | None = absent()  # each choice's last chunk's; every chunk's with timings_per_token
    tandem: TandemExtras | None = absent()  # each choice's last chunk's, when its schema was checked


class StreamErrorDetail(Shape):
    message: str
    type: str
    code: str | None


class StreamError(Shape):
    """What a stream ends with when it fails after its 200."""

    error: StreamErrorDetail
