"""The GUI's side of MCP tools: `ToolHub`'s blocking work off the GUI thread, results as signals.

Connecting runs on one worker thread (servers of one refresh connect side by side on the
hub's loop); calls run on the hub's loop. Both report through signals emitted from those
threads, which Qt queues to the GUI thread: no method here waits on a server.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading

from PySide6.QtCore import QObject, QTimer, Signal

from app.tools.catalog import ToolInfo, declarations
from app.tools.config import McpError, ServerConfig, one_line
from app.tools.hub import ToolHub
from app.tools.results import MAX_RESULT_CHARS, ToolOutcome


class ToolRunner(QObject):
    """MCP servers for the window: `refresh` with the configs, `call` a tool, read `declarations`."""

    listed = Signal(str, list, str)  # server name, its [ToolInfo], one-line error ('' when fine or switched off)
    finished = Signal(str, object)  # call id, ToolOutcome

    def __init__(self, hub: ToolHub | None = None, parent=None, connect_timeout_s: float = 30):
        super().__init__(parent)
        self.hub = hub or ToolHub()
        self.hub.on_lost = self._lost
        self.connect_timeout_s = connect_timeout_s
        self._configs: dict[str, ServerConfig] = {}  # the latest refresh, by name
        self._enabled: set[str] = set()
        self._known: dict[str, str] = {}  # tool key -> server name, as last listed (to restart a stopped server)
        # server name -> its tools as last listed; a server that stopped by itself and is being
        # started again (`_restarting`) keeps them offered, so the model's next answer can still
        # call them (without their declarations the template reads no call: raw markup)
        self._offered: dict[str, list[ToolInfo]] = {}
        self._restarting: set[str] = set()
        self._errors: dict[str, str] = {}  # server name -> its last one-line error
        self._generation = 0  # a refresh superseded by a newer one stops early
        self._jobs: queue.Queue = queue.Queue()
        self._closed = False
        self._worker = threading.Thread(target=self._work, name="tandem-tools", daemon=True)
        self._worker.start()

    # -- for the GUI thread --
    def refresh(self, configs: list[ServerConfig]) -> None:
        """Connect the enabled servers not yet connected, disconnect the rest; `listed` tells each outcome."""
        if self._closed:
            return
        self._configs = {c.name: c for c in configs}
        self._enabled = {c.name for c in configs if c.enabled}
        self._generation += 1
        self._jobs.put(("refresh", self._generation, list(configs)))

    def call(self, call_id: str, key: str, arguments: dict, timeout_s: float = 60,
             max_chars: int = MAX_RESULT_CHARS) -> None:
        """Run a tool the user allowed; `finished(call_id, outcome)` follows, always exactly once."""
        info = self.hub.tool(key) if not self._closed else None
        server = info.server if info else self._known.get(key)
        if self._closed or server not in self._enabled:
            outcome = ToolOutcome("unknown", f"no switched-on MCP server offers a tool named {one_line(key, 64)}")
            QTimer.singleShot(0, self, lambda: self.finished.emit(call_id, outcome))
        elif info is not None:
            self._track(call_id, self.hub.submit_call(key, arguments, timeout_s, max_chars), server)
        else:  # its server stopped since: start it again first
            self._jobs.put(("call", call_id, server, key, arguments, timeout_s, max_chars))

    def _tools(self) -> list[ToolInfo]:
        """The switched-on servers' tools: the connected ones', and those of a server starting
        again after it stopped (a call to one starts it first, `call`)."""
        live = self.hub.tools()
        up = {t.server for t in live}
        restarting = [t for name in list(self._restarting) if name not in up for t in self._offered.get(name, [])]
        return [t for t in live + restarting if t.server in self._enabled]

    def declarations(self) -> list[dict]:
        """The tool declarations of the switched-on servers, for the model."""
        return declarations(self._tools())

    def tool(self, key: str) -> ToolInfo | None:
        return next((t for t in self._tools() if t.key == key), None)

    def error(self, name: str) -> str:
        """The last one-line error of a server ('' when none)."""
        return self._errors.get(name, "")

    def close(self) -> None:
        """Stop every server (a few seconds at the very most; usually well under one)."""
        if self._closed:
            return
        self._closed = True
        self._jobs.put(None)
        self.hub.close()

    # -- off the GUI thread --
    def _emit_listed(self, name: str, tools: list, error: str, restarting: bool = False) -> None:
        if error:
            self._errors[name] = error
        else:
            self._errors.pop(name, None)
        if tools:
            self._offered[name] = tools
        if restarting:
            self._restarting.add(name)
        else:
            self._restarting.discard(name)
            if not tools:
                self._offered.pop(name, None)
        for t in tools:
            self._known[t.key] = t.server
        try:
            self.listed.emit(name, tools, error)
        except RuntimeError:  # the runner was deleted (Tandem is closing)
            pass

    def _track(self, call_id: str, fut: concurrent.futures.Future, server: str) -> None:
        def done(f):
            try:
                outcome = f.result()
            except concurrent.futures.CancelledError:
                outcome = ToolOutcome("unknown", "the MCP tools were shut down during the call")
            except BaseException as e:  # never expected: ToolHub's calls do not fail
                outcome = ToolOutcome("error", f"the call failed: {one_line(e) or type(e).__name__}")
            if outcome.kind in ("timeout", "crashed") and not self._closed:
                # its server stopped and starts again (`_lost` says so once its process is gone,
                # which may be after the model's next answer began): its tools stay offered
                self._restarting.add(server)
            try:
                self.finished.emit(call_id, outcome)
            except RuntimeError:
                pass

        fut.add_done_callback(done)

    def _lost(self, name: str, line: str) -> None:
        """A server stopped by itself (it crashed): said once, then started again, so its
        tools stay offered to the model (a server that cannot start keeps its error)."""
        self._emit_listed(name, [], line, restarting=not self._closed)
        if not self._closed:
            self._jobs.put(("reconnect", name))

    def _reconnect(self, name: str) -> None:
        cfg = self._configs.get(name)
        if cfg is None or name not in self._enabled or self.hub.connected(name):
            self._restarting.discard(name)
            return
        try:
            self._emit_listed(name, self.hub.connect(cfg, self.connect_timeout_s), "")
        except McpError as e:
            self._emit_listed(name, [], str(e))

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                if job[0] == "refresh":
                    self._refresh(job[1], job[2])
                elif job[0] == "reconnect":
                    self._reconnect(job[1])
                else:
                    self._restart_and_call(*job[1:])
            except Exception as e:  # a bug must not end the worker: say it where the user looks
                if job[0] == "call":
                    self.finished.emit(job[1], ToolOutcome("error", f"the call failed: {one_line(e)}"))

    def _refresh(self, generation: int, configs: list[ServerConfig]) -> None:
        if generation != self._generation:
            return  # a newer refresh is queued
        wanted = {c.name: c for c in configs if c.enabled}
        for name in self.hub.servers():
            if name not in wanted:
                self.hub.disconnect(name)
        for c in configs:
            if not c.enabled:
                self._emit_listed(c.name, [], "")
        pending = {}
        for c in wanted.values():
            try:
                pending[self.hub.submit_connect(c, self.connect_timeout_s)] = c.name
            except McpError as e:
                self._emit_listed(c.name, [], str(e))
        wait = self.connect_timeout_s + 15
        try:
            for fut in concurrent.futures.as_completed(pending, timeout=wait):
                self._report(pending[fut], fut)
        except concurrent.futures.TimeoutError:
            for fut, name in pending.items():
                if not fut.done():
                    fut.cancel()
                    self._emit_listed(name, [], f"the MCP server '{name}' did not answer within "
                                                f"{self.connect_timeout_s:g} s")

    def _report(self, name: str, fut: concurrent.futures.Future) -> None:
        try:
            tools = fut.result()
        except McpError as e:
            self._emit_listed(name, [], str(e))
        except Exception as e:
            self._emit_listed(name, [], f"the MCP server '{name}' could not be used: {one_line(e)}")
        else:
            self._emit_listed(name, tools, "")

    def _restart_and_call(self, call_id, server, key, arguments, timeout_s, max_chars) -> None:
        cfg = self._configs.get(server)
        outcome = None
        if cfg is None or not cfg.enabled:
            outcome = ToolOutcome("unknown", f"the MCP server '{server}' is switched off")
        elif not self.hub.connected(server):  # a reconnect may have started it meanwhile
            try:
                self._emit_listed(server, self.hub.connect(cfg, self.connect_timeout_s), "")
            except McpError as e:
                self._emit_listed(server, [], str(e))
                outcome = ToolOutcome("crashed", str(e))
        if outcome is None and self.hub.tool(key) is None:
            outcome = ToolOutcome("unknown", f"the MCP server '{server}' no longer offers {one_line(key, 64)}")
        if outcome is not None:
            self.finished.emit(call_id, outcome)
        else:
            self._track(call_id, self.hub.submit_call(key, arguments, timeout_s, max_chars), server)
