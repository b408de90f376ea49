"""Tool calling in Gemma 4's own format: declarations are rendered by the model's chat template,
and the model writes a call as

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>

(keys bare, strings between `<|"|>` tokens, numbers, true/false/null, {...} and [...] as in
JSON). This module checks OpenAI tool declarations, reads calls out of the model's output as it
streams (`CallParser`), and builds the grammar that forces a call whose arguments follow the
tool's parameter schema (`calls_grammar`), for `tool_choice: "required"` or a named function.

The argument grammar is written here, not by llama.cpp's JSON-schema converter: that converter
writes JSON (quoted keys, JSON strings) and its rule tables are module globals, and llama.cpp's
own Gemma 4 parser has no schema-aware grammar either (it accepts any argument object).
Everything here is bounded: the number and size of tools, schema depth, argument nesting.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from dataclasses import dataclass, field

from .errors import TandemError

CALL_OPEN, CALL_CLOSE, QUOTE = "<|tool_call>", "<tool_call|>", '<|"|>'
CHANNEL_OPEN, CHANNEL_CLOSE = "<|channel>", "<channel|>"
MAX_TOOLS = 128
MAX_TOOLS_BYTES = 256 * 1024
MAX_DEPTH = 24  # schema nesting, and argument nesting in a call
MAX_CALL_CHARS = 256 * 1024  # a call longer than this is not read as one
NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")  # OpenAI's rule for function names
BAD_KEY = re.compile(r"[:{},\[\]<>\"\x00-\x1f]")  # what Gemma's bare keys cannot hold


class ToolError(TandemError, ValueError):
    """Tool declarations or a tool choice that cannot be used: the message names the problem."""


@dataclass
class ToolCall:
    name: str
    arguments: dict
    id: str = field(default_factory=lambda: "call_" + uuid.uuid4().hex[:24])

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)


# ---- declarations ------------------------------------------------------------------------
def check_tools(tools) -> list[dict]:
    """OpenAI `tools` as the template wants them ({"type": "function", "function": {...}}),
    or ToolError naming what is wrong."""
    if not isinstance(tools, list) or not tools:
        raise ToolError("tools must be a non-empty list of {'type': 'function', 'function': {...}}")
    if len(tools) > MAX_TOOLS:
        raise ToolError(f"at most {MAX_TOOLS} tools, got {len(tools)}")
    if len(json.dumps(tools)) > MAX_TOOLS_BYTES:
        raise ToolError(f"the tool declarations are larger than {MAX_TOOLS_BYTES // 1024} KB")
    out, seen = [], set()
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(fn, dict):
            raise ToolError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ...}}}}")
        name = fn.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise ToolError(f"tools[{i}].function.name must be 1-64 letters, digits, '_', '.' or '-', got {name!r}")
        if name in seen:
            raise ToolError(f"two tools are named {name!r}")
        seen.add(name)
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(params, dict) or params.get("type", "object") != "object":
            raise ToolError(f"tools[{i}].function.parameters must be a JSON schema of type 'object'")
        _depth(params, f"tools[{i}].function.parameters")
        try:
            _SchemaGrammar(params).value({**params, "type": "object"})  # a schema no call can be written for
        except ToolError as e:
            raise ToolError(f"tools[{i}] ({name}): {e}") from None
        desc = fn.get("description", "")
        out.append({"type": "function", "function": {"name": name, "description": desc if isinstance(desc, str) else "",
                                                     "parameters": params}})
    return out


def _depth(value, where: str, d: int = 0) -> None:
    if d > MAX_DEPTH:
        raise ToolError(f"{where} nests deeper than {MAX_DEPTH} levels")
    for v in (value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()):
        _depth(v, where, d + 1)


# ---- reading calls -----------------------------------------------------------------------
class _Args:
    """Gemma's argument syntax -> Python values (ValueError on anything else)."""

    NUMBER = re.compile(r"-?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")

    def __init__(self, text: str):
        self.s, self.i = text, 0

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t\r\n":
            self.i += 1

    def value(self, depth: int = 0):
        if depth > MAX_DEPTH:
            raise ValueError("arguments nest too deeply")
        self.ws()
        s, i = self.s, self.i
        if s.startswith(QUOTE, i):
            end = s.find(QUOTE, i + len(QUOTE))
            if end < 0:
                raise ValueError("unterminated string")
            self.i = end + len(QUOTE)
            return s[i + len(QUOTE):end]
        if s.startswith('"', i):  # a JSON string, which models sometimes write instead
            v, self.i = json.JSONDecoder().raw_decode(s, i)
            return v
        if s.startswith("{", i):
            return self.obj(depth)
        if s.startswith("[", i):
            self.i += 1
            out = []
            self.ws()
            if s.startswith("]", self.i):
                self.i += 1
                return out
            while True:
                out.append(self.value(depth + 1))
                self.ws()
                if s.startswith(",", self.i):
                    self.i += 1
                elif s.startswith("]", self.i):
                    self.i += 1
                    return out
                else:
                    raise ValueError(f"expected ',' or ']' at {self.i}")
        for word, v in (("true", True), ("false", False), ("null", None)):
            if s.startswith(word, i):
                self.i += len(word)
                return v
        m = self.NUMBER.match(s, i)
        if m and m.end() > i:
            self.i = m.end()
            if not (m.group(2) or m.group(3)):
                return int(m.group())
            v = float(m.group())
            if math.isinf(v):  # 1e999: no JSON number carries it (json.dumps would write Infinity)
                raise ValueError(f"{m.group()} is beyond what a JSON number can carry")
            return v
        raise ValueError(f"unexpected {s[i:i + 10]!r} at {i}")

    def obj(self, depth: int) -> dict:
        s = self.s
        self.i += 1  # "{"
        out: dict = {}
        self.ws()
        if s.startswith("}", self.i):
            self.i += 1
            return out
        while True:
            self.ws()
            if s.startswith(QUOTE, self.i) or s.startswith('"', self.i):
                key = self.value(depth + 1)
                if not isinstance(key, str):
                    raise ValueError("a key must be text")
                self.ws()
                if not s.startswith(":", self.i):
                    raise ValueError(f"expected ':' at {self.i}")
            else:
                colon = s.find(":", self.i)
                key = s[self.i:colon].strip() if colon >= 0 else ""
                if not key or BAD_KEY.search(key):
                    raise ValueError(f"expected a key at {self.i}")
                self.i = colon
            self.i += 1  # ":"
            out[key] = self.value(depth + 1)
            self.ws()
            if s.startswith(",", self.i):
                self.i += 1
            elif s.startswith("}", self.i):
                self.i += 1
                return out
            else:
                raise ValueError(f"expected ',' or '}}' at {self.i}")


