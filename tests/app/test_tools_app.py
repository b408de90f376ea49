"""MCP tools in the real window, against the small stdio MCP server the tests start (written
with the same SDK): the tools listed; a call the user asks for (forced through the engine's
call grammar, since the synthetic model would not choose one) shown with its arguments and
held until the user answers; allowed, denied, always allowed, timed out, its server killed
mid-call, its result too large — each a card in the chat and one line to the model, which then
answers; the chat reopens with its calls and exports them. Nothing runs before approval."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from app.core.settings import Settings
from app.core.store import Store
from app.ui.window import MainWindow
from engine.models.library import Library

from ..support.window import TIMEOUT, make_window

SERVER = Path(__file__).resolve().parents[1] / "support" / "mcp_test_server.py"


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def win(qtbot, tmp_path, gemma4_tools):
    log = tmp_path / "calls.log"
    servers = [{"name": "notes", "transport": "stdio", "command": sys.executable, "args": [str(SERVER)],
                "env": {"MCP_TEST_LOG": str(log)}, "enabled": True}]
    w = make_window(qtbot, tmp_path, gemma4_tools["target"], gemma4_tools[0.7], max_tokens=40,
                    mcp_servers=servers, tool_timeout_s=3)
    w.log = log
    qtbot.waitUntil(lambda: w.composer.tools_btn.isEnabled(), timeout=TIMEOUT)
    yield w
    if w.isVisible():
        w.close()


def _ask(qtbot, win, tool: str, text: str = "Use the tool, please"):
    """Ask for `tool` by name (the Tools menu), send, and wait for the call's card."""
    acts = {a.text().split("call ")[1].split()[0]: a for a in win.composer.tools_menu.actions()}
    acts[tool].trigger()
    win.input.setPlainText(text)
    win.send()
    qtbot.waitUntil(lambda: win.session.tool_turn is not None or not win.session.busy, timeout=TIMEOUT)
    turn = win.session.tool_turn
    assert turn is not None, "the answer made no call"
    return win.chat_view.widget_for(turn.mid).tool_cards[turn.pending[0]]


def _done(qtbot, win):
    qtbot.waitUntil(lambda: not win.session.busy, timeout=TIMEOUT)
    return win.store.messages(win.session.conversation_id)


def test_a_call_waits_for_the_user_and_the_model_answers_after_it(qtbot, win, tmp_path):
    menu = [a.text() for a in win.composer.tools_menu.actions()]
    assert any("call today  (notes)" in t for t in menu) and any("call crash" in t for t in menu)
    assert not win.composer.tools_btn.isChecked()  # no tool is on by default

    card = _ask(qtbot, win, "today", "What day is it?")
    assert win.composer.tools_btn.isChecked() and card.state == "asking" and card.name == "today"
    # Qt shows a widget added to a shown window on its next event loop pass
    qtbot.waitUntil(lambda: card.buttons["once"].isVisible(), timeout=5000)
    assert "Waiting for your approval" in card.status.text()
    qtbot.wait(500)  # room for a call that wrongly runs unasked: an absence has no event to wait on
    assert _calls(win.log) == [] and win.session.busy  # nothing runs before the user's yes
    card.buttons["once"].click()
    msgs = _done(qtbot, win)
    assert _calls(win.log) == ["today"] and card.state == "ok" and card.fold.isVisible()
    card.fold.click()
    assert card.result.toPlainText() == "2026-12-02"
    caller, result, answer = msgs[-3:]
    assert caller.calls[0]["name"] == "today" and result.role == "tool" and result.content == "2026-12-02"
    assert answer.role == "assistant" and answer.stats["finish_reason"] in ("stop", "length")
    history = win.session.history()
    assert history[-2] == {"role": "tool", "content": "2026-12-02", "tool_call_id": caller.calls[0]["id"],
                           "name": "today"}
    assert history[-3]["tool_calls"][0]["function"] == {"name": "today", "arguments": {}}

    # denied: one line to the model, nothing reaches the server, and the model goes on
    card = _ask(qtbot, win, "today")
    card.buttons["deny"].click()
    msgs = _done(qtbot, win)
    assert _calls(win.log) == ["today"] and card.state == "denied"
    assert msgs[-2].content == "The call did not run: you denied this call." and msgs[-1].role == "assistant"

    # always allowed in this chat: the next call of it runs without asking
    card = _ask(qtbot, win, "today")
    card.buttons["always"].click()
    _done(qtbot, win)
    assert win.session.chat_options().allowed_tools == ("today",)
    asked = []
    win.session.tool_asked.connect(lambda: asked.append(True))
    [a for a in win.composer.tools_menu.actions() if "call today" in a.text()][0].trigger()
    win.input.setPlainText("Once more")
    win.send()
    msgs = _done(qtbot, win)
    assert not asked and msgs[-2].role == "tool" and msgs[-2].content == "2026-12-02"
    assert _calls(win.log) == ["today"] * 3

    # history and export keep the calls and their results
    cid = win.session.conversation_id
    md = win.store.export_markdown(cid)
    assert "**Gemma called** `today`" in md and "**Tool result** (`today`, denied)" in md and "2026-12-02" in md
    exported = json.loads(win.store.export_json(cid))["messages"]
    calls = [m for m in exported if m.get("tool_calls")]
    assert calls[0]["tool_calls"][0]["function"] == {"name": "today", "arguments": "{}"}
    assert [m["outcome"] for m in exported if m["role"] == "tool"] == ["ok", "denied", "ok", "ok"]
    win.close()

    w2 = MainWindow(Settings(tmp_path / "settings.json"), Store(tmp_path / "chats.sqlite3"),
                    Library(tmp_path / "models.json"))
    qtbot.addWidget(w2)
    w2.open_conversation(cid)
    cards = [c for w in w2.chat_view.widgets() for c in w.tool_cards.values()]
    assert [c.state for c in cards] == ["ok", "denied", "ok", "ok"] and "denied" in cards[1].status.text()
    assert all(c.title.text() == "⚙ today  ·  notes" for c in cards)  # each names its server, as before
    # the chat's Tools switch and its "always allowed" tool survive the restart
    assert w2.session.tools_on() and w2.session.chat_options().allowed_tools == ("today",)
    assert w2.settings["mcp_servers"][0]["enabled"] is True
    w2.tool_runner.close()
    w2.close()


