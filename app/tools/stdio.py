"""Tandem's own stdio transport for MCP servers: the same protocol as the SDK's `stdio_client`
(one JSON-RPC message a line), but it keeps the process at hand, so a server that dies mid-call
is reported at once with its exit code and the last line it wrote to stderr; a server's lines
are bounded, and stopping it stops its children too."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from collections import deque
from contextlib import asynccontextmanager

import anyio
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage
from mcp_types import jsonrpc_message_adapter as _adapter

from .config import LINE, McpError, ServerConfig, one_line

MAX_MESSAGE_BYTES = 32 * 1024 * 1024  # one JSON-RPC line from a stdio server


def _parse(line: str):
    return _adapter.validate_json(line, by_name=False)


def _dump(message) -> str:
    return message.model_dump_json(by_alias=True, exclude_unset=True)


class StdioTransport:
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
