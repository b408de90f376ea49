"""The main window's MCP tools: the runner of the servers the user switched on (started on
first need), the composer's Tools switch and menu, and the tool the user asks the next answer
to call. A part of `MainWindow` (a mixin: the window holds the composer and the session), kept
in its own module."""

from __future__ import annotations


class WindowTools:
    """MCP tools of MainWindow."""

    def _start_tools(self) -> None:
        """The MCP servers the user switched on (none by default) start in the background; with
        none on, the MCP SDK is not even imported (half a second less at start) until Tools opens."""
        self.tool_runner = None
        c = self.composer
        c.tools_toggled.connect(self._tools_toggled)
        c.force_tool.connect(self._force_tool)
        if any(isinstance(d, dict) and d.get("enabled") is True for d in self.settings["mcp_servers"]):
            self._tool_runner()

    def _tool_runner(self):
        """The runner of the MCP servers, started on first need with the saved servers."""
        if self.tool_runner is None:
            from app.tools.config import load_servers
            from app.session.tool_runner import ToolRunner

            self.tool_runner = ToolRunner(parent=self)
            self.session.set_tool_runner(self.tool_runner)
            self.tool_runner.listed.connect(lambda *_: self._update_tools())
            servers, problems = load_servers(self.settings)
            for line in problems:
                self.statusBar().showMessage(line, 8000)
            self.tool_runner.refresh(servers)
        return self.tool_runner

    def _update_tools(self) -> None:
        s, runner = self.session, getattr(self, "tool_runner", None)
        tools = [t for t in runner.hub.tools() if runner.tool(t.key) is not None] if runner else []
        self.composer.show_tools(s.tools_available(), s.tools_on(), tools, s.busy, s.force_tool)

    def _tools_toggled(self, on: bool) -> None:
        self.session.set_tools_on(on)
        self.statusBar().showMessage("Tools on in this chat: you approve each call" if on else
                                     "Tools off in this chat", 5000)

    def _force_tool(self, key: str) -> None:
        if not self.session.tools_on():
            self.session.set_tools_on(True)
        self.session.force_tool = key
        self._update_tools()  # the switch on, the tool ticked in its menu
        self.statusBar().showMessage(f"The next answer calls {key} (you still approve the call)", 8000)
