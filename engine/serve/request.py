"""What an OpenAI-style request asks of `tandem serve`: its shapes (pydantic) and their checks,
made into the engine's GenerationConfig, messages and tools. Every field that changes the
answer is either honoured or refused with a 400 that names it; none is silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from ..generation import MAX_LOGPROBS, GenerationConfig, check_draft_length, choose_spec
from ..sampling import SamplingParams
from ..gemma4.call_grammar import calls_grammar, check_tools
from ..gemma4.calls import ToolError
from .errors import ApiError, unsupported
from .chat_messages import Origin
from .pictures import picture_parts  # noqa: F401 (for the routes)

MAX_CHOICES = 16  # n: choices of one request, decoded together (one sequence each)
# Stop strings are checked against the text at every token: a few short ones (OpenAI allows 4;
# editors send up to about 10), not a list that would hold up the server at each token
MAX_STOPS, MAX_STOP_CHARS = 16, 256


# ---- request shapes (unknown fields are accepted and ignored, as OpenAI clients send many) ----
# strict: a value of the wrong JSON type is a 400 naming the field, not coerced (`max_tokens: true`
# was taken as 1, `stream: "yes"` as true); an integer is still taken where a number is asked
class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _valid_text(cls, data):
        if (at := lone_surrogate(data)) is not None:
            raise ApiError(400, f"{at or 'the body'}: the text holds a lone UTF-16 surrogate (an escape such as "
                                "\\ud800 without its pair), which is no character; send valid Unicode", param=at or None)
        return data


def lone_surrogate(value, at: str = "") -> str | None:
    """Where in a JSON value a string (or key) holds a lone surrogate, which JSON's escapes allow
    and UTF-8 cannot encode (the tokenizer failed on it with Python's own words), or None."""
    todo = [(at, value)]
    while todo:
        at, v = todo.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return at
        elif isinstance(v, dict):
            todo += [(f"{at}.{k}" if at else str(k), x) for k, x in v.items()]
            todo += [(at, k) for k in v if isinstance(k, str)]
        elif isinstance(v, list):
            todo += [(f"{at}[{i}]", x) for i, x in enumerate(v)]
    return None


class TandemOptions(BaseModel):
    # Tandem's own few options: a misspelt one is a 400, not ignored
    model_config = ConfigDict(extra="forbid", strict=True)

    mtp: bool | None = None
    draft_max: int | str | None = None
    spec: str | None = None  # draft sources: auto, mtp, lookup, none


class ChatMessage(_Loose):
    role: str
    content: str | list[dict] | None = ""
    tool_calls: list[dict] | None = None  # an assistant's calls
    tool_call_id: str | None = None  # a tool's answer to one of them
    name: str | None = None
    # an assistant's earlier thinking (llama-server's field; `reasoning` is vLLM's and OpenRouter's):
    # given to the template, which decides what it shows
    reasoning_content: str | None = None
    reasoning: str | None = None


class StreamOptions(_Loose):
    include_usage: bool = False


class Sampling(_Loose):
    # (schema, what its grammar left unenforced) when config() took it leniently: the reply is
    # checked against it (engine/local/unenforced.py); private: not a field a client can send
    _schema_check: tuple | None = PrivateAttr(default=None)
    # Sampling defaults here are the APIs' own (OpenAI's top_p 1; top_k and min_p off), not
    # SamplingParams' (the CLI's and the app's): a request that names nothing is not truncated
    # by settings its client never heard of. Temperature 0: greedy unless a request asks.
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=100.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    repeat_penalty: float = Field(default=1.0, gt=0.0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None  # token id (as text) -> -100..100
    seed: int | None = Field(default=None, ge=-1, lt=2**64)  # -1: a random one, as llama-server takes it
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=MAX_CHOICES)  # choices, decoded together
    logprobs: bool | int | None = None  # chat: true/false; completions: how many alternatives
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    stream: bool = False
    stream_options: StreamOptions | None = None
    timings_per_token: bool = False
    tandem: TandemOptions | None = None
    response_format: dict | None = None  # {"type": "text" | "json_object" | "json_schema", "json_schema": {...}}
    # llama-server's extensions: the reply follows a GBNF grammar, or matches a JSON schema
    grammar: str | None = None
    json_schema: dict | bool | None = None
    # refused by name: they would change the answer and are not implemented
    best_of: int | None = None
    suffix: str | None = None
    functions: list | None = None
    function_call: Any = None
    # llama-server's: a dump of the request's internals (__verbose) and prompt-progress events
    verbose: bool = False
    return_progress: bool = False


class ChatRequest(Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    # the hosted tools the Messages or Responses request named, left out (hosted_tools.py), and
    # where each message came from (Origin; none: this is the client's own chat request);
    # private: not fields a client can send
    _hosted_left_out: list[str] = PrivateAttr(default_factory=list)
    _origins: list[Origin] = PrivateAttr(default_factory=list)
    _list_name: str = PrivateAttr(default="messages")  # the messages' field in the client's API
    chat_template_kwargs: dict[str, Any] | None = None
    # llama-server's (and vLLM's) ways to continue the last assistant message: refused by name
    continue_final_message: bool = False
    add_generation_prompt: bool = True
    tools: list | None = None
    tool_choice: Any = None  # "none", "auto", "required" or {"type": "function", "function": {"name": ...}}
    parallel_tool_calls: bool = True

    def origin(self, i: int) -> Origin:
        return self._origins[i] if i < len(self._origins) else Origin(f"messages[{i}]")


class CompletionRequest(Sampling):
    prompt: str
    echo: bool = False


def translated(model: type[BaseModel], body: dict) -> BaseModel:
    """Another API's request, translated into `model` (None fields left out): a field it gets
    wrong is a 400 naming it, as FastAPI's own check of the body would say."""
    try:
        return model.model_validate({k: v for k, v in body.items() if v is not None})
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", []))
        raise ApiError(400, f"Invalid request: {where}: {first.get('msg')}", param=where) from None


# ---- checks --------------------------------------------------------------------------------
def top_logprobs(req: Sampling, kind: str) -> int | None:
    """How many alternatives per token the reply lists (0: only the chosen token), or None."""
    if kind == "chat":
        if req.logprobs not in (None, False, True):
            raise ApiError(400, "logprobs must be true or false (top_logprobs says how many alternatives)",
                           param="logprobs")
        if req.top_logprobs is not None and not req.logprobs:
            raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
        return (req.top_logprobs or 0) if req.logprobs else None
    if req.logprobs is None or req.logprobs is False:
        return None
    if req.logprobs is True or not 0 <= req.logprobs <= MAX_LOGPROBS:
        raise ApiError(400, f"logprobs must be a number of alternatives, 0 to {MAX_LOGPROBS}", param="logprobs")
    return req.logprobs


def stop_strings(req: Sampling) -> list[str]:
    """`stop` as a list (OpenAI takes one string or several)."""
    return [req.stop] if isinstance(req.stop, str) else list(req.stop or [])


def config(engine, req: Sampling, kind: str, default_k="auto", grammar: str | None = None,
           reports_schema: bool = False) -> GenerationConfig:
    """The engine's settings for one request; a 400 naming the field for anything wrong. A route
    that `reports_schema` (says what a schema's grammar left unenforced and whether the reply met
    it: openai_api) takes a schema without strict: true leniently, and finds in
    `req._schema_check` what to report."""
    refuse_unsupported(req)
    # max_tokens is a bound, as llama-server takes it: agents ask for 32000 whatever the context,
    # and the reply ends ("length") where the context does
    n = min(req.max_completion_tokens or req.max_tokens or min(2048, engine.n_ctx // 2), engine.n_ctx - 1)
    sp = sampling_params(engine, req)
    top = top_logprobs(req, kind)
    if kind == "text" and req.echo and top is not None:
        raise unsupported("echo", "the log-probabilities of the prompt are not computed; echo without logprobs works")
    fmt = output_format(req, reports_schema)
    req._schema_check = fmt.pop("check", None)
    if fmt and grammar:
        raise ApiError(400, f"{fmt['param']} cannot be combined with a forced tool call (tool_choice)",
                       param=fmt["param"])
    fmt.pop("param", None)
    stops = stop_strings(req)
    if len(stops) > MAX_STOPS or any(len(x) > MAX_STOP_CHARS for x in stops):
        raise ApiError(400, f"stop: at most {MAX_STOPS} stop strings of at most {MAX_STOP_CHARS} characters each",
                       param="stop")
    spec, k = draft_choice(engine, req.tandem or TandemOptions(), default_k)
    seed = None if req.seed == -1 else req.seed
    cfg = GenerationConfig(max_tokens=n, spec=spec, draft_max=k, sampling=sp, seed=seed, logprobs=top, **fmt)
    return replace(cfg, grammar=grammar) if grammar else cfg


def refuse_unsupported(req: Sampling) -> None:
    """A 400 for the fields that would change the answer and are not implemented."""
    if req.best_of not in (None, 1, req.n):
        raise unsupported("best_of", "use n for several choices")
    if req.suffix:
        raise unsupported("suffix")
    if req.verbose:
        raise unsupported("verbose", "it writes no __verbose dump of the request's internals")
    if req.return_progress:
        raise unsupported("return_progress", "it sends no prompt progress")
    if req.functions or req.function_call not in (None, "none", "auto"):
        raise unsupported("functions" if req.functions else "function_call", "use tools and tool_choice")


def sampling_params(engine, req: Sampling) -> SamplingParams:
    """The request's sampling, checked (logit_bias: token ids of this vocabulary, -100..100)."""
    bias = []
    for key, value in (req.logit_bias or {}).items():
        if not key.isdigit():
            raise ApiError(400, f"logit_bias keys are token ids, got {key[:40]!r}", param="logit_bias")
        if int(key) >= getattr(engine, "n_vocab", 1 << 31):
            raise ApiError(400, f"logit_bias names token {key}, outside the vocabulary (0..{engine.n_vocab - 1})",
                           param="logit_bias")
        if not -100 <= value <= 100:
            raise ApiError(400, "logit_bias values are between -100 and 100", param="logit_bias")
        bias.append((int(key), float(value)))
    sp = SamplingParams(temperature=req.temperature, top_k=req.top_k, top_p=req.top_p, min_p=req.min_p,
                        repeat_penalty=req.repeat_penalty, presence_penalty=req.presence_penalty,
                        frequency_penalty=req.frequency_penalty, logit_bias=tuple(bias))
    try:
        sp.validate()
    except ValueError as e:
        raise ApiError(400, str(e)) from None
    return sp


def draft_choice(engine, t: TandemOptions, default_k) -> tuple[str, int | str]:
    """Tandem's own options as (spec, draft_max), each error a 400 naming its field."""
    try:
        k = check_draft_length(t.draft_max if t.draft_max is not None else default_k)
    except ValueError as e:
        raise ApiError(400, f"tandem.draft_max: {e}", param="tandem.draft_max") from None
    try:
        spec = choose_spec(t.spec, drafting=t.mtp is not False)
    except ValueError as e:
        raise ApiError(400, f"tandem.spec: {e}", param="tandem.spec") from None
    if spec == "mtp" and not engine.has_mtp:  # the engine would refuse too: here the 400 names the field
        raise ApiError(400, "tandem.spec: 'mtp' needs a drafter (the model's gemma-4 assistant) and this server "
                       "has none; use 'lookup' or 'auto' (lookup drafting works for every model)", param="tandem.spec")
    return spec, k


def output_format(req: Sampling, lenient: bool = False) -> dict:
    """What the reply must follow, as GenerationConfig fields (and the field that asked, as
    `param`): OpenAI's response_format, or llama-server's `grammar` / `json_schema`; one of them."""
    asked = [(name, value) for name, value in (("response_format", req.response_format), ("grammar", req.grammar),
                                               ("json_schema", req.json_schema))
             if value is not None and not (name == "response_format" and value.get("type", "text") == "text")]
    if len(asked) > 1:
        raise ApiError(400, f"{asked[0][0]} and {asked[1][0]} both say what the reply must follow; give one",
                       param=asked[1][0])
    if not asked:
        return {}
    name, value = asked[0]
    if name == "grammar":
        return {"grammar": checked_grammar(value), "param": name}
    fmt = value if name == "response_format" else {"type": "json_schema", "json_schema": {"schema": value}}
    return {**response_format(fmt, name, lenient), "param": name}


def checked_grammar(gbnf: str) -> str:
    """llama.cpp's `grammar` (GBNF) as the grammar engine's own, checked now: one that cannot be
    used is a 400 saying why, before anything is decoded."""
    from ..local.grammar import GrammarError, from_gbnf

    if not gbnf.strip():
        raise ApiError(400, "grammar is empty", param="grammar")
    try:
        return from_gbnf(gbnf)
    except GrammarError as e:
        raise ApiError(400, f"grammar: {e}", param="grammar") from None


def response_format(fmt: dict | None, param: str = "response_format", lenient: bool = False) -> dict:
    """response_format as GenerationConfig fields: a grammar for json_object (or, as llama-server
    takes it, json_object with a "schema"), a JSON schema for json_schema (checked now: a bad or
    hostile schema is a 400 naming the problem). `lenient`, and the schema is not `strict: true`:
    what cannot be enforced is left out of the grammar, and "check" holds (schema, what was left
    out) for the reply's check (engine/local/unenforced.py); strict, it is a 400 naming it."""
    from ..local.grammar import GrammarError, from_json_schema, json_object
    from ..local.unenforced import lenient_grammar

    kind = (fmt or {}).get("type", "text")
    if kind == "text":
        return {}
    if kind == "json_object" and fmt.get("schema") is None:
        return {"grammar": json_object()}
    if kind not in ("json_schema", "json_object"):
        raise ApiError(400, f"{param}.type must be 'text', 'json_object' or 'json_schema', got {kind!r}",
                       param=param)
    spec = fmt.get("json_schema")
    schema = fmt.get("schema") if kind == "json_object" else spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, (dict, bool)):
        raise ApiError(400, f"{param}: the JSON schema must be an object", param=param)
    try:
        if lenient and not (isinstance(spec, dict) and spec.get("strict") is True):
            grammar, left_out = lenient_grammar(schema)
            return {"grammar": grammar, **({"check": (schema, left_out)} if left_out else {})}
        return {"grammar": from_json_schema(schema)}
    except GrammarError as e:
        raise ApiError(400, f"{param}: {e}", param=param) from None


# ---- tools (the messages: chat_messages.py) -------------------------------------------------
def thinking(req: ChatRequest) -> bool:
    """Gemma 4's thinking mode, as llama-server takes it (chat_template_kwargs.enable_thinking)."""
    return bool((req.chat_template_kwargs or {}).get("enable_thinking", False))


@dataclass
class ToolUse:
    """What a request's tools mean for its generation."""

    tools: list[dict] | None = None  # declarations the template renders (none: no tools, or tool_choice none)
    names: set[str] | None = None  # calls to these are read out of the answer (None: no calls read)
    grammar: str | None = None  # a call is forced (tool_choice required or a named function)
    parallel: bool = True  # several calls in one answer; if not, the first one counts


def tool_use(req: ChatRequest, engine, thinking: bool) -> ToolUse:
    choice = req.tool_choice if req.tool_choice is not None else "auto"
    if not req.tools:
        if choice not in ("none", "auto"):
            raise ApiError(400, "tool_choice asks for a call, but the request declares no tools", param="tool_choice")
        return ToolUse()
    try:
        tools = check_tools(req.tools)
    except ToolError as e:
        raise ApiError(400, f"tools: {e}", param="tools") from None
    if choice == "none":  # the tools are not shown to the model: any model will do
        return ToolUse()
    template = getattr(engine, "template", None)
    if template is None or not template.supports_tools:
        raise ApiError(400, "this model's chat template has no tool calling (Gemma 4's has); leave tools out",
                       code="unsupported_parameter", param="tools")
    names = {t["function"]["name"] for t in tools}
    if choice == "auto":
        return ToolUse(tools, names, None, req.parallel_tool_calls)
    if choice == "required":
        name = None
    elif isinstance(choice, dict) and choice.get("type") == "function" \
            and isinstance((choice.get("function") or {}).get("name"), str):
        name = choice["function"]["name"]
    else:
        raise ApiError(400, "tool_choice must be 'none', 'auto', 'required' or "
                            "{'type': 'function', 'function': {'name': ...}}", param="tool_choice")
    try:
        grammar = calls_grammar(tools, name, req.parallel_tool_calls, thinking, marker=engine.grammar_marker)
    except ToolError as e:
        raise ApiError(400, f"tool_choice: {e}", param="tool_choice") from None
    return ToolUse(tools, names if name is None else {name}, grammar, req.parallel_tool_calls)