def test_timeout_crash_and_a_result_too_large_are_one_line_and_the_chat_goes_on(qtbot, win):
    engine, offered = win.session.worker.engine, []
    real = engine.chat

    def chat(messages, *a, **k):  # the tools each answer is given (the real engine still answers)
        offered.append(sorted(json.dumps(d)[:200] for d in k.get("tools") or []))
        return real(messages, *a, **k)

    engine.chat = chat
    card = _ask(qtbot, win, "wait_a_minute")
    card.buttons["once"].click()
    msgs = _done(qtbot, win)
    assert card.state == "timeout" and "3 s" in card.status.text()
    assert msgs[-2].content.startswith("The call failed: ") and msgs[-1].role == "assistant"
    assert "starts again" in card.status.text()  # it may be frozen: its server was stopped
    # the answer after the failed call still had the server's tools, though it was starting
    # again (without them Gemma's calls came back as raw markup)
    assert len(offered) == 2 and offered[1] == offered[0] and offered[0], offered

    # the stopped server starts again by itself: its tools are offered again
    qtbot.waitUntil(lambda: any("call crash" in a.text() for a in win.composer.tools_menu.actions()),
                    timeout=TIMEOUT)
    card = _ask(qtbot, win, "crash")
    card.buttons["once"].click()
    msgs = _done(qtbot, win)
    assert card.state == "crashed" and "notes" in card.status.text() and "\n" not in card.status.text()
    assert msgs[-1].role == "assistant" and msgs[-1].content is not None

    # the crashed server starts again by itself: its tools stay offered
    qtbot.waitUntil(lambda: any("call big_page" in a.text() for a in win.composer.tools_menu.actions()),
                    timeout=TIMEOUT)
    card = _ask(qtbot, win, "big_page")
    card.buttons["once"].click()
    msgs = _done(qtbot, win)
    assert card.state == "too_large" and "characters" in card.status.text()
    assert _calls(win.log) == ["wait_a_minute", "crash", "big_page"]

    # Stop while a call waits: nothing runs, the chat stays as it was
    card = _ask(qtbot, win, "today")
    win.stop()
    assert not win.session.busy and card.state == "stopped"
    assert win.store.messages(win.session.conversation_id)[-1].role == "tool"
    assert _calls(win.log) == ["wait_a_minute", "crash", "big_page"]


def test_no_tool_is_on_by_default(qtbot, tmp_path, gemma4_tools):
    w = make_window(qtbot, tmp_path, gemma4_tools["target"], gemma4_tools[0.7])
    assert w.tool_runner is None and w.session.tool_declarations() == []  # no server, and the SDK not loaded
    assert not w.composer.tools_btn.isEnabled() and "no MCP server is switched on" in w.composer.tools_btn.toolTip()
    w.close()


