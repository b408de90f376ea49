"""Settings → Tools: the MCP servers whose tools the model may ask to use.

Each server has a switch, and every server starts switched off. Switching one on connects it
at once (off the GUI thread, through `ToolRunner`) so its tools, or the one line saying why it
cannot be used, show while the dialog is open. OK keeps the list in the settings; Cancel puts
the servers back as they were.
"""

from __future__ import annotations

import shlex

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFormLayout, QHBoxLayout, QLabel, QLineEdit,
                               QMessageBox, QPlainTextEdit, QPushButton, QTreeWidget, QTreeWidgetItem, QVBoxLayout)

from app.tools.catalog import ToolInfo
from app.tools.config import ServerConfig, load_servers, one_line
from app.ui.safe_text import message

KINDS = (("stdio", "Program (stdio)"), ("http", "Web address (streamable HTTP)"))


def parse_env(text: str) -> dict[str, str]:
    """KEY=VALUE lines (blank lines and # comments skipped); ValueError naming the bad line."""
    env = {}
    for i, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, eq, value = line.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"line {i} of the environment is not KEY=VALUE")
        env[key.strip()] = value
    return env


class ServerEditor(QDialog):
    """Add or edit one MCP server."""

    def __init__(self, config: ServerConfig | None, taken: set[str], parent=None):
        super().__init__(parent)
        self.setWindowTitle("MCP server")
        self.setMinimumWidth(560)
        self.taken = taken
        self.original = config
        self.config: ServerConfig | None = None  # the result, after Save
        c = config or ServerConfig("")
        form = QFormLayout()
        self.name = QLineEdit(c.name)
        self.name.setObjectName("mcp_name")
        self.name.setPlaceholderText("e.g. files")
        self.kind = QComboBox()
        self.kind.setObjectName("mcp_kind")
        for value, label in KINDS:
            self.kind.addItem(label, value)
        self.kind.setCurrentIndex(0 if c.transport == "stdio" else 1)
        self.command = QLineEdit(c.command)
        self.command.setObjectName("mcp_command")
        self.command.setPlaceholderText("e.g. npx, uvx or /path/to/server")
        self.args = QLineEdit(shlex.join(c.args))
        self.args.setObjectName("mcp_args")
        self.args.setPlaceholderText("e.g. -y @modelcontextprotocol/server-filesystem /home/me/Documents")
        self.args.setToolTip("Split into words as a shell would (quotes group words), but no shell runs the "
                             "program: nothing is expanded (no ~, no $VARIABLES, no wildcards).")
        self.env = QPlainTextEdit("\n".join(f"{k}={v}" for k, v in c.env.items()))
        self.env.setObjectName("mcp_env")
        self.env.setPlaceholderText("KEY=VALUE, one a line (optional)")
        self.env.setFixedHeight(72)
        self.url = QLineEdit(c.url)
        self.url.setObjectName("mcp_url")
        self.url.setPlaceholderText("http://127.0.0.1:8000/mcp")
        form.addRow("Name", self.name)
        form.addRow("Kind", self.kind)
        form.addRow("Command", self.command)
        form.addRow("Arguments", self.args)
        form.addRow("Environment", self.env)
        form.addRow("Address", self.url)
        self.form = form
        lay = QVBoxLayout(self)
        lay.addLayout(form)
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: gray")
        lay.addWidget(self.note)
        buttons = QDialogButtonBox(QDialogButtonBox.Save | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.save)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.kind.currentIndexChanged.connect(self._kind_changed)
        self._kind_changed()

    def _kind_changed(self) -> None:
        stdio = self.kind.currentData() == "stdio"
        for w in (self.command, self.args, self.env):
            self.form.setRowVisible(w, stdio)
        self.form.setRowVisible(self.url, not stdio)
        self.note.setText("Tandem starts the program (without a shell) and talks to it over its input and output. "
                          "Environment values are kept in Tandem's settings file as plain text." if stdio else
                          "A server already running that speaks MCP's streamable HTTP.")

    def build(self) -> ServerConfig:
        """The config the fields describe, or ValueError with one line."""
        name = self.name.text().strip()
        if name in self.taken:
            raise ValueError(f"there is already an MCP server named '{name}'")
        try:
            args = shlex.split(self.args.text())
        except ValueError as e:
            raise ValueError(f"the arguments cannot be read: {e}") from None
        stdio = self.kind.currentData() == "stdio"
        return ServerConfig.from_dict({
            "name": name, "transport": self.kind.currentData(),
            "command": self.command.text().strip() if stdio else "", "args": args if stdio else [],
            "env": parse_env(self.env.toPlainText()) if stdio else {}, "url": "" if stdio else self.url.text().strip(),
            "enabled": self.original.enabled if self.original else False})  # a new server starts switched off

    def problem(self) -> str:
        """What keeps the fields from being saved ('' when nothing)."""
        try:
            self.build()
        except ValueError as e:
            return str(e)
        return ""

    def save(self) -> None:
        try:
            self.config = self.build()
        except ValueError as e:
            message(self, QMessageBox.Warning, "MCP server", str(e))
            return
        self.accept()


