"""MCP tools through a remote server, in the real window: connected to a real llama-server
(the tiny pair over Gemma 4's real vocabulary and chat template, whose calls llama-server's
own Gemma 4 parser reads), the window offers the test MCP server's tools; a call the user
asks for comes back from the server as OpenAI `tool_calls`, waits on its card for the user's
yes, its result goes back to the server in OpenAI's shape, and the model answers after it.
A server that refuses tools says so in words, and the chat keeps the user's message."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from app.ui.dialogs.connections import Connection, save_connections

from ..support.llamaserver import LlamaServer, steering_flags
from ..support.window import TIMEOUT, make_window

# llama-server without Jinja: its built-in Gemma template for plain chat, no tool calling
NO_JINJA = ("--no-jinja", "--chat-template", "gemma")
SERVER = Path(__file__).resolve().parents[1] / "support" / "mcp_test_server.py"


def _window(qtbot, tmp_path, model, url: str):
    log = tmp_path / "calls.log"
    servers = [{"name": "notes", "transport": "stdio", "command": sys.executable, "args": [str(SERVER)],
                "env": {"MCP_TEST_LOG": str(log)}, "enabled": True}]
    win = make_window(qtbot, tmp_path, model, "", max_tokens=24, mcp_servers=servers, tool_timeout_s=10)
    win.log = log
    save_connections(win.settings, [Connection("big box", url)])
    win.load_remote("big box")
    qtbot.waitUntil(lambda: win.session.model_info is not None and bool(win.session.model_info.remote),
                    timeout=TIMEOUT)
    return win


def _ask(qtbot, win, tool: str, text: str):
    """Ask for `tool` by name (the Tools menu) and send."""
    qtbot.waitUntil(lambda: any(f"call {tool} " in a.text() for a in win.composer.tools_menu.actions()),
                    timeout=TIMEOUT)
    next(a for a in win.composer.tools_menu.actions() if f"call {tool} " in a.text()).trigger()
    win.input.setPlainText(text)
    win.send()


@pytest.fixture
def boxes(qtbot):
    """The texts of the window's message boxes, each read and closed (they are modal: a box
    left open would hold the test)."""
    said = []

    def answer_box():
        box = QApplication.activeModalWidget()
        if isinstance(box, QMessageBox) and box.isVisible():
            said.append(box.text())
            box.accept()

    watcher = QTimer()
    watcher.timeout.connect(answer_box)
    watcher.start(50)
    yield said
    watcher.stop()


@pytest.fixture
def steered_server(llama_server_bin, real_vocab, tmp_path):
    s = LlamaServer(llama_server_bin, real_vocab["target"], log=tmp_path / "llama-server.log",
                    extra=steering_flags(real_vocab["target"]))
    yield s
    s.stop()


def test_a_call_through_llama_server_waits_for_the_user_and_the_model_answers_after_it(
        qtbot, tmp_path, real_vocab, steered_server, boxes):
    win = _window(qtbot, tmp_path, real_vocab["target"], steered_server.url)
    try:
        assert win.session.model_info.engine == "llama-server"
        qtbot.waitUntil(lambda: win.composer.tools_btn.isEnabled(), timeout=TIMEOUT)  # offered on a server too
        assert win.session.tools_available() == ""

        _ask(qtbot, win, "today", "What day is it?")
        qtbot.waitUntil(lambda: win.session.tool_turn is not None or not win.session.busy, timeout=TIMEOUT)
        turn = win.session.tool_turn
        assert turn is not None, f"the server's answer made no call: {boxes}"
        card = win.chat_view.widget_for(turn.mid).tool_cards[turn.pending[0]]
        assert card.name == "today" and card.state == "asking"
        qtbot.waitUntil(lambda: card.buttons["once"].isVisible(), timeout=5000)
        assert not (win.log.exists() and win.log.read_text()) and win.session.busy  # nothing ran unasked

        card.buttons["once"].click()
        qtbot.waitUntil(lambda: not win.session.busy, timeout=TIMEOUT)
        assert win.log.read_text().splitlines() == ["today"] and card.state == "ok"
        caller, result, answer = win.store.messages(win.session.conversation_id)[-3:]
        assert [(c["name"], c["arguments"]) for c in caller.calls] == [("today", {})]
        assert caller.stats["engine"] == "llama-server" and caller.stats["finish_reason"] == "tool_calls"
        assert result.role == "tool" and result.content == "2026-12-02"
        # the server read the call and its result (in OpenAI's shape) and answered after them
        assert answer.role == "assistant" and answer.content and answer.stats["engine"] == "llama-server"
        assert answer.stats["finish_reason"] in ("stop", "length") and not boxes
    finally:
        win.close()


def test_a_server_that_refuses_tools_says_so_and_the_chat_keeps_the_message(
        qtbot, tmp_path, real_vocab, llama_server_bin, boxes):
    srv = LlamaServer(llama_server_bin, real_vocab["target"], log=tmp_path / "no-jinja.log", extra=NO_JINJA)
    win = _window(qtbot, tmp_path, real_vocab["target"], srv.url)
    try:
        _ask(qtbot, win, "today", "What day is it?")
        qtbot.waitUntil(lambda: bool(boxes) and not win.session.busy, timeout=TIMEOUT)
        # the tool was asked for by name: the hint names that call, the flag and the way on
        assert "asked for a call of today by name" in boxes[0] and "--jinja" in boxes[0], boxes
        assert "turn Tools off for this chat" in boxes[0], boxes
        msgs = win.store.messages(win.session.conversation_id)
        assert [m.role for m in msgs] == ["user"] and msgs[0].content == "What day is it?"  # nothing lost
        assert not (win.log.exists() and win.log.read_text())  # nothing ran

        # with Tools off the same server answers
        win.composer.tools_btn.setChecked(False)
        win.input.setPlainText("Then without tools")
        win.send()
        qtbot.waitUntil(lambda: not win.session.busy, timeout=TIMEOUT)
        last = win.store.messages(win.session.conversation_id)[-1]
        assert last.role == "assistant" and last.content and len(boxes) == 1
    finally:
        win.close()
        srv.stop()