def test_the_models_make_test_models_writes_can_try_tools(qtbot, tmp_path):
    """They stand in for Gemma 4, so they carry its real chat template: the Tools switch is on
    offer (with Tandem's simple template it said "this model's chat template has no tool calling")."""
    import subprocess

    subprocess.run([sys.executable, "-m", "app.main", "make-test-models", str(tmp_path / "models")], check=True,
                   capture_output=True, timeout=300)
    servers = [{"name": "notes", "transport": "stdio", "command": sys.executable, "args": [str(SERVER)],
                "enabled": True}]
    w = make_window(qtbot, tmp_path, tmp_path / "models" / "tiny-target.gguf",
                    tmp_path / "models" / "tiny-drafter-a1.gguf", mcp_servers=servers)
    qtbot.waitUntil(lambda: w.composer.tools_btn.isEnabled(), timeout=TIMEOUT)  # shown once its server is up
    assert w.session.tools_available() == ""
    w.close()


def test_the_context_meter_counts_the_prompt_the_engine_reads(qtbot, win, tmp_path, monkeypatch):
    """Tool declarations, the system prompt and an attached file are in the meter before the
    first message, and while a reply runs the meter equals the prompt the engine decoded."""
    from PySide6.QtWidgets import QFileDialog

    shown = []
    win.session.context.connect(lambda used, n_ctx: shown.append(used))
    win.composer.tools_btn.setChecked(True)
    qtbot.waitUntil(lambda: bool(shown) and shown[-1] > 0, timeout=TIMEOUT)  # tools alone take room
    parts = win.session.context_parts
    assert parts.tools == shown[-1] - parts.system - parts.conversation > 100
    assert "tool declarations" in win.context_label.toolTip()
    assert win.context_label.text().startswith(f"context: {shown[-1]:,} / ")

    win.session.set_system_prompt("Answer in one short line.")
    qtbot.waitUntil(lambda: win.session.context_parts.system > 0, timeout=TIMEOUT)
    src = tmp_path / "notes.md"
    src.write_text("# Notes\n" + "keep the areas positive\n" * 20)
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(src)], ""))
    win.composer.attach_files()
    qtbot.waitUntil(lambda: len(win.attach_bar.items) == 1 and bool(win.attach_bar.items[0].tokens), timeout=TIMEOUT)
    win.input.setPlainText("What do the notes say?")
    n = len(shown)
    win.send()
    msgs = _done(qtbot, win)
    during = shown[n]  # counted before the engine started on the reply
    assert msgs[-1].stats["prompt_tokens"] == during
    parts = win.session.context_parts  # after the reply: the file is still in the chat
    assert parts.files > 0 and parts.tools > 100 and parts.system > 0 and parts.conversation > 0
    assert shown[-1] == parts.total >= during  # (a reply may be empty: the random model can end at once)


def test_tools_that_do_not_fit_say_so_and_answer_without_them(qtbot, tmp_path, gemma4_tools, monkeypatch):
    """The first message of a chat whose tool declarations fill the context: no offer to leave out
    older turns (there are none); the dialog names the tools and turning them off answers."""
    servers = [{"name": "notes", "transport": "stdio", "command": sys.executable, "args": [str(SERVER)],
                "env": {}, "enabled": True}]
    w = make_window(qtbot, tmp_path, gemma4_tools["target"], gemma4_tools[0.7], max_tokens=8,
                    mcp_servers=servers, n_ctx=256)
    asked = []
    monkeypatch.setattr("app.ui.window_dialogs.ask_overflow", lambda parent, help: asked.append(help) or "tools_off")
    try:
        qtbot.waitUntil(lambda: w.composer.tools_btn.isEnabled(), timeout=TIMEOUT)
        w.composer.tools_btn.setChecked(True)
        qtbot.waitUntil(lambda: w.session.context_parts is not None and w.session.context_parts.tools > 0,
                        timeout=TIMEOUT)
        assert w.session.context_parts.total > 256  # the meter says so before anything is sent
        w.input.setPlainText("hi")
        w.send()
        qtbot.waitUntil(lambda: bool(asked) and not w.session.busy, timeout=TIMEOUT)
        help = asked[0]
        assert help.title == "Tools take too much of the context" and help.choices == ("tools_off", "settings")
        assert help.text.splitlines()[3].startswith("• tool declarations: ")
        msgs = w.store.messages(w.session.conversation_id)
        assert [m.role for m in msgs] == ["user", "assistant"] and msgs[-1].content  # answered without tools
        assert not w.composer.tools_btn.isChecked() and not w.session.tools_on() and len(asked) == 1
    finally:
        w.close()


