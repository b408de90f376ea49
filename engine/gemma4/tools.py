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

from ..errors import TandemError

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
            _SchemaGrammar(params, lenient=True).value({**params, "type": "object"})  # no call can be written for it
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
        self.held = ""  # text that may be the start of a call marker written as text

    def feed(self, text: str = "", marker: str = "") -> list[tuple[str, object]]:
        if marker or not (self.held or "<" in text):
            return self._feed(text, marker)
        # a vocabulary without Gemma's markers as tokens writes them as text: read them there too
        text, self.held, out = self.held + text, "", []
        while text:
            want = CALL_CLOSE if self.buf is not None else CALL_OPEN
            i = text.find(want)
            if i < 0:
                keep = next((n for n in range(min(len(want) - 1, len(text)), 0, -1) if want.startswith(text[-n:])), 0)
                out += self._feed(text[:len(text) - keep]) if len(text) > keep else []
                self.held = text[len(text) - keep:]
                break
            out += self._feed(text[:i]) if i else []
            out += self._feed(marker=want)
            text = text[i + len(want):]
        return out

    def _feed(self, text: str = "", marker: str = "") -> list[tuple[str, object]]:
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
        held, self.held = self.held, ""
        out = self._feed(held) if held else []
        return out + ([("text", self._raw(closed=False))] if self.buf is not None else [])


# ---- forcing a call ----------------------------------------------------------------------
# The grammar is llguidance's Lark (engine/grammar.py). Gemma's markers are single tokens in
# its vocabulary, written <[id]>; a GGUF without them as tokens (a converted fine-tune, a test
# model) gets them as text, as llama.cpp's own Gemma 4 grammar matches them: `marker(text)`
# says which (the engine's `grammar_marker`).
def _lit(s: str) -> str:
    """A Lark string literal."""
    return json.dumps(s)


def text_marker(text: str) -> str:
    """A marker matched as its text (a vocabulary without it as one token)."""
    return _lit(text)


def _regex(body: str) -> str:
    return "/" + body.replace("/", "\\/") + "/"


# Formats a string parameter may name, as the regexes that enforce them (others are refused
# by name in a forced call: a tool checks its arguments anyway, but a grammar must not lie)
FORMATS = {
    "date": r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
    "time": r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?",
    "date-time": r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
                 r"(\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])",
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "email": r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}",
    "ipv4": r"((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])",
    "uri": r"[A-Za-z][A-Za-z0-9+.\-]*:[^ \t\n\r]+",
}
# Validation keywords a forced call cannot enforce: refused by name, with where the schema uses them
UNENFORCED = ("uniqueItems", "not", "if", "then", "else", "contains", "minContains", "maxContains", "minProperties",
              "maxProperties", "patternProperties", "dependentRequired", "dependentSchemas", "propertyNames",
              "unevaluatedProperties", "unevaluatedItems", "dependencies")
NUMBER_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


