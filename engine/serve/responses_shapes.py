"""OpenAI's Responses API reply shapes: the response object, its output items (reasoning,
message, function_call) and the `response.*` stream events, each with its sequence_number.
Fields are sent as openai_shapes says: `X | None` always (null when None, as `error: null`),
`= absent()` only when set (a call's namespace; llama-server's `timings`, only when asked).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from .openai_shapes import Shape, Timings, absent

Status = Literal["in_progress", "completed", "incomplete"]


# ---- output items, and their content parts ----
class OutputText(Shape):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list = []
    logprobs: list = []


class ReasoningText(Shape):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


Part = Annotated[OutputText | ReasoningText, Field(discriminator="type")]


class MessageItem(Shape):
    id: str
    type: Literal["message"] = "message"
    status: Status
    role: Literal["assistant"] = "assistant"
    content: list[OutputText]  # one part once streamed; none while it streams


class ReasoningItem(Shape):
    id: str
    type: Literal["reasoning"] = "reasoning"
    summary: list = []
    content: list[ReasoningText]


class FunctionCallItem(Shape):
    id: str
    type: Literal["function_call"] = "function_call"
    status: Status
    call_id: str
    name: str
    arguments: str  # JSON text; empty while the call streams
    namespace: str | None = absent()  # the namespace the function was declared in, if any


OutputItem = Annotated[MessageItem | ReasoningItem | FunctionCallItem, Field(discriminator="type")]


# ---- the response ----
class InputTokensDetails(Shape):
    cached_tokens: int


class OutputTokensDetails(Shape):
    reasoning_tokens: int


class Usage(Shape):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class IncompleteDetails(Shape):
    reason: Literal["max_output_tokens"] = "max_output_tokens"


class ResponseError(Shape):
    code: str
    message: str


class Response(Shape):
    """The response object, in progress (no output, no usage yet), done or failed. What the
    request asked (instructions, tools, sampling) is said back as it came."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    model: str
    status: Literal["in_progress", "completed", "incomplete", "failed"]
    incomplete_details: IncompleteDetails | None
    error: ResponseError | None
    instructions: str | None
    max_output_tokens: int | None
    output: list[OutputItem]
    parallel_tool_calls: bool
    tool_choice: Any
    tools: list[dict]
    store: Literal[False] = False  # nothing is kept
    service_tier: Literal["default"] = "default"  # one tier here, whichever the request named
    temperature: float | None
    top_p: float | None
    text: dict
    reasoning: dict | None
    truncation: Literal["auto", "disabled"] = "disabled"
    metadata: dict = {}
    usage: Usage | None
    timings: Timings | None = absent()  # not OpenAI's: llama-server's, on a whole response


class InputTokens(Shape):
    object: Literal["response.input_tokens"] = "response.input_tokens"
    input_tokens: int


# ---- the stream's events ----
class Event(Shape):
    """Every event: its type and place in the stream; llama-server's timings with timings_per_token."""

    type: str
    sequence_number: int
    timings: Timings | None = absent()


class ResponseEvent(Event):
    type: Literal["response.created", "response.in_progress", "response.completed", "response.incomplete",
                  "response.failed"]
    response: Response


class OutputItemEvent(Event):
    type: Literal["response.output_item.added", "response.output_item.done"]
    output_index: int
    item: OutputItem


class ContentPartEvent(Event):
    type: Literal["response.content_part.added", "response.content_part.done"]
    item_id: str
    output_index: int
    content_index: int
    part: Part


class OutputTextDelta(Event):
    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list = []


class OutputTextDone(Event):
    type: Literal["response.output_text.done"] = "response.output_text.done"
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list = []


class ReasoningTextDelta(Event):
    type: Literal["response.reasoning_text.delta"] = "response.reasoning_text.delta"
    item_id: str
    output_index: int
    content_index: int
    delta: str


class ReasoningTextDone(Event):
    type: Literal["response.reasoning_text.done"] = "response.reasoning_text.done"
    item_id: str
    output_index: int
    content_index: int
    text: str


class ArgumentsDelta(Event):
    type: Literal["response.function_call_arguments.delta"] = "response.function_call_arguments.delta"
    item_id: str
    output_index: int
    delta: str


class ArgumentsDone(Event):
    type: Literal["response.function_call_arguments.done"] = "response.function_call_arguments.done"
    item_id: str
    output_index: int
    arguments: str