def test_files_that_do_not_fit_beside_the_tools_say_what_takes_the_room(qtbot, tmp_path, gemma4_tools, monkeypatch):
    """An empty chat whose tool declarations take most of the context, and a file that fits only
    without them: the files' dialog gives the same breakdown as a chat's and offers turning the
    tools off (not "start a new chat" alone); after that the file is sent."""
    from PySide6.QtWidgets import QFileDialog

    servers = [{"name": "notes", "transport": "stdio", "command": sys.executable, "args": [str(SERVER)],
                "env": {}, "enabled": True}]
    w = make_window(qtbot, tmp_path, gemma4_tools["target"], gemma4_tools[0.7], max_tokens=8,
                    mcp_servers=servers, n_ctx=2048)
    asked = []
    monkeypatch.setattr("app.ui.window_dialogs.ask_overflow",
                        lambda parent, help: asked.append(help) or "tools_off_only")
    try:
        qtbot.waitUntil(lambda: w.composer.tools_btn.isEnabled(), timeout=TIMEOUT)
        w.composer.tools_btn.setChecked(True)
        qtbot.waitUntil(lambda: w.session.context_parts is not None and w.session.context_parts.tools > 0,
                        timeout=TIMEOUT)
        parts = w.session.context_parts
        engine, words = w.session.worker.engine, []
        want = 2048 - parts.total + min(parts.tools, 200) // 2  # over with the tools, in without them
        while len(engine.tokenize(" ".join(words), add_special=False, parse_special=False)) < want:
            words += [f"w{len(words)}"] * 20
        src = tmp_path / "notes.txt"
        src.write_text(" ".join(words))
        monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(src)], ""))
        w.composer.attach_files()
        qtbot.waitUntil(lambda: len(w.attach_bar.items) == 1 and bool(w.attach_bar.items[0].tokens), timeout=TIMEOUT)
        w.input.setPlainText("What do the notes say?")
        w.send()
        assert len(asked) == 1
        help = asked[0]
        assert help.title == "The attached files do not fit" and help.choices == ("tools_off_only", "settings")
        assert "• tool declarations: " in help.text and "• attached files: " in help.text
        assert not w.composer.tools_btn.isChecked() and w.input.toPlainText() == "What do the notes say?"
        assert len(w.attach_bar.items) == 1  # nothing sent or removed
        qtbot.waitUntil(lambda: getattr(w.session.context_parts, "tools", 0) == 0 and not w.composer.files_over(),
                        timeout=TIMEOUT)
        w.send()
        msgs = _done(qtbot, w)
        assert msgs[0].role == "user" and len(asked) == 1
    finally:
        w.close()


def test_the_tools_switch_shows_on_and_the_asked_for_tool_is_ticked_in_both_themes(qtbot, win):
    from PySide6.QtWidgets import QApplication

    from app.ui.theme import apply_theme

    b = win.composer.tools_btn

    def mean_colour():
        img = b.grab().toImage()
        px = [img.pixelColor(x, y) for x in range(2, img.width() - 2, 3) for y in range(2, img.height() - 2, 3)]
        return [sum(getattr(c, ch)() for c in px) / len(px) for ch in ("red", "green", "blue")]

    try:
        for theme in ("dark", "light"):
            apply_theme(QApplication.instance(), theme)
            b.setChecked(False)
            off = mean_colour()
            b.setChecked(True)
            on = mean_colour()
            assert b.text() == "Tools: on" and sum(abs(x - y) for x, y in zip(on, off)) > 30, (theme, on, off)
            # the words whole beside the menu arrow (the checked style's border had cut them to "Tools: o")
            qtbot.waitUntil(lambda: b.width() >= b.fontMetrics().horizontalAdvance("Tools: on") + 30, timeout=2000)
        b.setChecked(False)
        assert b.text() == "Tools"
        acts = {a.text().split("call ")[1].split()[0]: a for a in win.composer.tools_menu.actions()}
        acts["today"].trigger()
        acts = {a.text().split("call ")[1].split()[0]: a for a in win.composer.tools_menu.actions()}
        assert b.isChecked() and acts["today"].isChecked() and not acts["crash"].isChecked()
    finally:
        apply_theme(QApplication.instance(), "light")


def test_a_call_cut_by_the_token_limit_is_said_in_words_not_shown_as_markup(qtbot, win):
    win.settings["max_tokens"] = 8  # fewer than "call:read_note{name:" takes
    acts = {a.text().split("call ")[1].split()[0]: a for a in win.composer.tools_menu.actions()}
    acts["read_note"].trigger()
    win.input.setPlainText("Read my note")
    win.send()
    msgs = _done(qtbot, win)
    answer = msgs[-1]
    assert answer.role == "assistant" and "<|tool_call>" not in answer.content and not answer.calls
    footer = win.chat_view.widgets()[-1].footer.text()
    assert "the call of read_note was cut off by the token limit (Max reply tokens), so it was not run" in footer
    assert _calls(win.log) == []
