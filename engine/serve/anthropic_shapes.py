"""Anthropic's Messages API reply shapes: the message and its content blocks, and the stream's
events (message_start, content_block_start / _delta / _stop, message_delta, message_stop,
ping, error). Fields are sent as openai_shapes says: `X | None` always (null when None, as
`stop_sequence: null`), `= absent()` only when set (llama-server's `timings`, only when asked).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .openai_shapes import Shape, Timings, absent

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


# ---- content blocks ----
class TextBlock(Shape):
    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(Shape):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""  # nothing is signed here


class ToolUseBlock(Shape):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict


ContentBlock = Annotated[TextBlock | ThinkingBlock | ToolUseBlock, Field(discriminator="type")]


class Usage(Shape):
    """The cached part of the prompt is counted apart from input_tokens."""

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int = 0


class Message(Shape):
    """The whole reply, or (empty, no stop reason yet) what message_start says."""

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ContentBlock]
    stop_reason: StopReason | None
    stop_sequence: str | None  # the stop sequence that ended the text
    usage: Usage
    timings: Timings | None = absent()  # not Anthropic's: only with timings_per_token


class TokenCount(Shape):
    input_tokens: int


# ---- the stream's events ----
class MessageStart(Shape):
    type: Literal["message_start"] = "message_start"
    message: Message


class Ping(Shape):
    type: Literal["ping"] = "ping"


class ContentBlockStart(Shape):
    type: Literal["content_block_start"] = "content_block_start"
    index: int
    content_block: ContentBlock


class TextDelta(Shape):
    type: Literal["text_delta"] = "text_delta"
    text: str


class ThinkingDelta(Shape):
    type: Literal["thinking_delta"] = "thinking_delta"
    thinking: str


class SignatureDelta(Shape):
    """How a thinking block ends."""

    type: Literal["signature_delta"] = "signature_delta"
    signature: str = ""


class InputJsonDelta(Shape):
    type: Literal["input_json_delta"] = "input_json_delta"
    partial_json: str


class ContentBlockDelta(Shape):
    type: Literal["content_block_delta"] = "content_block_delta"
    index: int
    delta: Annotated[TextDelta | ThinkingDelta | SignatureDelta | InputJsonDelta, Field(discriminator="type")]


class ContentBlockStop(Shape):
    type: Literal["content_block_stop"] = "content_block_stop"
    index: int


class StopDetails(Shape):
    stop_reason: StopReason
    stop_sequence: str | None


class MessageDelta(Shape):
    type: Literal["message_delta"] = "message_delta"
    delta: StopDetails
    usage: Usage
    timings: Timings | None = absent()


class MessageStop(Shape):
    type: Literal["message_stop"] = "message_stop"


class ErrorDetail(Shape):
    type: str  # errors.ANTHROPIC_TYPES by status
    message: str


class ErrorEvent(Shape):
    """A stream's failure after its 200."""

    type: Literal["error"] = "error"
    error: ErrorDetail


Event = MessageStart | Ping | ContentBlockStart | ContentBlockDelta | ContentBlockStop | MessageDelta | MessageStop \
    | ErrorEvent
