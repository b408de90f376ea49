"""The tool hub: connections to MCP servers on an asyncio loop of its own (a daemon thread),
with blocking, thread-safe methods for a worker thread (`app.session.tool_runner` wraps them
for the GUI). Sessions, the handshake and HTTP are the MCP SDK's; stdio servers go through
`stdio.StdioTransport`. Every step is bounded in time, and whatever goes wrong during a call
(a refusal, a timeout, a server that stops, a result too large for the context) comes back as
a `ToolOutcome` with one clear line, never as an exception."""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import threading
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import anyio
from mcp import ClientSession
from mcp.shared.exceptions import MCPError as _SdkError
from mcp.types import Implementation

from engine import __version__
from engine.gemma4.calls import MAX_TOOLS

from .catalog import ToolInfo, index_tools
from .config import McpError, ServerConfig, one_line
from .results import MAX_RESULT_CHARS, ToolOutcome, error_line, exit_text, leaf_error, result_text
from .stdio import MAX_MESSAGE_BYTES, StdioTransport

CONNECTION_CLOSED = -32000  # the SDK's error code when the connection ends under a request
MAX_PAGES = 8  # tools/list pages read from one server
STOP_WAIT = 6.0  # seconds a server gets to stop before it is abandoned (the transport kills it before)

_SDK_PREFIX = re.compile(r"^Error executing tool \S+: ")  # what the SDK's servers put before a tool's error


def _http_client(url: str):
    from mcp.client import streamable_http as sh

    return sh.streamable_http_client(url)


class _Dead(Exception):
    pass


@dataclass(eq=False)
class _Server:
    config: ServerConfig
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    dead: asyncio.Event = field(default_factory=asyncio.Event)  # the connection ended
    stdio: StdioTransport | None = None
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
            rc = exit_text(self.stdio.returncode)
            return (f" ({rc})" if rc else "") + (f": {words}" if words else "")
        return f": {error_line(self.failure)}" if self.failure is not None else ""


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
        try:
            async with AsyncExitStack() as stack:
                session = await self._open(srv, stack)
                await self._race(srv, session.initialize(), deadline - loop.time())
                raw = await self._race(srv, self._list(session), max(1.0, deadline - loop.time()))
                if ready.done():  # whoever asked gave up waiting: stop again
                    return
                # only this loop writes _servers, and nothing awaits in between: no other
                # server can take a key meanwhile (the lock is for readers on other threads)
                taken = {t.key for t in self.tools()}
                srv.tools, srv.notes = index_tools(cfg.name, raw, taken, MAX_TOOLS - len(taken))
                with self._lock:
                    self._servers[cfg.name] = srv
                registered = True
                ready.set_result(list(srv.tools))
                await self._until_stopped(srv)
        except BaseException as e:
            if isinstance(e, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                if not ready.done():
                    ready.set_exception(McpError(f"the MCP server '{cfg.name}' was not started: Tandem is closing"))
                raise
            if not ready.done():
                await self._last_words(srv)
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

    async def _open(self, srv: _Server, stack: AsyncExitStack) -> ClientSession:
        """The transport (a started process, or an HTTP connection) and the SDK's session on it."""
        cfg = srv.config

        async def on_message(message) -> None:
            if isinstance(message, Exception):  # what a transport could not deliver
                srv.failure = message

        if cfg.transport == "stdio":
            srv.stdio = StdioTransport(cfg)
            srv.dead = srv.stdio.dead
            read, write = await stack.enter_async_context(srv.stdio.open())
        else:
            streams = await stack.enter_async_context(_http_client(cfg.url))
            read, write = streams[0], streams[1]
        srv.session = await stack.enter_async_context(ClientSession(
            read, write, message_handler=on_message,
            client_info=Implementation(name="Tandem", version=__version__)))
        return srv.session

    @staticmethod
    async def _until_stopped(srv: _Server) -> None:
        stop = asyncio.ensure_future(srv.stop.wait())
        dead = asyncio.ensure_future(srv.dead.wait())
        try:
            await asyncio.wait({stop, dead}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            dead.cancel()

    @staticmethod
    async def _last_words(srv: _Server) -> None:
        """A server that failed to start: wait a moment for its exit code and its last stderr line."""
        if srv.stdio is not None and srv.stdio.proc is not None:
            with anyio.move_on_after(1.0):  # its exit code, if it is going
                while srv.stdio.returncode is None:
                    await anyio.sleep(0.02)
            await anyio.sleep(0.1)  # and its last words on stderr

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
        e = leaf_error(e)
        if isinstance(e, McpError):
            return str(e)
        if isinstance(e, TimeoutError):
            return f"the MCP server '{cfg.name}' did not answer within {timeout_s:g} s"
        if srv.stdio is not None and (isinstance(e, _Dead) or srv.stdio.returncode is not None):
            return f"the MCP server '{cfg.name}' exited during start-up{srv.stopped_text()}"
        if isinstance(e, _Dead) and srv.failure is not None:
            e = srv.failure
        if cfg.transport == "http":
            return f"the MCP server '{cfg.name}' at {cfg.url} could not be reached: {error_line(e)}"
        return f"the MCP server '{cfg.name}' could not be started: {error_line(e)}"

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
            return ToolOutcome("error", f"the call to {tool.key} failed: {error_line(e)}")
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
