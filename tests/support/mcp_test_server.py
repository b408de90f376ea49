"""A small MCP server for the tests, written with the same `mcp` SDK Tandem's client uses.

    python tests/support/mcp_test_server.py              # stdio
    python tests/support/mcp_test_server.py --http PORT  # streamable HTTP on 127.0.0.1:PORT/mcp

Each call it receives is appended as one line to the file named by MCP_TEST_LOG (when set),
so a test can prove that a call did or did not reach the server.
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import MCPServer as _Server  # FastMCP's name in mcp 2
from mcp.server.mcpserver.exceptions import ToolError

NOTE = "Buy milk. Call Ada at noon."


def _log(line: str) -> None:
    path = os.environ.get("MCP_TEST_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def build():
    server = _Server("tandem-test")

    @server.tool(description="Add two integers and return the sum.")
    def add(a: int, b: int) -> str:
        _log(f"add {a} {b}")
        return str(a + b)

    @server.tool(description="Read one of the user's notes by name.")
    def read_note(name: str) -> str:
        _log(f"read_note {name}")
        return NOTE

    @server.tool(description="Wait for the given number of seconds, then answer.")
    async def slow(seconds: float) -> str:
        _log(f"slow {seconds}")
        await asyncio.sleep(seconds)
        return f"slept {seconds} s"

    @server.tool(description="Stop the server process in the middle of the call.")
    def crash() -> str:
        _log("crash")
        os._exit(3)

    @server.tool(description="Return n characters.")
    def huge(n: int) -> str:
        _log(f"huge {n}")
        return "x" * n

    @server.tool(description="Always fails.")
    def fail() -> str:
        _log("fail")
        # ToolError: the SDK passes its text on (any other exception is reported without it)
        raise ToolError("the note store is locked\nsecond line of detail")

    # Tools without free-form arguments, for calls the window forces on the synthetic model (its
    # free strings and numbers need not end: see tests/e2e/test_tools.py)
    @server.tool(description="Today's date.")
    def today() -> str:
        _log("today")
        return "2026-12-02"

    @server.tool(description="Take a minute before answering.")
    async def wait_a_minute() -> str:
        _log("wait_a_minute")
        await asyncio.sleep(60)
        return "done"

    @server.tool(description="A very long page.")
    def big_page() -> str:
        _log("big_page")
        return "lorem ipsum " * 20000

    return server


def main(argv: list[str]) -> None:
    if len(argv) == 2 and argv[0] == "--http":
        port = int(argv[1])
        build().run("streamable-http", host="127.0.0.1", port=port)
    elif not argv:
        build().run()
    else:
        sys.exit("usage: mcp_test_server.py [--http PORT]")


if __name__ == "__main__":
    main(sys.argv[1:])
