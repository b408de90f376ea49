"""Tool calling in Gemma 4's own format: declarations are rendered by the model's chat template,
and the model writes a call as

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>

(keys bare, strings between `<|"|>` tokens, numbers, true/false/null, {...} and [...] as in
JSON). This module holds the format's markers and limits and reads calls out of the model's
output as it streams (`CallParser`); call_grammar.py checks declarations and builds the grammar
that forces a call. Everything is bounded: the number and size of tools, schema depth, argument
nesting.
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
        self.cut = ""  # the tool whose call the answer's end left open (its text went back as text)

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
        if self.buf is None:
            return out
        body = "".join(self.buf)
        self.cut = body[5:body.index("{")].strip() if body.startswith("call:") and "{" in body else "?"
        return out + [("text", self._raw(closed=False))]
