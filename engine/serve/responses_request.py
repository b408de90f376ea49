"""A Responses API request (`POST /v1/responses`) made into the chat request the chat route
takes: its shape, its input items as chat messages and calls, its tools (namespaces flattened,
hosted ones left out), what it asks that this server does not keep (refused by name), and
truncation "auto". responses_api.py answers it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from . import chat_messages as cm
from . import request as rq
from .errors import ApiError
from .hosted_tools import RESPONSES_HOSTED, is_hosted
from .request import ChatRequest, TandemOptions, _Loose

NO_THINKING = (None, "none", "minimal")
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
SUMMARIES = (None, "auto", "concise", "detailed")  # thinking comes back whole whichever is asked
# include values that change nothing here: Codex asks for its reasoning encrypted, to send it back
# next turn (Gemma 4's template drops earlier thinking: nothing is carried), and the others are the
# outputs of hosted tools and echoed input pictures, which no response here has
INCLUDE_NO_EFFECT = ("reasoning.encrypted_content", "web_search_call.action.sources", "web_search_call.results",
                     "file_search_call.results", "code_interpreter_call.outputs",
                     "computer_call_output.output.image_url", "message.input_image.image_url")
# truncation "auto" leaves this much of the context for the reply (or max_output_tokens, if less)
TRUNCATION_ROOM = 4096
# no max_output_tokens: as OpenAI, until the model ends or the context is full (Codex sends none,
# and takes a response cut at a default cap as a failed turn); the context bounds it
UNTIL_CONTEXT = 2**31 - 1


class ResponsesRequest(_Loose):
    model: str | None = None
    input: str | list[dict]
    instructions: str | None = None
    tools: list[dict] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool = True
    text: dict | None = None
    reasoning: dict | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = None
    stream: bool = False
    store: bool | None = None  # nothing is kept either way: the response says store false
    previous_response_id: str | None = None
    conversation: Any = None  # refused: no conversations are kept
    prompt: Any = None  # refused: no stored prompts
    include: Any = None  # only values that change nothing here (INCLUDE_NO_EFFECT)
    top_logprobs: int | None = None  # 0 only: logprobs are chat completions' here
    service_tier: str | None = None  # a hint: one tier here; the response says "default"
    background: bool | None = None
    truncation: Literal["auto", "disabled"] = "disabled"
    timings_per_token: bool = False
    stop: str | list[str] | None = None  # llama-server's extension, as on chat completions
    tandem: TandemOptions | None = None
    verbose: bool | None = None  # llama-server's, refused when true (as on chat completions)
    return_progress: bool | None = None


def _parts(content, where: str):
    """A message's content as OpenAI chat content (text, or parts with pictures)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(400, f"{where} must be text or a list of content parts", param=where)
    out = []
    for j, p in enumerate(content):
        kind = p.get("type") if isinstance(p, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(p.get("text"), str):
            out.append({"type": "text", "text": p["text"]})
        elif kind == "input_image":
            out.append({"type": "image_url", "image_url": {"url": p.get("image_url")}})
        elif kind == "refusal":
            out.append({"type": "text", "text": str(p.get("refusal", ""))})
        else:
            raise ApiError(400, f"{where}[{j}]: content of type {str(kind)[:40]!r} is not supported (input_text, "
                                "output_text, input_image)", param=f"{where}[{j}].type")
    return out if any(p["type"] != "text" for p in out) else "".join(p["text"] for p in out)


def _messages(req: ResponsesRequest) -> tuple[list[dict], list[cm.Origin]]:
    """The input as chat messages, and where each came from (so a refusal names input[i])."""
    out: list[dict] = []
    origins: list[tuple[str, list[str], str]] = []  # (where, its calls' wheres, where its call id is)
    if req.instructions:
        out.append({"role": "system", "content": req.instructions})
        origins.append(("instructions", [], ""))
    if isinstance(req.input, str):
        out.append({"role": "user", "content": req.input})
        origins.append(("input", [], ""))
    for i, item in enumerate(req.input if isinstance(req.input, list) else []):
        where = f"input[{i}]"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message":
            out.append({"role": item.get("role"), "content": _parts(item.get("content"), f"{where}.content")})
            origins.append((where, [], ""))
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments") or "{}"}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and not isinstance(last["content"], list):
                last.setdefault("tool_calls", []).append(call)  # the calls of one answer, together
                origins[-1][1].append(where)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
                origins.append((where, [where], ""))
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _parts(output, f"{where}.output")
            if not isinstance(text, str):
                raise ApiError(400, f"{where}.output: pictures in tool output are not supported (text only)",
                               param=f"{where}.output")
            out.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": text})
            origins.append((where, [], f"{where}.call_id"))
        elif kind == "reasoning":
            continue  # earlier thinking is not shown to the model again (Gemma 4's template drops it)
        else:
            raise ApiError(400, f"{where}: items of type {str(kind)[:40]!r} are not supported (message, "
                                "function_call, function_call_output, reasoning)", param=f"{where}.type")
    return out, [cm.Origin(w, tuple(calls), answers) for w, calls, answers in origins]


def _refuse_unkept(req: ResponsesRequest) -> None:
    """What asks for state this server does not keep, or for output it does not give, is refused
    by name; hints that change nothing here (INCLUDE_NO_EFFECT, service_tier, store) pass."""
    if req.previous_response_id:
        raise ApiError(400, "previous_response_id is not supported: this server keeps no responses (store is "
                            "off); send the whole conversation in input", param="previous_response_id")
    if req.conversation is not None:
        raise ApiError(400, "conversation is not supported: this server keeps no conversations; send the whole "
                            "conversation in input", param="conversation")
    if req.prompt is not None:
        raise ApiError(400, "prompt is not supported: this server keeps no stored prompts; send instructions "
                            "and input", param="prompt")
    if req.background:
        raise ApiError(400, "background is not supported: responses are answered while you wait", param="background")
    include = req.include or []
    if not isinstance(include, list) or not all(isinstance(x, str) for x in include):
        raise ApiError(400, "include must be a list of strings", param="include")
    if bad := [x for x in include if x not in INCLUDE_NO_EFFECT]:
        raise ApiError(400, f"include: {bad[0][:60]!r} is not supported (logprobs are on /v1/chat/completions); "
                            f"these are taken and change nothing here: {', '.join(INCLUDE_NO_EFFECT)}",
                       param="include")
    if req.top_logprobs:
        raise ApiError(400, "top_logprobs is not supported on /v1/responses: ask /v1/chat/completions with "
                            "logprobs", param="top_logprobs")
    reasoning = req.reasoning or {}
    if reasoning.get("effort", "medium") not in EFFORTS:
        raise ApiError(400, f"reasoning.effort must be one of {', '.join(EFFORTS)}", param="reasoning.effort")
    if reasoning.get("summary") not in SUMMARIES:
        raise ApiError(400, "reasoning.summary must be 'auto', 'concise' or 'detailed'", param="reasoning.summary")


def _tools(tools: list[dict] | None, left_out: list[str]) -> tuple[list[dict] | None, dict[str, str]]:
    """Function tools as chat's, and the namespace of each function declared inside one (Codex
    groups some: their calls come back with their namespace). Hosted tools are left out, their
    types added to `left_out` (hosted_tools.py)."""
    if tools is None:
        return None, {}
    out, spaces = [], {}
    for i, t in enumerate(tools):
        kind = t.get("type") if isinstance(t, dict) else None
        if kind == "namespace" and isinstance(t.get("tools"), list):
            inner, _ = _tools(t["tools"], left_out)
            out += inner
            spaces.update((f["function"]["name"], str(t.get("name"))) for f in inner)
            continue
        if is_hosted(kind, RESPONSES_HOSTED):
            left_out.append(kind)
            continue
        if kind != "function":
            raise ApiError(400, f"tools[{i}]: tools of type {str(kind)[:40]!r} are not supported (functions, and "
                                "namespaces of them; hosted tools such as web_search are left out)",
                           param=f"tools[{i}].type")
        out.append({"type": "function", "function": {"name": t.get("name"), "description": t.get("description", ""),
                                                     "parameters": t.get("parameters") or {"type": "object"}}})
    return out, spaces


def _tool_choice(choice):
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    if choice in (None, "auto", "none", "required"):
        return choice
    raise ApiError(400, "tool_choice must be 'auto', 'none', 'required' or {'type': 'function', 'name': ...}",
                   param="tool_choice")


def _format(text: dict | None) -> dict | None:
    fmt = (text or {}).get("format")
    if not fmt or fmt.get("type", "text") == "text":
        return None
    if fmt.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name"), "schema": fmt.get("schema"),
                                                       "strict": fmt.get("strict")}}
    return fmt


