"""Tools from MCP servers (the Model Context Protocol, through its own `mcp` Python SDK).

The user adds servers in Settings → Tools: a program Tandem starts and talks to over its stdin
and stdout ("stdio"), or a streamable-HTTP address. No Qt here: `ToolHub` owns one asyncio
loop on a daemon thread and offers blocking, thread-safe methods for a worker thread
(`app.session.tool_runner` wraps them for the GUI).

Everything a server sends is untrusted and bounded: the number of tools, their schemas, the
size of a message and of a result, and the time of every step. Whatever goes wrong during a
call (a refusal, a timeout, a server that stops, a result too large for the context) comes
back as a `ToolOutcome` with one clear line, never as an exception.

stdio servers are started by Tandem's own small transport rather than the SDK's
`stdio_client`: it is the same protocol (one JSON-RPC message a line), but it keeps the process
at hand, so a server that dies mid-call is reported at once with its exit code and the last
line it wrote to stderr. Sessions, the handshake and HTTP are the SDK's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import re
import shutil
import signal
import threading
from collections import deque
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import anyio
from mcp import ClientSession
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage
from mcp.types import Implementation

from engine import __version__
from engine.gemma4.tools import MAX_TOOLS, MAX_TOOLS_BYTES, NAME, ToolError, check_tools

from mcp.shared.exceptions import MCPError as _SdkError
from mcp_types import jsonrpc_message_adapter as _adapter


def _parse(line: str):
    return _adapter.validate_json(line, by_name=False)


def _dump(message) -> str:
    return message.model_dump_json(by_alias=True, exclude_unset=True)


CONNECTION_CLOSED = -32000  # the SDK's error code when the connection ends under a request
MAX_RESULT_CHARS = 50_000  # a result longer than this does not go to the model (callers may pass less)
MAX_MESSAGE_BYTES = 32 * 1024 * 1024  # one JSON-RPC line from a stdio server
MAX_SCHEMA_BYTES = 32 * 1024  # one tool's input schema
MAX_DESCRIPTION = 1024  # characters of a tool's description the model sees
MAX_PAGES = 8  # tools/list pages read from one server
LINE = 300  # characters of one line of a message shown to the user and the model
STOP_WAIT = 6.0  # seconds a server gets to stop before it is abandoned (the transport kills it before)

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SDK_PREFIX = re.compile(r"^Error executing tool \S+: ")  # what the SDK's servers put before a tool's error


class McpError(Exception):
    """A server that could not be used; the message is one line naming the server and why."""


def one_line(text, limit: int = LINE) -> str:
    """The first non-empty line of `text`, without control characters, at most `limit` long."""
    for line in str(text).splitlines():
        line = _CONTROL.sub(" ", line).strip()
        if line:
            return line if len(line) <= limit else line[:limit - 1] + "…"
    return ""


# ---- configuration ----------------------------------------------------------------------
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


# ---- tools ------------------------------------------------------------------------------
@dataclass
class ToolInfo:
    server: str  # the ServerConfig name
    name: str  # the tool's name on its server
    key: str  # the name the model sees: unique among connected servers, matches engine.gemma4.tools.NAME
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
    """Declarations for `tools`, as many as engine.gemma4.tools.check_tools takes (count and total size)."""
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


def _index(server: str, raw: list[dict], taken: set[str], room: int) -> tuple[list[ToolInfo], list[str]]:
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


@dataclass
class ToolOutcome:
    """What came of one call: the result text (kind "ok"), else one line saying what happened."""

    kind: str  # "ok" | "error" | "timeout" | "crashed" | "too_large" | "unknown"
    text: str

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


def _b64_bytes(data) -> int:
    return len(data) * 3 // 4 - data.count("=", -2) if isinstance(data, str) else 0


def result_text(result: dict) -> str:
    """A CallToolResult (as a camelCase dict) as text: text joined; pictures, sounds and
    binary resources described; structured content as JSON when nothing else came."""
    parts = []
    for c in result.get("content") or []:
        if not isinstance(c, dict):
            continue
        kind = c.get("type")
        if kind == "text":
            parts.append(str(c.get("text") or ""))
        elif kind in ("image", "audio"):
            parts.append(f"[{c.get('mimeType') or kind}, {_b64_bytes(c.get('data')):,} bytes]")
        elif kind == "resource_link":
            parts.append(f"[link: {one_line(c.get('name') or '')} {one_line(c.get('uri') or '')}]")
        elif kind == "resource":
            r = c.get("resource") if isinstance(c.get("resource"), dict) else {}
            if isinstance(r.get("text"), str):
                parts.append(r["text"])
            else:
                parts.append(f"[{r.get('mimeType') or 'data'}, {_b64_bytes(r.get('blob')):,} bytes: "
                             f"{one_line(r.get('uri') or '')}]")
        else:
            parts.append(f"[{one_line(kind or 'unknown')} content]")
    text = "\n".join(parts)
    if not text.strip() and result.get("structuredContent") is not None:
        text = json.dumps(result["structuredContent"], ensure_ascii=False)
    return text


def _exit_text(rc) -> str:
    if rc is None:
        return ""
    return f"killed by signal {-rc}" if rc < 0 else f"exit code {rc}"


def _leaf(e: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    while isinstance(e, BaseExceptionGroup):
        cancelled = (asyncio.CancelledError, anyio.get_cancelled_exc_class())
        inner = [x for x in e.exceptions if not isinstance(x, cancelled)]
        e = (inner or list(e.exceptions))[0]
    return e


def _error_line(e: BaseException) -> str:
    e = _leaf(e)
    msg = one_line(e)
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


# ---- the stdio transport ----------------------------------------------------------------
class _Stdio:
    """A server process and the two streams ClientSession reads and writes."""

    def __init__(self, cfg: ServerConfig):
        self.cfg = cfg
        self.proc = None
        self.stderr: deque[str] = deque(maxlen=20)  # its last lines, for messages
        self.lines = 0  # how many stderr lines it wrote so far
        self.dead = asyncio.Event()  # the process ended (or stopped talking)
        self.oversize = False  # it sent a line longer than MAX_MESSAGE_BYTES

    @property
    def returncode(self):
        return self.proc.returncode if self.proc is not None else None

    def last_words(self, since: int = 0) -> str:
        """What the server last wrote to stderr after its first `since` lines (it may say why it failed)."""
        fresh = list(self.stderr)[-max(0, self.lines - since):] if self.lines > since else []
        for line in reversed(fresh):
            if line.strip():
                return one_line(line)
        return ""

    def pid(self):
        return self.proc.pid if self.proc is not None else None

    @asynccontextmanager
    async def open(self):
        cfg = self.cfg
        env = {**get_default_environment(), **cfg.env}
        command = os.path.expanduser(cfg.command)
        exe = shutil.which(command, path=env.get("PATH")) if os.sep not in command else command
        if exe is None or not os.path.exists(exe):
            raise McpError(f"the MCP server '{cfg.name}' could not start: no program {cfg.command!r} was found")
        try:  # a list, never a shell; a session of its own, so stopping it stops its children too
            self.proc = await anyio.open_process([exe, *cfg.args], env=env, start_new_session=True)
        except OSError as e:
            raise McpError(f"the MCP server '{cfg.name}' could not start: {e.strerror or e} ({cfg.command})") from None
        read_w, read_r = anyio.create_memory_object_stream(16)
        write_w, write_r = anyio.create_memory_object_stream(16)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._read_stdout, read_w)
            tg.start_soon(self._write_stdin, write_r, read_w)
            tg.start_soon(self._read_stderr)
            tg.start_soon(self._watch, read_w)
            try:
                yield read_r, write_w
            finally:
                with anyio.CancelScope(shield=True):
                    await self.stop()
                    for s in (read_w, read_r, write_w, write_r):
                        await s.aclose()
                tg.cancel_scope.cancel()

    async def _read_stdout(self, read_w) -> None:
        buf = bytearray()
        try:
            while True:
                try:
                    chunk = await self.proc.stdout.receive(65536)
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                    break
                buf.extend(chunk)
                while (i := buf.find(b"\n")) >= 0:
                    line = bytes(buf[:i]).decode("utf-8", "replace").strip()
                    del buf[:i + 1]
                    if line:
                        try:
                            item = SessionMessage(_parse(line))
                        except ValueError as e:  # a server printing to stdout: the session logs it
                            item = e
                        await read_w.send(item)
                if len(buf) > MAX_MESSAGE_BYTES:
                    self.oversize = True
                    break
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            self.dead.set()
            read_w.close()  # the session sees the end: waiting requests fail at once

    async def _write_stdin(self, write_r, read_w) -> None:
        try:
            async for message in write_r:
                await self.proc.stdin.send((_dump(message.message) + "\n").encode("utf-8"))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            self.dead.set()
            read_w.close()

    async def _read_stderr(self) -> None:
        rest = b""
        try:
            while True:
                chunk = await self.proc.stderr.receive(65536)
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()[-4096:]
                self.stderr.extend(x[:LINE * 2].decode("utf-8", "replace") for x in lines[-20:])
                self.lines += len(lines)
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            if rest:
                self.stderr.append(rest[:LINE * 2].decode("utf-8", "replace"))
                self.lines += 1

    async def _watch(self, read_w) -> None:
        # returncode, not proc.wait(): a child that inherited the pipes keeps those open
        while self.proc.returncode is None:
            await anyio.sleep(0.05)
        self.dead.set()
        await anyio.sleep(0.2)  # what the server wrote before it went is still read
        read_w.close()

    def _signal(self, sig) -> None:
        try:
            if hasattr(os, "killpg"):
                os.killpg(self.proc.pid, sig)
            else:  # Windows
                self.proc.kill()
        except (ProcessLookupError, PermissionError, OSError):
            pass

    async def stop(self) -> None:
        """Close its stdin, then SIGTERM, then SIGKILL: about 3 s at the most."""
        if self.proc is None:
            return
        try:
            await self.proc.stdin.aclose()
        except Exception:
            pass
        for sig in (None, signal.SIGTERM, getattr(signal, "SIGKILL", signal.SIGTERM)):
            if sig is not None:
                self._signal(sig)
            with anyio.move_on_after(1.0):
                while self.proc.returncode is None:
                    await anyio.sleep(0.05)
            if self.proc.returncode is not None:
                break
        if self.proc.returncode is not None:  # its children, if any, go with it
            self._signal(getattr(signal, "SIGKILL", signal.SIGTERM))
        # asyncio keeps the subprocess transport open while a child holds a pipe, and closing it
        # later (at garbage collection) fails once the loop is closed; nothing public exposes it
        transport = getattr(getattr(self.proc, "_process", None), "_transport", None)
        try:
            transport.close()
        except Exception:
            pass

    def kill_now(self) -> None:
        """From any thread, when the loop is gone."""
        if self.proc is not None and self.proc.returncode is None:
            self._signal(getattr(signal, "SIGKILL", signal.SIGTERM))


def _http_client(url: str):
    from mcp.client import streamable_http as sh

    return sh.streamable_http_client(url)


# ---- the hub ----------------------------------------------------------------------------
class _Dead(Exception):
    pass


@dataclass(eq=False)
class _Server:
    config: ServerConfig
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    dead: asyncio.Event = field(default_factory=asyncio.Event)  # the connection ended
    stdio: _Stdio | None = None
    session: ClientSession | None = None
    tools: list[ToolInfo] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    task: asyncio.Task | None = None
    failure: BaseException | None = None  # what a transport reported (HTTP: a connection error)
    stopped_why: str = ""  # stopped by Tandem for a reason the user is told (a call that timed out)

    @property
    def name(self) -> str:
        return self.config.name

    def ended(self) -> str:
        if self.stdio is not None:
            return f"the MCP server '{self.name}' stopped"
        return f"the connection to the MCP server '{self.name}' was lost"

    def stopped_text(self, since: int = 0) -> str:
        """Why the connection ended, for messages: " (exit code 1): its last stderr line since `since`"."""
        if self.stdio is not None:
            words = self.stdio.last_words(since)
            rc = _exit_text(self.stdio.returncode)
            return (f" ({rc})" if rc else "") + (f": {words}" if words else "")
        return f": {_error_line(self.failure)}" if self.failure is not None else ""


class ToolHub:
    """Connections to MCP servers on an asyncio loop of their own (a daemon thread).

    The public methods block and are thread-safe: call them from a worker thread, never from
    the GUI thread (`app.session.tool_runner.ToolRunner` does that). A server that stops is forgotten
    at once (its tools vanish; `on_lost(name, line)` is called on the hub's thread), so the
    next `connect` starts it again."""

    def __init__(self):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tandem-mcp", daemon=True)
        self._thread.start()
        self._lock = threading.Lock()  # guards _servers: written on the loop, read anywhere
        self._servers: dict[str, _Server] = {}
        self._name_locks: dict[str, asyncio.Lock] = {}
        self._all: set[_Server] = set()  # every server with a live task, for close()
        self._closed = False
        self.on_lost = None  # callable(name, line) when a connected server stops by itself

    # -- blocking API --
    def _submit(self, coro) -> concurrent.futures.Future:
        if self._closed:
            coro.close()
            raise McpError("the MCP tools are shut down")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def submit_connect(self, config: ServerConfig, timeout_s: float = 30) -> concurrent.futures.Future:
        """Start connecting; the future gives the tools or raises McpError."""
        return self._submit(self._connect(config, float(timeout_s)))

    def connect(self, config: ServerConfig, timeout_s: float = 30) -> list[ToolInfo]:
        """Start (or reach) a server and list its tools; McpError (one line) when it cannot be used."""
        fut = self.submit_connect(config, timeout_s)
        try:
            return fut.result(timeout_s + STOP_WAIT + 5)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise McpError(f"the MCP server '{config.name}' did not answer within {timeout_s:g} s") from None

    def disconnect(self, name: str) -> None:
        if self._closed:
            return
        try:
            self._submit(self._disconnect(name)).result(STOP_WAIT + 5)
        except (concurrent.futures.TimeoutError, McpError):
            pass

    def tools(self) -> list[ToolInfo]:
        """The tools of every connected server, in the order the servers connected."""
        with self._lock:
            return [t for s in self._servers.values() for t in s.tools]

    def tool(self, key: str) -> ToolInfo | None:
        return next((t for t in self.tools() if t.key == key), None)

    def servers(self) -> list[str]:
        """The names of the connected servers."""
        with self._lock:
            return list(self._servers)

    def connected(self, name: str) -> bool:
        with self._lock:
            return name in self._servers

    def notes(self, name: str) -> list[str]:
        """One line for each tool of a connected server that was left out."""
        with self._lock:
            s = self._servers.get(name)
            return list(s.notes) if s else []

    def submit_call(self, key: str, arguments: dict, timeout_s: float = 60,
                    max_chars: int = MAX_RESULT_CHARS) -> concurrent.futures.Future:
        """Start a call; the future's result is a ToolOutcome (it never fails)."""
        if self._closed:
            fut = concurrent.futures.Future()
            fut.set_result(ToolOutcome("unknown", "the MCP tools are shut down"))
            return fut
        return self._submit(self._call(key, arguments, float(timeout_s), int(max_chars)))

    def call(self, key: str, arguments: dict, timeout_s: float = 60, max_chars: int = MAX_RESULT_CHARS) -> ToolOutcome:
        fut = self.submit_call(key, arguments, timeout_s, max_chars)
        try:
            return fut.result(timeout_s + 10)
        except concurrent.futures.TimeoutError:  # the loop itself is stuck: should not happen
            fut.cancel()
            return ToolOutcome("timeout", f"the tool {key} did not answer within {timeout_s:g} s")
        except concurrent.futures.CancelledError:
            return ToolOutcome("unknown", "the MCP tools were shut down during the call")

    def close(self) -> None:
        """End every server (each stops within a few seconds) and the loop."""
        if self._closed:
            return
        try:
            self._submit(self._close_all()).result(STOP_WAIT + 5)
        except Exception:
            pass
        self._closed = True
        for s in list(self._all):  # whatever did not stop in time
            if s.stdio is not None:
                s.stdio.kill_now()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(2)
        if not self._thread.is_alive():
            self._loop.close()

    # -- on the loop --
    async def _connect(self, cfg: ServerConfig, timeout_s: float) -> list[ToolInfo]:
        lock = self._name_locks.setdefault(cfg.name, asyncio.Lock())
        async with lock:  # one connect per name at a time
            old = self._servers.get(cfg.name)
            if old is not None and old.config.same_server(cfg) and not old.dead.is_set():
                return list(old.tools)
            if old is not None:
                await self._end(old)
            srv = _Server(cfg)
            ready = self._loop.create_future()
            srv.task = asyncio.ensure_future(self._own(srv, ready, timeout_s))
            self._all.add(srv)
            return await ready

    async def _disconnect(self, name: str) -> None:
        srv = self._servers.get(name)
        if srv is not None:
            await self._end(srv)

    async def _end(self, srv: _Server) -> None:
        srv.stop.set()
        if srv.task is not None:
            await asyncio.wait({srv.task}, timeout=STOP_WAIT)

    async def _close_all(self) -> None:
        servers = list(self._all)
        for s in servers:
            s.stop.set()
        tasks = {s.task for s in servers if s.task is not None}
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_WAIT)
        rest = asyncio.all_tasks() - {asyncio.current_task()}  # calls still waiting, stragglers
        for t in rest:
            t.cancel()
        if rest:
            await asyncio.wait(rest, timeout=1)

    async def _race(self, srv: _Server, coro, timeout_s: float):
        """`coro`'s result; _Dead when the connection ends first, TimeoutError after `timeout_s`."""
        task = asyncio.ensure_future(coro)
        dead = asyncio.ensure_future(srv.dead.wait())
        try:
            done, _ = await asyncio.wait({task, dead}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
            if task not in done and dead in done:
                await asyncio.wait({task}, timeout=0.3)  # an answer written just before it went
            if task.done():
                return task.result()
            if dead.done():
                raise _Dead()
            raise TimeoutError()
        finally:
            dead.cancel()
            if not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=2)

    async def _own(self, srv: _Server, ready: asyncio.Future, timeout_s: float) -> None:
        """The server's whole life in one task (anyio wants its contexts left where entered)."""
        cfg, registered = srv.config, False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s

        async def on_message(message) -> None:
            if isinstance(message, Exception):  # what a transport could not deliver
                srv.failure = message

        try:
            async with AsyncExitStack() as stack:
                if cfg.transport == "stdio":
                    srv.stdio = _Stdio(cfg)
                    srv.dead = srv.stdio.dead
                    read, write = await stack.enter_async_context(srv.stdio.open())
                else:
                    streams = await stack.enter_async_context(_http_client(cfg.url))
                    read, write = streams[0], streams[1]
                session = await stack.enter_async_context(ClientSession(
                    read, write, message_handler=on_message,
                    client_info=Implementation(name="Tandem", version=__version__)))
                srv.session = session
                await self._race(srv, session.initialize(), deadline - loop.time())
                raw = await self._race(srv, self._list(session), max(1.0, deadline - loop.time()))
                if ready.done():  # whoever asked gave up waiting: stop again
                    return
                # only this loop writes _servers, and nothing awaits in between: no other
                # server can take a key meanwhile (the lock is for readers on other threads)
                taken = {t.key for t in self.tools()}
                srv.tools, srv.notes = _index(cfg.name, raw, taken, MAX_TOOLS - len(taken))
                with self._lock:
                    self._servers[cfg.name] = srv
                registered = True
                ready.set_result(list(srv.tools))
                stop = asyncio.ensure_future(srv.stop.wait())
                dead = asyncio.ensure_future(srv.dead.wait())
                try:
                    await asyncio.wait({stop, dead}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stop.cancel()
                    dead.cancel()
        except BaseException as e:
            if isinstance(e, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                if not ready.done():
                    ready.set_exception(McpError(f"the MCP server '{cfg.name}' was not started: Tandem is closing"))
                raise
            if not ready.done():
                if srv.stdio is not None and srv.stdio.proc is not None:
                    with anyio.move_on_after(1.0):  # its exit code, if it is going
                        while srv.stdio.returncode is None:
                            await anyio.sleep(0.02)
                    await anyio.sleep(0.1)  # and its last words on stderr
                ready.set_exception(McpError(self._start_error(srv, e, timeout_s)))
        finally:
            srv.dead.set()
            self._forget(srv)
            self._all.discard(srv)
            if registered and (not srv.stop.is_set() or srv.stopped_why) and self.on_lost is not None:
                try:
                    self.on_lost(cfg.name, srv.stopped_why or f"{srv.ended()}{srv.stopped_text()}")
                except Exception:
                    pass

    def _forget(self, srv: _Server) -> None:
        with self._lock:
            if self._servers.get(srv.name) is srv:
                del self._servers[srv.name]

    @staticmethod
    async def _list(session) -> list[dict]:
        from mcp.types import PaginatedRequestParams

        out, cursor = [], None
        for _ in range(MAX_PAGES):
            if cursor is None:
                page = await session.list_tools()
            else:
                page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
            out.extend(t.model_dump(by_alias=True, mode="json") for t in page.tools)
            cursor = getattr(page, "next_cursor", None) or getattr(page, "nextCursor", None)
            if not cursor or len(out) > MAX_TOOLS:
                break
        return out

    def _start_error(self, srv: _Server, e: BaseException, timeout_s: float) -> str:
        cfg = srv.config
        e = _leaf(e)
        if isinstance(e, McpError):
            return str(e)
        if isinstance(e, TimeoutError):
            return f"the MCP server '{cfg.name}' did not answer within {timeout_s:g} s"
        if srv.stdio is not None and (isinstance(e, _Dead) or srv.stdio.returncode is not None):
            return f"the MCP server '{cfg.name}' exited during start-up{srv.stopped_text()}"
        if isinstance(e, _Dead) and srv.failure is not None:
            e = srv.failure
        if cfg.transport == "http":
            return f"the MCP server '{cfg.name}' at {cfg.url} could not be reached: {_error_line(e)}"
        return f"the MCP server '{cfg.name}' could not be started: {_error_line(e)}"

    async def _call(self, key: str, arguments, timeout_s: float, max_chars: int) -> ToolOutcome:
        with self._lock:
            srv = next((s for s in self._servers.values() if any(t.key == key for t in s.tools)), None)
        tool = next((t for t in srv.tools if t.key == key), None) if srv else None
        if tool is None:
            return ToolOutcome("unknown", f"no connected MCP server offers a tool named {one_line(key, 64)}")
        if not isinstance(arguments, dict):
            return ToolOutcome("error", f"the arguments of {tool.key} must be an object")
        mark = srv.stdio.lines if srv.stdio is not None else 0  # what it writes to stderr from now on
        try:
            result = await self._race(srv, srv.session.call_tool(tool.name, arguments), timeout_s)
        except TimeoutError:
            # a server that did not answer may be frozen (every later call would time out too):
            # it is stopped, and started again for the next call, as after a crash
            why = f"the tool {tool.key} did not answer within {timeout_s:g} s"
            srv.stopped_why = f"the MCP server '{srv.name}' was stopped because {why}; it starts again"
            srv.stop.set()
            self._forget(srv)
            return ToolOutcome("timeout", f"{why}; its server '{srv.name}' was stopped and starts again")
        except _Dead:
            return await self._lost(srv, tool, mark)
        except asyncio.CancelledError:
            raise
        except _SdkError as e:
            code = getattr(getattr(e, "error", None), "code", None)
            if code == CONNECTION_CLOSED or srv.dead.is_set():
                return await self._lost(srv, tool, mark)
            return ToolOutcome("error", f"the MCP server '{srv.name}' refused the call to {tool.key}: "
                                        f"{one_line(e) or 'no reason given'}")
        except Exception as e:
            if srv.dead.is_set():
                return await self._lost(srv, tool, mark)
            return ToolOutcome("error", f"the call to {tool.key} failed: {_error_line(e)}")
        d = result.model_dump(by_alias=True, mode="json")
        text = result_text(d)
        if d.get("isError"):
            why = _SDK_PREFIX.sub("", one_line(text)) or "no reason given"
            return ToolOutcome("error", f"the tool {tool.key} reported an error: {why}")
        if len(text) > max_chars:
            return ToolOutcome("too_large", f"the result of {tool.key} is {len(text):,} characters, more than the "
                                            f"{max_chars:,} that fit in the context")
        return ToolOutcome("ok", text)

    async def _lost(self, srv: _Server, tool: ToolInfo, mark: int) -> ToolOutcome:
        if srv.stdio is not None:
            with anyio.move_on_after(1.0):  # its exit code
                while srv.stdio.returncode is None and not srv.stdio.oversize:
                    await anyio.sleep(0.02)
            if srv.stdio.oversize:
                srv.stop.set()
                self._forget(srv)
                return ToolOutcome("too_large", f"the result of {tool.key} is larger than "
                                                f"{MAX_MESSAGE_BYTES // (1024 * 1024)} MB; the MCP server "
                                                f"'{srv.name}' was stopped")
        srv.dead.set()
        self._forget(srv)  # at once: the next connect starts it again
        return ToolOutcome("crashed", f"{srv.ended()} during the call{srv.stopped_text(mark)}")