def parse_call(text: str) -> ToolCall:
    """`call:NAME{...}` (what stands between the call markers) -> ToolCall, or ValueError."""
    text = text.strip()
    if not text.startswith("call:") or "{" not in text:
        raise ValueError("not a call")
    name = text[5:text.index("{")].strip()
    if not NAME.match(name):
        raise ValueError(f"bad function name {name!r}")
    reader = _Args(text[text.index("{"):])
    args = reader.obj(0)
    if text[text.index("{") + reader.i:].strip():
        raise ValueError("text after the arguments")
    return ToolCall(name, args)


class CallParser:
    """The model's answer, token by token, split into text and tool calls. Feed each answer
    token's text, or a control token's marker; `feed` and `finish` return ("text", str) and
    ("call", ToolCall) items in order. A call to a tool not declared, or whose arguments do
    not parse, comes back as its text, as the model wrote it."""

    def __init__(self, names):
        self.names = set(names)
        self.buf: list[str] | None = None  # inside a call: its text so far
        self.size = 0

    def feed(self, text: str = "", marker: str = "") -> list[tuple[str, object]]:
        if self.buf is None:
            if marker == CALL_OPEN:
                self.buf, self.size = [], 0
                return []
            return [("text", text)] if text else []  # other markers stay hidden, as in any answer
        if marker == CALL_CLOSE:
            return [self._close()]
        piece = text or marker
        self.buf.append(piece)
        self.size += len(piece)
        if self.size > MAX_CALL_CHARS:  # no call is this long: give it back as text
            return [("text", self._raw(closed=False))]
        return []

    def _raw(self, closed: bool) -> str:
        raw = CALL_OPEN + "".join(self.buf or []) + (CALL_CLOSE if closed else "")
        self.buf = None
        return raw

    def _close(self) -> tuple[str, object]:
        body = "".join(self.buf)
        try:
            call = parse_call(body)
            if call.name in self.names:
                self.buf = None
                return ("call", call)
        except (ValueError, RecursionError):
            pass
        return ("text", self._raw(closed=True))

    def finish(self) -> list[tuple[str, object]]:
        """At the end of the answer: a call left open (the token budget ran out) is text."""
        return [("text", self._raw(closed=False))] if self.buf is not None else []