def thinking_of(req: ResponsesRequest) -> bool:
    return (req.reasoning or {}).get("effort", "medium" if req.reasoning else None) not in NO_THINKING


def _kept_always(item) -> bool:
    return isinstance(item, dict) and item.get("type", "message") == "message" \
        and item.get("role") in ("system", "developer")


def _cuts(items: list) -> list[int]:
    """Where the conversation may start once its oldest items are dropped: at a message or a
    call, never at a call's output or a reasoning item (left without what they follow)."""
    return [i for i, it in enumerate(items)
            if not (isinstance(it, dict) and it.get("type") in ("function_call_output", "reasoning"))]


async def truncated(req: ResponsesRequest, fits) -> ResponsesRequest:
    """With truncation "auto" (OpenAI's meaning): the request with its oldest input items
    dropped, as few as make the prompt fit the context with room for the reply (`fits(req)`,
    async). System and developer messages and the instructions stay; a call stays with its
    output. When even the last turn alone does not fit, the request is left whole (and its
    overflow is the usual 400)."""
    if req.truncation != "auto" or isinstance(req.input, str) or await fits(req):
        return req
    kept = [it for it in req.input if _kept_always(it)]
    rest = [it for it in req.input if not _kept_always(it)]
    cuts = _cuts(rest)[1:]
    lo, hi = 0, len(cuts)  # the first cut that fits is in cuts[lo:hi] (hi: none does)
    while lo < hi:
        mid = (lo + hi) // 2
        if await fits(req.model_copy(update={"input": kept + rest[cuts[mid]:]})):
            hi = mid
        else:
            lo = mid + 1
    return req.model_copy(update={"input": kept + rest[cuts[lo]:]}) if lo < len(cuts) else req


def chat_request(req: ResponsesRequest) -> tuple[ChatRequest, bool, dict[str, str]]:
    """The same request in OpenAI's chat shape (what the chat route takes), thinking, and the
    namespace of each function declared in one."""
    _refuse_unkept(req)
    thinking = thinking_of(req)
    left_out: list[str] = []
    tools, spaces = _tools(req.tools, left_out)
    messages, origins = _messages(req)
    body = {"model": req.model, "messages": messages, "max_tokens": req.max_output_tokens or UNTIL_CONTEXT,
            "tools": tools, "tool_choice": _tool_choice(req.tool_choice),
            "parallel_tool_calls": req.parallel_tool_calls, "response_format": _format(req.text),
            "chat_template_kwargs": {"enable_thinking": thinking}, "tandem": req.tandem,
            "timings_per_token": req.timings_per_token, "temperature": req.temperature, "top_p": req.top_p,
            "stop": req.stop, "verbose": req.verbose, "return_progress": req.return_progress}
    chat = rq.translated(ChatRequest, body)
    chat._hosted_left_out, chat._origins, chat._list_name = left_out, origins, "input"
    return chat, thinking, spaces