class _SchemaGrammar:
    """Lark rules for values in Gemma's argument syntax that match a JSON schema: types,
    properties (required ones always, in order; only declared ones), enum, const, anyOf/oneOf,
    a one-schema allOf, items and prefixItems (within minItems/maxItems, up to 64), local $refs
    (recursive ones too), number bounds and multipleOf (llguidance's own JSON numbers), string
    lengths, patterns and common formats. Any other validation keyword is refused by name."""

    def __init__(self, root: dict, marker=text_marker, prefix: str = "", lenient: bool = False):
        self.root, self.rules, self.n, self.prefix = root, {}, 0, prefix  # prefix: one tool's $refs
        # lenient: what a forced call could not enforce is let through (declaring a tool forces
        # nothing: the tool checks its arguments); only schemas no call could be written for fail
        self.lenient = lenient
        self.quote = marker(QUOTE)
        self.quote_token = self.quote.startswith("<[")
        self.path = ""
        self.terminals = {
            "G_KEY": _regex(r'[^:{}\[\],<>"\x00-\x1F]+'),
            "G_NUMBER": _regex(r"-?(0|[1-9][0-9]{0,15})(\.[0-9]{1,16})?([eE][-+]?[0-9]{1,4})?"),
            "G_INTEGER": _regex(r"-?(0|[1-9][0-9]{0,15})"),
        }
        # any value: what a parameter without a schema takes
        self.rules.update({
            "g-value": "g-string | g-object | g-array | G_NUMBER | \"true\" | \"false\" | \"null\"",
            "g-string": self.quoted(),
            "g-object": '"{" ( G_KEY ":" g-value ( "," G_KEY ":" g-value )* )? "}"',
            "g-array": '"[" ( g-value ( "," g-value )* )? "]"',
        })

    def quoted(self, parts: list[str] | None = None) -> str:
        """A whole string between Gemma's quotes whose text matches every regex of `parts`
        (llguidance intersects terminals with `&`), or any text; never the closing quote."""
        q = self.quote
        regexes = [_regex(p) for p in (parts or [])]
        if self.quote_token:  # text cannot hold the quote token: any text up to it
            if not regexes:
                return f"{q} <[^{q[2:-2]}]>* {q}"
            name = self.terminal(" & ".join(regexes))
            return f"{q} {name} {q}"
        # the quote is text: the string's text must not hold it, and the string is one lexeme
        # with its quotes (a lexeme followed by a literal could swallow the closing quote's "<")
        body = self.terminal(" & ".join(regexes + ["~" + _regex(r"(?s:.*)" + re.escape(QUOTE) + r"(?s:.*)")]))
        quote = _regex(re.escape(QUOTE))
        return self.terminal(f"{quote} {body} {quote}")

    def terminal(self, body: str) -> str:
        name = f"T{self.n}"
        self.n += 1
        self.terminals[name] = body
        return name

    def add(self, body: str) -> str:
        name = f"r{self.n}"
        self.n += 1
        self.rules[name] = body
        return name

    def refuse(self, key: str) -> None:
        if self.lenient:
            return
        raise ToolError(f"the parameter schema uses {key!r} (at {self.path or '/'}), which a forced call "
                        "cannot enforce; leave it out, or let the model call the tool without forcing it")

    def literal(self, v) -> str:
        if isinstance(v, str):
            return f"{self.quote} {_lit(v)} {self.quote}" if v else f"{self.quote} {self.quote}"
        if isinstance(v, (bool, int, float)) or v is None:
            return _lit(json.dumps(v))
        return "g-value"

    def ref(self, ref: str, depth: int) -> str:
        m = re.match(r"^#/(\$defs|definitions)/([A-Za-z0-9_.\-]{1,64})$", ref)
        if not m:
            raise ToolError(f"the parameter schema refers to {ref[:80]!r}: only local references "
                            "(#/$defs/NAME) are used")
        target = (self.root.get(m.group(1)) or {}).get(m.group(2))
        if not isinstance(target, (dict, bool)):
            raise ToolError(f"the parameter schema refers to {ref[:80]!r}, which it does not define")
        name = f"ref-{self.prefix}" + re.sub(r"[^A-Za-z0-9]", "-", m.group(2)).lower()
        if name not in self.rules:
            self.rules[name] = "g-value"  # placeholder: a recursive reference finds the rule
            self.rules[name] = self.value(target, depth + 1, f"/{m.group(1)}/{m.group(2)}")
        return name

    def value(self, s, depth: int = 0, path: str | None = None) -> str:
        if path is not None:
            self.path = path
        if depth > MAX_DEPTH:
            raise ToolError(f"the parameter schema nests deeper than {MAX_DEPTH} levels")
        if s is True or s == {}:
            return "g-value"
        if s is False:
            raise ToolError(f"the parameter schema allows no value at {self.path or '/'} (false)")
        if not isinstance(s, dict):
            return "g-value"
        here = self.path
        for key in UNENFORCED:
            if key in s:
                self.refuse(key)
        if isinstance(s.get("$ref"), str):
            return self.ref(s["$ref"], depth)
        if "allOf" in s:
            rest = {k: v for k, v in s.items() if k != "allOf"}
            if not (isinstance(s["allOf"], list) and len(s["allOf"]) == 1) \
                    or any(k in rest for k in ("type", "properties", "items", "enum", "const", "anyOf", "oneOf")):
                self.refuse("allOf")
                return "g-value"
            return self.value(s["allOf"][0], depth + 1, here + "/allOf/0")
        for key in ("anyOf", "oneOf"):
            if isinstance(s.get(key), list) and s[key]:
                return "( " + " | ".join(self.value(x, depth + 1, f"{here}/{key}/{i}")
                                         for i, x in enumerate(s[key])) + " )"
        if "const" in s:
            return self.literal(s["const"])
        if isinstance(s.get("enum"), list) and s["enum"]:
            return "( " + " | ".join(self.literal(v) for v in s["enum"]) + " )"
        t = s.get("type")
        if isinstance(t, list) and t:
            return "( " + " | ".join(self.value({**s, "type": x}, depth + 1, here) for x in t) + " )"
        if t == "object" or (t is None and isinstance(s.get("properties"), dict)):
            return self.obj(s, depth)
        if t is not None and t not in ("array", "string", "number", "integer", "boolean", "null"):
            raise ToolError(f"the parameter schema has type {str(t)[:40]!r} (at {here or '/'}), "
                            "which JSON schema does not know")
        if t == "array":
            return self.array(s, depth)
        if t in ("number", "integer"):
            bounds = {k: s[k] for k in NUMBER_KEYS if k in s}
            if not bounds:
                return "G_INTEGER" if t == "integer" else "G_NUMBER"
            for k, v in bounds.items():
                if (isinstance(v, bool) or not isinstance(v, (int, float))) and not self.lenient:
                    raise ToolError(f"the parameter schema's {k!r} (at {here or '/'}) is not a number")
            # a number is written as in JSON: llguidance's JSON numbers enforce the bounds
            return "%json " + json.dumps({"type": t, **bounds})
        if t == "string":
            return self.string(s)
        return {"boolean": '( "true" | "false" )', "null": '"null"'}.get(t, "g-value")

    def string(self, s: dict) -> str:
        parts = []
        if "format" in s:
            if s["format"] in FORMATS:
                parts.append(FORMATS[s["format"]])
            else:
                self.refuse("format")
        pattern = s.get("pattern")
        if "pattern" in s and (not isinstance(pattern, str) or len(pattern) > 1000):
            self.refuse("pattern")
        elif "pattern" in s:
            # JSON schema's patterns match anywhere unless anchored
            body = pattern[1:] if pattern.startswith("^") else "(?s:.*)" + pattern
            body = body[:-1] if body.endswith("$") and not body.endswith("\\$") else body + "(?s:.*)"
            parts.append(body)
        lo, hi = s.get("minLength", 0), s.get("maxLength")
        if not isinstance(lo, int) or lo < 0 or (hi is not None and (not isinstance(hi, int) or hi < lo)):
            self.refuse("minLength" if "minLength" in s else "maxLength")
        elif lo or hi is not None:
            parts.append(f"(?s:.){{{lo},{'' if hi is None else hi}}}")
        return self.quoted(parts) if parts else "g-string"

    def array(self, s: dict, depth: int) -> str:
        """The elements in order: prefixItems' schemas, then `items`' (none when it is false),
        at least minItems, at most maxItems (up to 64)."""
        here = self.path
        prefix = s.get("prefixItems") if isinstance(s.get("prefixItems"), list) else []
        items = s.get("items")
        item = None if items is False else (self.value(items, depth + 1, here + "/items")
                                            if isinstance(items, (dict, bool)) else "g-value")
        lo, hi = s.get("minItems", 0), s.get("maxItems")
        if not isinstance(lo, int) or not 0 <= lo <= 64 or (hi is not None and (not isinstance(hi, int) or hi < lo)):
            self.refuse("minItems" if "minItems" in s else "maxItems")
            lo, hi = 0, None
        heads = [self.value(x, depth + 1, f"{here}/prefixItems/{i}") for i, x in enumerate(prefix)]
        seqs = [' "," '.join(heads[:n]) for n in range(lo, len(heads) + 1) if hi is None or n <= hi]
        if item is not None and (hi is None or hi > len(heads)):
            first = max(1, lo - len(heads))  # how many of `items` at least, then at most
            last = None if hi is None else min(hi, 64) - len(heads)
            more = f"{{{first - 1},{'' if last is None else last - 1}}}"
            seqs.append(' "," '.join(heads + [f'{item} ( "," {item} ){more}']))
        if not seqs:
            self.refuse("minItems")
            return "g-array"
        return self.add(" | ".join(f'"[" {q} "]"' if q else '"[" "]"' for q in seqs))

    def obj(self, s: dict, depth: int) -> str:
        here = self.path
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
            kv[k] = self.add(f"{_lit(k + ':')} {self.value(props[k], depth + 1, f'{here}/properties/{k}')}")
        if required:
            body = ' "," '.join(kv[k] for k in required) + "".join(f' ( "," {kv[k]} )?' for k in optional)
        else:  # any subset of the optional ones, in order: the first one written has no comma
            alts = [kv[k] + "".join(f' ( "," {kv[o]} )?' for o in optional[i + 1:]) for i, k in enumerate(optional)]
            body = "( " + " | ".join(alts) + " )?"
        return self.add(f'"{{" {body} "}}"')

    def lark(self, start: str) -> str:
        return "\n".join([f"start: {start}"] + [f"{k}: {v}" for k, v in self.rules.items()]
                         + [f"{k}: {v}" for k, v in self.terminals.items()])