# ---- forcing a call ----------------------------------------------------------------------
def _lit(s: str) -> str:
    """A GBNF string literal."""
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


# In GBNF, <...> outside quotes is one token named by its text, and !<...> any token but it:
# the markers and Gemma's string delimiter are single tokens, never spelled out in characters.
QUOTE_TOKEN = QUOTE
GENERIC = {
    "g-value": 'g-string | g-object | g-array | g-number | "true" | "false" | "null"',
    "g-string": f"{QUOTE_TOKEN} (!{QUOTE_TOKEN})* {QUOTE_TOKEN}",
    "g-object": '"{" ( g-key ":" g-value ( "," g-key ":" g-value )* )? "}"',
    "g-key": r'[^:{}\[\],<>"\x00-\x1F]+',
    "g-array": '"[" ( g-value ( "," g-value )* )? "]"',
    "g-number": '"-"? ( [0-9] | [1-9] [0-9]{1,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,4} )?',
    "g-integer": '"-"? ( [0-9] | [1-9] [0-9]{1,15} )',
}


class _SchemaGrammar:
    """GBNF rules for values in Gemma's argument syntax that match a JSON schema: types,
    properties (required ones always, in order), enum, const, anyOf/oneOf, items (up to 64 of
    minItems/maxItems) and local $refs (recursive ones too). Keywords it cannot express (patterns, lengths, bounds) are
    left to the tool to check, as a tool must check its arguments anyway."""

    def __init__(self, root: dict, prefix: str = ""):
        self.root, self.rules, self.n, self.prefix = root, dict(GENERIC), 0, prefix  # prefix: one tool's $refs

    def add(self, body: str, name: str = "") -> str:
        name = name or f"r{self.n}"
        self.n += 1
        self.rules[name] = body
        return name

    def literal(self, v) -> str:
        if isinstance(v, str):
            return f"{QUOTE_TOKEN} {_lit(v)} {QUOTE_TOKEN}" if v else f"{QUOTE_TOKEN} {QUOTE_TOKEN}"
        if isinstance(v, (bool, int, float)) or v is None:
            return _lit(json.dumps(v))
        return "g-value"

    def ref(self, ref: str, depth: int) -> str:
        m = re.match(r"^#/(\$defs|definitions)/([A-Za-z0-9_.\-]{1,64})$", ref)
        if not m:
            raise ToolError(f"the parameter schema refers to {ref[:80]!r}: only local references "
                            "(#/$defs/NAME) are used")
        target = (self.root.get(m.group(1)) or {}).get(m.group(2))
        if not isinstance(target, dict):
            raise ToolError(f"the parameter schema refers to {ref[:80]!r}, which it does not define")
        name = f"ref-{self.prefix}" + re.sub(r"[^A-Za-z0-9]", "-", m.group(2))
        if name not in self.rules:
            self.rules[name] = "g-value"  # placeholder: a recursive reference finds the rule
            self.rules[name] = self.value(target, depth + 1)
        return name

    def value(self, s, depth: int = 0) -> str:
        if depth > MAX_DEPTH:
            raise ToolError(f"the parameter schema nests deeper than {MAX_DEPTH} levels")
        if not isinstance(s, dict):
            return "g-value"
        if isinstance(s.get("$ref"), str):
            return self.ref(s["$ref"], depth)
        for key in ("anyOf", "oneOf"):
            if isinstance(s.get(key), list) and s[key]:
                return "( " + " | ".join(self.value(x, depth + 1) for x in s[key]) + " )"
        if "const" in s:
            return self.literal(s["const"])
        if isinstance(s.get("enum"), list) and s["enum"]:
            return "( " + " | ".join(self.literal(v) for v in s["enum"]) + " )"
        t = s.get("type")
        if isinstance(t, list) and t:
            return "( " + " | ".join(self.value({**s, "type": x}, depth + 1) for x in t) + " )"
        if t == "object" or (t is None and isinstance(s.get("properties"), dict)):
            return self.obj(s, depth)
        if t is not None and t not in ("array", "string", "number", "integer", "boolean", "null"):
            raise ToolError(f"the parameter schema has type {str(t)[:40]!r}, which JSON schema does not know")
        if t == "array":
            item = self.value(s.get("items"), depth + 1) if isinstance(s.get("items"), dict) else "g-value"
            lo, hi = s.get("minItems", 0), s.get("maxItems")
            lo = lo if isinstance(lo, int) and 0 <= lo <= 64 else 0
            hi = hi if isinstance(hi, int) and lo <= hi <= 64 and hi >= 1 else None
            more = "*" if hi is None else f"{{{max(lo - 1, 0)},{hi - 1}}}"
            body = f'{item} ( "," {item} ){more}'
            return self.add(f'"[" {body} "]"' if lo >= 1 else f'"[" ( {body} )? "]"')
        return {"string": "g-string", "number": "g-number", "integer": "g-integer",
                "boolean": '( "true" | "false" )', "null": '"null"'}.get(t, "g-value")

    def obj(self, s: dict, depth: int) -> str:
        props = s.get("properties")
        if not isinstance(props, dict) or not props:
            # no properties declared: a function without arguments is called with {} (any
            # object only when the schema asks for additional properties explicitly)
            extra = s.get("additionalProperties")
            return "g-object" if extra is True or isinstance(extra, dict) else self.add('"{" "}"')
        required = [k for k in props if k in (s.get("required") or [])]
        optional = [k for k in props if k not in required]
        kv = {}
        for k in props:
            if not isinstance(k, str) or not k or BAD_KEY.search(k):
                raise ToolError(f"the parameter name {k!r} cannot be written in Gemma's call syntax")
            kv[k] = self.add(f"{_lit(k + ':')} {self.value(props[k], depth + 1)}")
        if required:
            body = ' "," '.join(kv[k] for k in required) + "".join(f' ( "," {kv[k]} )?' for k in optional)
        else:  # any subset of the optional ones, in order: the first one written has no comma
            alts = [kv[k] + "".join(f' ( "," {kv[o]} )?' for o in optional[i + 1:]) for i, k in enumerate(optional)]
            body = "( " + " | ".join(alts) + " )?"
        return self.add(f'"{{" {body} "}}"')


def calls_grammar(tools: list[dict], name: str | None = None, parallel: bool = True,
                  thinking: bool = False) -> str:
    """GBNF for an answer that is one tool call (several with `parallel`), of the named tool or
    any declared one, whose arguments match the tool's parameter schema. With thinking on, a
    thought may come first."""
    fns = [t["function"] for t in tools if name is None or t["function"]["name"] == name]
    if not fns:
        raise ToolError(f"tool_choice names {name!r}, which is not among the tools")
    g = _SchemaGrammar({})
    alts = []
    for i, fn in enumerate(fns):
        g.root, g.prefix = fn.get("parameters") or {}, f"t{i}-"
        args = g.value({**g.root, "type": "object"})
        alts.append(g.add(f'{_lit(fn["name"])} {args}'))
    g.rules["call"] = f'{CALL_OPEN} "call:" ( {" | ".join(alts)} ) {CALL_CLOSE}'
    g.rules["thought"] = f"{CHANNEL_OPEN} (!{CHANNEL_CLOSE})* {CHANNEL_CLOSE}"
    g.rules["root"] = ("thought? " if thinking else "") + ("call+" if parallel else "call")
    return "\n".join(f"{k} ::= {v}" for k, v in g.rules.items())
