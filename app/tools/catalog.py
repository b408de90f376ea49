"""The tools a server lists, as the model sees them: each checked (its name, schema and
description bounded), named uniquely among the connected servers, and declared within what
engine.gemma4.call_grammar takes."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from engine.gemma4.call_grammar import check_tools
from engine.gemma4.calls import MAX_TOOLS, MAX_TOOLS_BYTES, NAME, ToolError

from .config import one_line

MAX_SCHEMA_BYTES = 32 * 1024  # one tool's input schema
MAX_DESCRIPTION = 1024  # characters of a tool's description the model sees

_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


@dataclass
class ToolInfo:
    server: str  # the ServerConfig name
    name: str  # the tool's name on its server
    key: str  # the name the model sees: unique among connected servers, matches engine.gemma4.calls.NAME
    description: str = ""
    input_schema: dict = field(default_factory=lambda: {"type": "object", "properties": {}})

    def declaration(self) -> dict:
        """The OpenAI tool declaration the model sees."""
        desc = self.description
        if len(desc) > MAX_DESCRIPTION:
            desc = desc[:MAX_DESCRIPTION - 1] + "…"
        return {"type": "function",
                "function": {"name": self.key, "description": desc, "parameters": self.input_schema}}


def declarations(tools: list[ToolInfo]) -> list[dict]:
    """Declarations for `tools`, as many as engine.gemma4.call_grammar.check_tools takes (count and total size)."""
    out, size = [], 2
    for t in tools[:MAX_TOOLS]:
        d = t.declaration()
        size += len(json.dumps(d)) + 2
        if size > MAX_TOOLS_BYTES:
            break
        out.append(d)
    return out


def _key(server: str, name: str, taken: set[str]) -> str:
    if NAME.match(name) and name not in taken:
        return name
    base = (_UNSAFE.sub("_", server) + "__" + _UNSAFE.sub("_", name))[:64]
    key, i = base, 2
    while key in taken:
        suffix = f"_{i}"
        key, i = base[:64 - len(suffix)] + suffix, i + 1
    return key


def index_tools(server: str, raw: list[dict], taken: set[str], room: int) -> tuple[list[ToolInfo], list[str]]:
    """ToolInfos for the tools a server listed (dicts with camelCase keys), and one line for
    each tool left out."""
    tools, notes = [], []
    for t in raw:
        name = t.get("name")
        if not isinstance(name, str) or not name or len(name) > 128:
            notes.append(f"a tool of '{server}' without a usable name was left out")
            continue
        label = one_line(name, 64)
        if len(tools) >= room:
            notes.append(f"'{server}' offers more tools than the {MAX_TOOLS} Tandem can declare; "
                         f"{label} and the rest were left out")
            break
        schema = t.get("inputSchema")
        schema = schema if isinstance(schema, dict) else {"type": "object", "properties": {}}
        desc = t.get("description")
        desc = desc if isinstance(desc, str) else ""
        if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
            notes.append(f"the tool {label} of '{server}' was left out: its schema is larger than "
                         f"{MAX_SCHEMA_BYTES // 1024} KB")
            continue
        info = ToolInfo(server, name, _key(server, name, taken), desc, schema)
        try:
            check_tools([info.declaration()])
        except ToolError as e:
            notes.append(f"the tool {label} of '{server}' was left out: {one_line(e)}")
            continue
        taken.add(info.key)
        tools.append(info)
    return tools, notes