def calls_grammar(tools: list[dict], name: str | None = None, parallel: bool = True,
                  thinking: bool = False, marker=text_marker) -> str:
    """The grammar (engine.local.grammar's, from Lark) of an answer that is one tool call
    (several with `parallel`), of the named tool or any declared one, whose arguments match the
    tool's parameter schema. With thinking on, a thought may come first. `marker(text)`: how a
    marker is matched (the engine's `grammar_marker`: its token, or its text)."""
    fns = [t["function"] for t in tools if name is None or t["function"]["name"] == name]
    if not fns:
        raise ToolError(f"tool_choice names {name!r}, which is not among the tools")
    g = _SchemaGrammar({}, marker)
    alts = []
    for i, fn in enumerate(fns):
        g.root, g.prefix = fn.get("parameters") or {}, f"t{i}-"
        try:
            args = g.value({**g.root, "type": "object"}, path="")
        except ToolError as e:
            raise ToolError(f"{fn['name']}: {e}") from None
        alts.append(g.add(f'{_lit(fn["name"])} {args}'))
    g.rules["call"] = f'{marker(CALL_OPEN)} "call:" ( {" | ".join(alts)} ) {marker(CALL_CLOSE)}'
    close = marker(CHANNEL_CLOSE)
    if close.startswith("<["):
        g.rules["thought"] = f"{marker(CHANNEL_OPEN)} <[^{close[2:-2]}]>* {close}"
    else:  # markers as text: one lexeme from the opening marker to the first closing one
        inside = g.terminal("~" + _regex(r"(?s:.*)" + re.escape(CHANNEL_CLOSE) + r"(?s:.*)"))
        g.rules["thought"] = g.terminal(f"{_regex(re.escape(CHANNEL_OPEN))} {inside} {_regex(re.escape(CHANNEL_CLOSE))}")
    from ..local.grammar import GrammarError, from_lark

    try:
        return from_lark(g.lark(("thought? " if thinking else "") + ("call+" if parallel else "call")))
    except GrammarError as e:  # a pattern llguidance cannot compile, a grammar too large
        raise ToolError(str(e)) from None
