"""OpenAI tool declarations checked (`check_tools`), and the grammar that forces a tool call in
Gemma 4's format (calls.py) whose arguments follow the tool's parameter schema (`calls_grammar`),
for `tool_choice: "required"` or a named function. The two live together because a declaration
is refused where no call could be written for its schema: the check builds its grammar.

The argument grammar is written here, not by llama.cpp's JSON-schema converter: that converter
writes JSON (quoted keys, JSON strings) and its rule tables are module globals, and llama.cpp's
own Gemma 4 parser has no schema-aware grammar either (it accepts any argument object).
Schemas are bounded as declarations are (depth, size), and refused by name where a grammar
cannot enforce them.
"""

from __future__ import annotations

import json
import re

from .calls import (BAD_KEY, CALL_CLOSE, CALL_OPEN, CHANNEL_CLOSE, CHANNEL_OPEN, MAX_DEPTH, MAX_TOOLS, MAX_TOOLS_BYTES,
                    NAME, QUOTE, ToolError)


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

    def __init__(self, root: dict, marker=text_marker, prefix: str = "", lenient: bool = False,
                 max_string: int | None = None):
        self.root, self.rules, self.n, self.prefix = root, {}, 0, prefix  # prefix: one tool's $refs
        # max_string: characters a string without its own maxLength may take (None: no cap), so
        # a forced call closes within its reply's token budget instead of being cut inside a string
        self.max_string = max_string
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
            "g-string": self.quoted([f"(?s:.){{0,{max_string}}}"] if max_string else None),
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
        else:
            if hi is None and self.max_string:
                hi = max(lo, self.max_string)
            if lo or hi is not None:
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
                  thinking: bool = False, marker=text_marker, max_string: int | None = None) -> str:
    """The grammar (engine.local.grammar's, from Lark) of an answer that is one tool call
    (several with `parallel`), of the named tool or any declared one, whose arguments match the
    tool's parameter schema. With thinking on, a thought may come first. `marker(text)`: how a
    marker is matched (the engine's `grammar_marker`: its token, or its text). `max_string`:
    the most characters a string without a maxLength of its own may take."""
    fns = [t["function"] for t in tools if name is None or t["function"]["name"] == name]
    if not fns:
        raise ToolError(f"tool_choice names {name!r}, which is not among the tools")
    g = _SchemaGrammar({}, marker, max_string=max_string)
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