class ToolsDialog(QDialog):
    """The MCP servers, each with its switch and its tools; Add, Edit and Remove."""

    def __init__(self, settings, runner, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Tools")
        self.setMinimumSize(640, 420)
        self.settings, self.runner = settings, runner
        self.configs, problems = load_servers(settings)
        self.saved = [ServerConfig.from_dict(c.to_dict()) for c in self.configs]  # what Cancel goes back to
        self.state: dict[str, tuple[list[ToolInfo], str]] = {}  # name -> (tools, error) as last listed
        self._building = False
        lay = QVBoxLayout(self)
        intro = QLabel("Tools come from MCP servers: programs Tandem starts, or web addresses. The model may ask to "
                       "use the tools of a server you switch on, and Tandem asks you before every call. Every server "
                       "starts switched off.")
        intro.setWordWrap(True)
        lay.addWidget(intro)
        self.tree = QTreeWidget()
        self.tree.setObjectName("mcp_servers")
        self.tree.setColumnCount(2)
        self.tree.setHeaderLabels(["Server", "Tools"])
        self.tree.setColumnWidth(0, 220)
        self.tree.itemChanged.connect(self._item_changed)
        self.tree.itemDoubleClicked.connect(lambda item, _col: self.edit() if item.parent() is None else None)
        lay.addWidget(self.tree, 1)
        self.problems = QLabel("\n".join(problems))
        self.problems.setObjectName("mcp_problems")
        self.problems.setTextFormat(Qt.PlainText)
        self.problems.setWordWrap(True)
        self.problems.setVisible(bool(problems))
        lay.addWidget(self.problems)
        row = QHBoxLayout()
        self.add_btn, self.edit_btn, self.remove_btn = (QPushButton(t) for t in ("Add…", "Edit…", "Remove"))
        for b, name, slot in ((self.add_btn, "mcp_add", self.add), (self.edit_btn, "mcp_edit", self.edit),
                              (self.remove_btn, "mcp_remove", self.remove)):
            b.setObjectName(name)
            b.clicked.connect(slot)
            row.addWidget(b)
        row.addStretch(1)
        lay.addLayout(row)
        self.buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        self.buttons.setObjectName("mcp_buttons")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        lay.addWidget(self.buttons)
        runner.listed.connect(self._listed)
        for c in self.configs:  # what is known already; the refresh below brings the rest
            tools = [t for t in runner.hub.tools() if t.server == c.name]
            if c.enabled and (tools or runner.error(c.name)):
                self.state[c.name] = (tools, runner.error(c.name))
        self.rebuild()
        if any(c.enabled for c in self.configs):
            runner.refresh(self.configs)  # restarts any that stopped since

    # -- what the tests and the window read --
    def server_item(self, name: str) -> QTreeWidgetItem | None:
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item.data(0, Qt.UserRole) == name:
                return item
        return None

    def tools_shown(self, name: str) -> list[str]:
        """The tool names shown under a server."""
        item = self.server_item(name)
        if item is None:
            return []
        return [item.child(i).data(0, Qt.UserRole) for i in range(item.childCount())
                if item.child(i).data(0, Qt.UserRole)]

    def status(self, name: str) -> str:
        item = self.server_item(name)
        return item.text(1) if item is not None else ""

    def set_enabled(self, name: str, on: bool) -> None:
        """Flip a server's switch, as a click on it does."""
        item = self.server_item(name)
        if item is not None:
            item.setCheckState(0, Qt.Checked if on else Qt.Unchecked)

    # -- the list --
    def rebuild(self) -> None:
        self._building = True
        current = self._selected_name()
        self.tree.clear()
        for c in self.configs:
            item = QTreeWidgetItem([c.name, ""])
            item.setData(0, Qt.UserRole, c.name)
            item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
            item.setCheckState(0, Qt.Checked if c.enabled else Qt.Unchecked)
            item.setToolTip(0, ("Program: " if c.transport == "stdio" else "Address: ") + c.describe())
            self.tree.addTopLevelItem(item)
            self._fill(item, c)
            if c.name == current:
                self.tree.setCurrentItem(item)
        self._building = False

    def _fill(self, item: QTreeWidgetItem, c: ServerConfig) -> None:
        was, self._building = self._building, True
        item.takeChildren()
        tools, error = self.state.get(c.name, ([], ""))
        if not c.enabled:
            item.setText(1, "Off")
        elif error:
            item.setText(1, "Not available")
            line = QTreeWidgetItem([one_line(error)])
            line.setToolTip(0, error)
            item.addChild(line)
            line.setFirstColumnSpanned(True)
        elif c.name not in self.state:
            item.setText(1, "Connecting…")
        else:
            item.setText(1, f"{len(tools)} tool{'s' if len(tools) != 1 else ''}")
            for t in tools:
                child = QTreeWidgetItem([t.key, one_line(t.description)])
                child.setData(0, Qt.UserRole, t.key)
                child.setToolTip(1, t.description[:2000])
                item.addChild(child)
            for note in self.runner.hub.notes(c.name):
                item.addChild(QTreeWidgetItem([note]))
        item.setExpanded(c.enabled)
        self._building = was

    def _config(self, name: str) -> ServerConfig | None:
        return next((c for c in self.configs if c.name == name), None)

    def _selected_name(self) -> str | None:
        item = self.tree.currentItem()
        while item is not None and item.parent() is not None:
            item = item.parent()
        return item.data(0, Qt.UserRole) if item is not None else None

    def _item_changed(self, item: QTreeWidgetItem, column: int) -> None:
        if self._building or item.parent() is not None or column != 0:
            return
        c = self._config(item.data(0, Qt.UserRole))
        on = item.checkState(0) == Qt.Checked
        if c is None or c.enabled == on:
            return
        c.enabled = on
        self.state.pop(c.name, None)  # "Connecting…" until the runner says
        self._fill(item, c)
        self.runner.refresh(self.configs)

    def _listed(self, name: str, tools: list, error: str) -> None:
        c = self._config(name)
        if c is None:
            return
        if c.enabled:
            self.state[name] = (list(tools), error)
        item = self.server_item(name)
        if item is not None:
            self._fill(item, c)

    # -- Add, Edit, Remove --
    def add(self) -> None:
        ed = ServerEditor(None, {c.name for c in self.configs}, self)
        if ed.exec() == QDialog.Accepted:
            self.add_config(ed.config)

    def add_config(self, config: ServerConfig) -> None:
        self.configs.append(config)
        self.rebuild()
        if config.enabled:
            self.runner.refresh(self.configs)

    def edit(self) -> None:
        c = self._config(self._selected_name() or "")
        if c is None:
            return
        ed = ServerEditor(c, {x.name for x in self.configs} - {c.name}, self)
        if ed.exec() == QDialog.Accepted:
            self.replace_config(c.name, ed.config)

    def replace_config(self, name: str, config: ServerConfig) -> None:
        self.configs = [config if c.name == name else c for c in self.configs]
        self.state.pop(name, None)
        self.state.pop(config.name, None)
        self.rebuild()
        self.runner.refresh(self.configs)

    def remove(self) -> None:
        name = self._selected_name()
        if name is None:
            return
        self.configs = [c for c in self.configs if c.name != name]
        self.state.pop(name, None)
        self.rebuild()
        self.runner.refresh(self.configs)

    # -- OK and Cancel --
    def accept(self) -> None:
        self.settings["mcp_servers"] = [c.to_dict() for c in self.configs]
        self.settings.save()
        self.runner.refresh(self.configs)
        super().accept()

    def reject(self) -> None:
        self.runner.refresh(self.saved)  # back to the servers as they were
        super().reject()

    def done(self, result: int) -> None:
        try:
            self.runner.listed.disconnect(self._listed)
        except (RuntimeError, TypeError):
            pass
        super().done(result)


def open_tools_dialog(settings, runner, parent=None) -> bool:
    """Settings → Tools; True when the user pressed OK (the servers were saved and refreshed)."""
    return ToolsDialog(settings, runner, parent).exec() == QDialog.Accepted
