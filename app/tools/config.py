"""MCP servers as the user configures them (Settings → Tools): a program Tandem starts and
talks to over its stdin and stdout ("stdio"), or a streamable-HTTP address. Everything read
from the settings file or the dialog is untrusted: each field is checked, and a server that
cannot be used is one line naming it and why."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

LINE = 300  # characters of one line of a message shown to the user and the model

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class McpError(Exception):
    """A server that could not be used; the message is one line naming the server and why."""


def one_line(text, limit: int = LINE) -> str:
    """The first non-empty line of `text`, without control characters, at most `limit` long."""
    for line in str(text).splitlines():
        line = _CONTROL.sub(" ", line).strip()
        if line:
            return line if len(line) <= limit else line[:limit - 1] + "…"
    return ""


@dataclass
class ServerConfig:
    """One MCP server as the settings file keeps it (settings["mcp_servers"])."""

    name: str
    transport: str = "stdio"  # "stdio" | "http"
    command: str = ""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    url: str = ""
    enabled: bool = False  # nothing is on until the user switches it on

    def to_dict(self) -> dict:
        return {"name": self.name, "transport": self.transport, "command": self.command, "args": list(self.args),
                "env": dict(self.env), "url": self.url, "enabled": self.enabled}

    @classmethod
    def from_dict(cls, d) -> ServerConfig:
        """A config from untrusted data (the settings file, the dialog): ValueError, one line, if unusable."""
        if not isinstance(d, dict):
            raise ValueError("an MCP server must be a JSON object")

        def text(key, limit, default=""):
            v = d.get(key, default)
            if not isinstance(v, str):
                raise ValueError(f"the MCP server's {key} must be text")
            if len(v) > limit or "\x00" in v:
                raise ValueError(f"the MCP server's {key} is longer than {limit} characters or holds a NUL")
            return v

        name = text("name", 64).strip()
        if not name or _CONTROL.search(name):
            raise ValueError("an MCP server needs a name of 1-64 characters on one line")
        transport = d.get("transport", "stdio")
        if transport not in ("stdio", "http"):
            raise ValueError(f"MCP server '{name}': transport must be 'stdio' or 'http', got {transport!r}")
        args = d.get("args", [])
        if not isinstance(args, list) or len(args) > 256 or not all(isinstance(a, str) for a in args):
            raise ValueError(f"MCP server '{name}': args must be a list of at most 256 texts")
        if any(len(a) > 8192 or "\x00" in a for a in args):
            raise ValueError(f"MCP server '{name}': an argument is longer than 8192 characters or holds a NUL")
        env = d.get("env", {})
        if not isinstance(env, dict) or len(env) > 128:
            raise ValueError(f"MCP server '{name}': env must be an object of at most 128 variables")
        for k, v in env.items():
            if not isinstance(k, str) or not _ENV_KEY.match(k) or len(k) > 256:
                raise ValueError(f"MCP server '{name}': {k!r} is not an environment variable name")
            if not isinstance(v, str) or len(v) > 32768 or "\x00" in v:
                raise ValueError(f"MCP server '{name}': the value of {k} must be text without NUL, at most 32 KB")
        enabled = d.get("enabled", False)
        if not isinstance(enabled, bool):
            raise ValueError(f"MCP server '{name}': enabled must be true or false")
        cfg = cls(name, transport, text("command", 4096).strip(), list(args), dict(env), text("url", 2048).strip(),
                  enabled)
        if transport == "stdio" and not cfg.command:
            raise ValueError(f"MCP server '{name}': a stdio server needs a command")
        if transport == "http":
            u = urlsplit(cfg.url)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise ValueError(f"MCP server '{name}': the address must be an http:// or https:// URL")
        return cfg

    def same_server(self, other: ServerConfig) -> bool:
        """Whether `other` starts the same server (the switch aside)."""
        return {**self.to_dict(), "enabled": 0} == {**other.to_dict(), "enabled": 0}

    def describe(self) -> str:
        if self.transport == "http":
            return self.url
        import shlex

        return shlex.join([self.command, *self.args])


def load_servers(settings) -> tuple[list[ServerConfig], list[str]]:
    """The servers in settings["mcp_servers"], and one line for each entry that could not be read."""
    out, problems, names = [], [], set()
    for i, d in enumerate(settings.get("mcp_servers") or []):
        try:
            cfg = ServerConfig.from_dict(d)
        except ValueError as e:
            problems.append(f"MCP server entry {i + 1} of the settings was left out: {e}")
            continue
        if cfg.name in names:
            problems.append(f"a second MCP server named '{cfg.name}' was left out")
            continue
        names.add(cfg.name)
        out.append(cfg)
    return out, problems
