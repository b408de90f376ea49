"""MCP tools against a real MCP server written with the same SDK (tests/support/mcp_test_server.py),
over stdio and streamable HTTP: listing, calls, and every way a call can go wrong; the GUI's
runner and the Tools dialog, offscreen."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.tools.catalog import declarations, index_tools
from app.tools.config import McpError, ServerConfig, load_servers
from app.tools.hub import ToolHub
from app.core.settings import Settings
from engine.gemma4.call_grammar import check_tools
from engine.gemma4.calls import NAME

from ..support.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

SERVER = str(Path(__file__).resolve().parents[1] / "support" / "mcp_test_server.py")
CONNECT = 60  # seconds: a busy machine starts Python slowly


def stdio_config(log: Path, name: str = "test", enabled: bool = True) -> ServerConfig:
    return ServerConfig(name, "stdio", sys.executable, [SERVER], {"MCP_TEST_LOG": str(log)}, enabled=enabled)


def calls(log: Path) -> list[str]:
    return log.read_text("utf-8").splitlines() if log.exists() else []


@pytest.fixture
def log(tmp_path):
    return tmp_path / "calls.log"


@pytest.fixture
def hub():
    h = ToolHub()
    yield h
    h.close()


@pytest.fixture
def connected(hub, log):
    hub.connect(stdio_config(log), CONNECT)
    return hub


# ---- configuration ----------------------------------------------------------------------
def test_config_round_trip_and_untrusted_data():
    c = ServerConfig("files", "stdio", "npx", ["-y", "srv", "a b"], {"TOKEN": "x=y"})
    assert c.enabled is False  # nothing is on by default
    assert ServerConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    h = ServerConfig.from_dict({"name": "web", "transport": "http", "url": "https://example.org/mcp", "enabled": True})
    assert h.enabled and h.url == "https://example.org/mcp"
    bad = [[], {"name": ""}, {"name": "x", "transport": "tcp"}, {"name": "x"},  # stdio without a command
           {"name": "x", "command": "c", "args": "not a list"}, {"name": "x", "command": "c", "args": [1]},
           {"name": "x", "command": "c", "env": {"BAD KEY": "v"}}, {"name": "x", "command": "c", "env": {"K": 1}},
           {"name": "x", "command": "c", "enabled": "yes"}, {"name": "x" * 65, "command": "c"},
           {"name": "x", "transport": "http", "url": "ftp://host/x"},
           {"name": "x", "transport": "http", "url": "nohost"},
           {"name": "x", "command": "c" * 5000}, {"name": 3, "command": "c"}]
    for d in bad:
        with pytest.raises(ValueError) as e:
            ServerConfig.from_dict(d)
        assert "\n" not in str(e.value) and str(e.value)


def test_settings_keep_servers_and_report_bad_entries(tmp_path):
    path = tmp_path / "settings.json"
    s = Settings(path)
    assert s["mcp_servers"] == []
    s["mcp_servers"] = [stdio_config(tmp_path / "l").to_dict(), {"name": "broken", "transport": 7}]
    s.save()
    servers, problems = load_servers(Settings(path))
    assert [c.name for c in servers] == ["test"] and servers[0].args == [SERVER]
    assert len(problems) == 1 and "transport" in problems[0]


def test_tool_keys_are_valid_and_bad_tools_are_left_out():
    taken = {"add"}
    raw = [{"name": "add", "description": "d", "inputSchema": {"type": "object", "properties": {}}},
           {"name": "my tool!", "inputSchema": {"type": "object", "properties": {}}},
           {"name": "lister", "inputSchema": {"type": "array"}},  # not an object: no call can be written
           {"name": 7}, {"name": "plain"}]  # no schema: no arguments
    tools, notes = index_tools("my srv", raw, taken, room=128)
    assert [t.key for t in tools] == ["my_srv__add", "my_srv__my_tool_", "plain"]
    assert all(NAME.match(t.key) for t in tools)
    assert len(notes) == 2 and any("lister" in n for n in notes) and all("\n" not in n for n in notes)
    check_tools(declarations(tools))
    tools, notes = index_tools("s", [{"name": f"t{i}"} for i in range(5)], set(), room=3)
    assert len(tools) == 3 and len(notes) == 1


# ---- the hub over stdio -----------------------------------------------------------------
def test_tools_are_listed_and_calls_answer(connected, log):
    tools = connected.tools()
    assert {t.name for t in tools} == {"add", "read_note", "slow", "crash", "huge", "fail", "today", "wait_a_minute", "big_page"}
    assert all(t.server == "test" and t.key == t.name for t in tools)
    decls = check_tools(declarations(tools))
    add = next(d for d in decls if d["function"]["name"] == "add")
    assert set(add["function"]["parameters"]["properties"]) == {"a", "b"}
    assert "Add two integers" in add["function"]["description"]
    out = connected.call("add", {"a": 2, "b": 3})
    assert out.ok and out.kind == "ok" and out.text == "5"
    out = connected.call("read_note", {"name": "shopping"})
    assert out.ok and "Buy milk" in out.text
    assert calls(log) == ["add 2 3", "read_note shopping"]


def test_a_failing_tool_is_one_line(connected):
    out = connected.call("fail", {})
    assert out.kind == "error" and not out.ok
    assert "\n" not in out.text and "the note store is locked" in out.text and "fail" in out.text
    bad = connected.call("add", {"a": "two"})  # the server rejects the arguments
    assert bad.kind == "error" and "\n" not in bad.text
    assert connected.call("nosuch", {}).kind == "unknown"
    assert connected.call("add", "not an object").kind == "error"


@pytest.mark.slow  # waits out a call's time limit, then a restart
def test_a_tool_that_times_out_stops_its_server_to_start_it_again(connected, log):
    """Found by a user: a frozen server stayed frozen, every later call timing out too. A call
    that times out stops its server (said), and a later connect starts it again."""
    lost = []
    connected.on_lost = lambda name, line: lost.append((name, line))
    t = time.monotonic()
    out = connected.call("slow", {"seconds": 30}, timeout_s=2)
    took = time.monotonic() - t
    assert out.kind == "timeout" and "2 s" in out.text and "slow" in out.text and "stopped" in out.text
    assert 1.9 <= took < 8
    assert not connected.connected("test") and connected.call("add", {"a": 1, "b": 1}).kind == "unknown"
    wait_until(lambda: lost, 10, "the server's loss to be said")
    assert lost[0][0] == "test" and "did not answer within 2 s" in lost[0][1]
    connected.connect(stdio_config(log), CONNECT)
    assert connected.call("add", {"a": 1, "b": 1}).text == "2"


def test_a_crash_is_reported_at_once_and_the_server_starts_again(connected, log):
    lost = []
    connected.on_lost = lambda name, line: lost.append((name, line))
    t = time.monotonic()
    out = connected.call("crash", {}, timeout_s=60)
    assert time.monotonic() - t < 10  # well before the call's time limit
    assert out.kind == "crashed" and "'test'" in out.text and "exit code 3" in out.text and "\n" not in out.text
    assert connected.tools() == [] and not connected.connected("test")  # forgotten at once
    assert connected.call("add", {"a": 1, "b": 2}).kind == "unknown"
    tools = connected.connect(stdio_config(log), CONNECT)  # a later connect starts it again
    assert len(tools) == 9
    assert connected.call("add", {"a": 1, "b": 2}).text == "3"
    assert calls(log) == ["crash", "add 1 2"]


def test_a_result_too_large_says_its_size(connected):
    out = connected.call("huge", {"n": 5000}, max_chars=1000)
    assert out.kind == "too_large" and "5,000" in out.text and "1,000" in out.text and "huge" in out.text
    out = connected.call("huge", {"n": 800}, max_chars=1000)
    assert out.ok and out.text == "x" * 800


def test_two_servers_with_the_same_tools_get_distinct_keys(hub, log):
    hub.connect(stdio_config(log, "one"), CONNECT)
    hub.connect(stdio_config(log, "two"), CONNECT)
    keys = [t.key for t in hub.tools()]
    assert len(keys) == 18 and len(set(keys)) == 18 and "add" in keys and "two__add" in keys
    check_tools(declarations(hub.tools()))
    assert hub.call("two__add", {"a": 4, "b": 4}).text == "8"
    hub.disconnect("one")
    assert {t.server for t in hub.tools()} == {"two"}


def test_a_missing_program_is_one_line(hub):
    t = time.monotonic()
    with pytest.raises(McpError) as e:
        hub.connect(ServerConfig("nope", "stdio", "tandem-no-such-program-4711"), CONNECT)
    assert time.monotonic() - t < 5
    msg = str(e.value)
    assert "\n" not in msg and "'nope'" in msg and "tandem-no-such-program-4711" in msg


def test_a_server_that_exits_at_start_says_why(hub):
    script = "import sys; print('bad config file', file=sys.stderr); sys.exit(4)"
    cfg = ServerConfig("early", "stdio", sys.executable, ["-c", script])
    with pytest.raises(McpError) as e:
        hub.connect(cfg, CONNECT)
    msg = str(e.value)
    assert "\n" not in msg and "exit code 4" in msg and "bad config file" in msg


def test_a_silent_server_times_out_at_the_handshake(hub):
    cfg = ServerConfig("mute", "stdio", sys.executable, ["-c", "import time; time.sleep(60)"])
    t = time.monotonic()
    with pytest.raises(McpError) as e:
        hub.connect(cfg, timeout_s=2)
    assert time.monotonic() - t < 10
    assert str(e.value) == "the MCP server 'mute' did not answer within 2 s"


# ---- streamable HTTP --------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def http_server(tmp_path):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, SERVER, "--http", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "MCP_TEST_LOG": str(tmp_path / "http.log")})
    try:
        deadline = time.monotonic() + CONNECT
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                assert proc.poll() is None, "the HTTP test server exited"
                assert time.monotonic() < deadline, "the HTTP test server did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait(10)


def test_streamable_http(hub, http_server):
    tools = hub.connect(ServerConfig("web", "http", url=http_server, enabled=True), CONNECT)
    assert {t.name for t in tools} == {"add", "read_note", "slow", "crash", "huge", "fail", "today", "wait_a_minute", "big_page"}
    assert hub.call("add", {"a": 20, "b": 22}).text == "42"
    assert hub.call("fail", {}).kind == "error"
    out = hub.call("crash", {}, timeout_s=60)  # the whole HTTP server goes
    assert out.kind == "crashed" and "'web'" in out.text and "\n" not in out.text
    assert hub.tools() == []


def test_an_unreachable_address_is_one_line(hub):
    t = time.monotonic()
    with pytest.raises(McpError) as e:
        hub.connect(ServerConfig("gone", "http", url=f"http://127.0.0.1:{_free_port()}/mcp"), CONNECT)
    assert time.monotonic() - t < 15
    assert "could not be reached" in str(e.value) and "\n" not in str(e.value)


# ---- the GUI's runner -------------------------------------------------------------------
@pytest.fixture
def runner(qtbot):
    from app.session.tool_runner import ToolRunner

    r = ToolRunner(connect_timeout_s=CONNECT)
    yield r
    r.close()


def test_runner_lists_calls_and_switches_off(qtbot, runner, log):
    cfg = stdio_config(log)
    with qtbot.waitSignal(runner.listed, timeout=CONNECT * 1000) as sig:
        runner.refresh([cfg])
    name, tools, error = sig.args
    assert name == "test" and error == "" and len(tools) == 9
    check_tools(runner.declarations())
    assert runner.tool("add").server == "test"
    with qtbot.waitSignal(runner.finished, timeout=30000) as sig:
        runner.call("c1", "add", {"a": 5, "b": 6}, timeout_s=30)
    assert sig.args[0] == "c1" and sig.args[1].ok and sig.args[1].text == "11"

    cfg.enabled = False  # switched off: its tools are gone at once, and nothing reaches it
    with qtbot.waitSignal(runner.listed, timeout=30000) as sig:
        runner.refresh([cfg])
    assert sig.args == ["test", [], ""]
    assert runner.declarations() == [] and runner.tool("add") is None
    with qtbot.waitSignal(runner.finished, timeout=5000) as sig:
        runner.call("c2", "add", {"a": 1, "b": 1})
    assert sig.args[0] == "c2" and sig.args[1].kind == "unknown"
    assert calls(log) == ["add 5 6"]


def test_runner_restarts_a_server_that_crashed(qtbot, runner, log):
    with qtbot.waitSignal(runner.listed, timeout=CONNECT * 1000):
        runner.refresh([stdio_config(log)])
    done, listed = [], []
    runner.finished.connect(lambda cid, out: done.append((cid, out)))
    runner.listed.connect(lambda name, tools, error: listed.append((name, tools, error)))
    runner.call("c1", "crash", {})
    qtbot.waitUntil(lambda: bool(done and listed), timeout=30000)
    assert done[0][0] == "c1" and done[0][1].kind == "crashed"
    assert listed[0][0] == "test" and listed[0][1] == [] and "exit code 3" in listed[0][2]  # for the dialog
    # its tools stay offered while it starts again (the model's next answer may call them)
    assert len(runner.declarations()) == 9 and runner.tool("add") is not None
    with qtbot.waitSignal(runner.finished, timeout=CONNECT * 1000) as sig:
        runner.call("c2", "add", {"a": 2, "b": 2})  # its server is still switched on: started again
    assert sig.args[1].text == "4"


@pytest.mark.slow  # waits out a call's time limit, then a restart
def test_runner_restarts_a_server_whose_call_timed_out(qtbot, runner, log):
    with qtbot.waitSignal(runner.listed, timeout=CONNECT * 1000):
        runner.refresh([stdio_config(log)])
    done, listed = [], []
    runner.finished.connect(lambda cid, out: done.append((cid, out)))
    runner.listed.connect(lambda name, tools, error: listed.append((name, tools, error)))
    runner.call("c1", "slow", {"seconds": 30}, timeout_s=2)
    qtbot.waitUntil(lambda: bool(done and listed), timeout=30000)
    assert done[0][1].kind == "timeout" and "starts again" in done[0][1].text
    assert listed[0][0] == "test" and "did not answer within 2 s" in listed[0][2]  # said where servers are listed
    with qtbot.waitSignal(runner.finished, timeout=CONNECT * 1000) as sig:
        runner.call("c2", "add", {"a": 2, "b": 3})  # started again, not frozen
    assert sig.args[1].text == "5"


def test_runner_reports_a_server_that_cannot_start(qtbot, runner):
    with qtbot.waitSignal(runner.listed, timeout=CONNECT * 1000) as sig:
        runner.refresh([ServerConfig("nope", "stdio", "tandem-no-such-program-4711", enabled=True)])
    assert sig.args[0] == "nope" and sig.args[1] == [] and "tandem-no-such-program-4711" in sig.args[2]
    assert runner.error("nope") == sig.args[2]


# ---- the Tools dialog -------------------------------------------------------------------
def test_tools_dialog_adds_switches_on_and_saves(qtbot, runner, tmp_path, log):
    from PySide6.QtWidgets import QDialog, QDialogButtonBox

    from app.ui.dialogs.tools_dialog import ServerEditor, ToolsDialog

    path = tmp_path / "settings.json"
    settings = Settings(path)
    dlg = ToolsDialog(settings, runner)
    qtbot.addWidget(dlg)
    dlg.show()
    assert dlg.tree.objectName() == "mcp_servers" and dlg.tree.topLevelItemCount() == 0

    ed = ServerEditor(None, set(), dlg)
    qtbot.addWidget(ed)
    ed.name.setText("notes")
    ed.command.setText(sys.executable)
    ed.args.setText(shlex.join([SERVER]))
    ed.env.setPlainText(f"MCP_TEST_LOG={log}\n")
    assert ed.problem() == ""
    ed.save()
    assert ed.result() == QDialog.Accepted and ed.config.enabled is False  # new servers start switched off
    dlg.add_config(ed.config)
    assert dlg.status("notes") == "Off" and dlg.tools_shown("notes") == []

    dlg.set_enabled("notes", True)
    assert dlg.status("notes") == "Connecting…"  # the dialog did not wait for the server
    qtbot.waitUntil(lambda: bool(dlg.tools_shown("notes")), timeout=CONNECT * 1000)
    assert set(dlg.tools_shown("notes")) == {"add", "read_note", "slow", "crash", "huge", "fail", "today", "wait_a_minute", "big_page"}
    assert dlg.status("notes") == "9 tools"
    assert calls(log) == []  # listing runs nothing

    dlg.buttons.button(QDialogButtonBox.Ok).click()
    assert dlg.result() == QDialog.Accepted
    again = Settings(path)  # as after a restart
    servers, problems = load_servers(again)
    assert problems == [] and len(servers) == 1
    s = servers[0]
    assert (s.name, s.transport, s.command, s.args, s.env, s.enabled) == (
        "notes", "stdio", sys.executable, [SERVER], {"MCP_TEST_LOG": str(log)}, True)
    assert runner.tool("add") is not None


def test_tools_dialog_shows_an_error_and_cancel_reverts(qtbot, runner, tmp_path):
    from app.ui.dialogs.tools_dialog import ToolsDialog

    settings = Settings(tmp_path / "settings.json")
    settings["mcp_servers"] = [ServerConfig("nope", "stdio", "tandem-no-such-program-4711").to_dict()]
    dlg = ToolsDialog(settings, runner)
    qtbot.addWidget(dlg)
    assert dlg.status("nope") == "Off"
    dlg.set_enabled("nope", True)
    qtbot.waitUntil(lambda: dlg.status("nope") == "Not available", timeout=CONNECT * 1000)
    item = dlg.server_item("nope")
    assert item.childCount() == 1 and "tandem-no-such-program-4711" in item.child(0).text(0)
    dlg.reject()
    assert settings["mcp_servers"][0]["enabled"] is False


def test_server_editor_says_what_is_wrong(qtbot):
    from app.ui.dialogs.tools_dialog import ServerEditor

    ed = ServerEditor(None, {"taken"}, None)
    qtbot.addWidget(ed)
    ed.name.setText("taken")
    ed.command.setText("prog")
    assert "already" in ed.problem()
    ed.name.setText("fine")
    ed.args.setText('"unclosed')
    assert "arguments" in ed.problem()
    ed.args.setText("-v")
    ed.env.setPlainText("JUST_A_WORD")
    assert "line 1" in ed.problem()
    ed.env.setPlainText("# a comment\nKEY=a=b\n")
    assert ed.problem() == "" and ed.build().env == {"KEY": "a=b"}
    ed.kind.setCurrentIndex(1)  # HTTP
    ed.url.setText("ftp://example.org")
    assert "http" in ed.problem()
    ed.url.setText("http://127.0.0.1:8000/mcp")
    c = ed.build()
    assert c.transport == "http" and c.command == "" and c.env == {}
