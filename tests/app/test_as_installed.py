"""What a new user met first, through what they touch: the window's controls, its menus and
shortcuts, a restart, the editor's HTTP client beside the window's own chat."""

from __future__ import annotations

import threading
import time

import openai
import pytest
from PySide6.QtCore import QRect, Qt
from PySide6.QtWidgets import QApplication, QDialog

from app.core.settings import FIELDS, Settings
from app.core.store import Store
from app.ui.window import MainWindow
from engine.generation import AUTO, MAX_DRAFT
from engine.models.library import Library

from ..support.llamaserver import free_port
from ..support.recordedserver import RecordedServer
from ..support.window import TIMEOUT, make_window, send


def idle(w) -> bool:
    return w.send_btn.text() == "Send"


def settled(w) -> bool:
    """The reply is done and shown whole: its deferred Markdown render and its footer, which land
    after the last token, are in."""
    last = w.chat_view.widgets()[-1]
    return idle(w) and not last.render_pending and last.footer.isVisible()


def reopen(qtbot, tmp_path) -> MainWindow:
    """A new window on the same folder, as at the next start."""
    w = MainWindow(Settings(tmp_path / "settings.json"), Store(tmp_path / "chats.sqlite3"),
                   Library(tmp_path / "models.json"))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.session.model_info is not None, timeout=TIMEOUT)
    return w


# ---- settings --------------------------------------------------------------------------
def test_every_setting_changed_in_the_dialogs_survives_a_restart(qtbot, tmp_path, tiny, monkeypatch):
    from app.ui.dialogs.connections import ConnectionEditor, ConnectionsDialog, load_connections
    from app.ui.dialogs.settings_dialog import SettingsDialog
    from app.ui.theme import apply_theme

    w = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0])
    try:
        dlg = SettingsDialog(w.settings, w)  # Settings…, as the user fills it in, then OK
        for key, value in {"temperature": 0.7, "top_k": 40, "top_p": 0.9, "min_p": 0.05, "repeat_penalty": 1.1,
                           "max_tokens": 77, "n_ctx": 2048, "threads": 1}.items():
            dlg.fields[key].setValue(value)
        dlg.system.setPlainText("Be brief.")
        dlg.theme.setCurrentText("dark")
        dlg.apply()

        def fill(editor):  # Settings → Connections… → Add…: the editor, filled in and saved
            editor.name.setText("lab")
            editor.url.setText("127.0.0.1:9")
            editor.baseline.setText("127.0.0.1:10")
            editor.save()
            return QDialog.Accepted

        monkeypatch.setattr(ConnectionEditor, "exec", fill)
        ConnectionsDialog(w.settings, w).add()
        w.charts_act.setChecked(False)  # View → Speed charts off
        w.scale_font(0.1)  # View → Larger text
        w.open_server()  # File → Local API server…: another port, served once
        port = free_port()
        w.server_panel.port.setValue(port)
        w.server_panel.switch.setChecked(True)
        w.server_panel.switch.setChecked(False)
        w.draft_spin.setValue(4)  # this chat's draft length and switches
        w.think_switch.setChecked(True)
        w.setGeometry(QRect(30, 40, 1000, 720))
        saved = {k: w.settings[k] for k in FIELDS}
        cid = w.session.conversation_id
        w.close()

        w2 = reopen(qtbot, tmp_path)
        for key in FIELDS:
            if key != "geometry":
                assert w2.settings[key] == saved[key], key
        assert saved["connections"] and saved["serve_port"] == port and saved["show_charts"] is False
        assert [c.name for c in load_connections(w2.settings)] == ["lab"]
        assert load_connections(w2.settings)[0].baseline_url == "http://127.0.0.1:10/v1"
        assert w2.session.conversation_id == cid
        assert w2.draft_spin.value() == 4 and w2.think_switch.isChecked()
        assert (w2.height(), w2.charts_act.isChecked()) == (720, False)
        w2.open_server()
        assert w2.server_panel.port.value() == port
        w2.close()
    finally:
        apply_theme(QApplication.instance(), "light")


def test_settings_keep_what_they_do_not_know_and_set_aside_a_damaged_file(tmp_path):
    p = tmp_path / "settings.json"
    p.write_text('{"future_key": [1, 2], "top_k": "many", "show_charts": 1, "draft_max": 0, "theme": "dark"}')
    s = Settings(p)
    assert s["top_k"] == 64 and s["show_charts"] is True  # wrong types: the defaults
    assert s["draft_max"] == AUTO and s["theme"] == "dark"  # 0 was Tandem 0.1's auto
    s.save()
    assert '"future_key": [\n    1,\n    2\n  ]' in p.read_text()  # a newer Tandem's key survives
    with pytest.raises(KeyError):
        s["typo_key"] = 1
    p.write_text("{not json")
    s = Settings(p)
    assert "could not be read" in s.recovered and s["theme"] == "system"
    aside = list(tmp_path.glob("settings.unreadable-*.json"))
    assert len(aside) == 1 and aside[0].read_text() == "{not json"
    s.save()
    assert aside[0].exists()  # saving defaults never erased the user's file


# ---- the window and an editor on one engine ----------------------------------------------
def test_the_window_chats_while_tandem_serve_streams_to_an_editor(qtbot, tmp_path, tiny):
    """Both replies run to the end, one after the other: neither is cut by the other's end."""
    win = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0], max_tokens=1500)
    win.open_server()
    panel = win.server_panel
    panel.port.setValue(free_port())
    panel.switch.setChecked(True)
    c = openai.OpenAI(base_url=panel.url.text(), api_key="any", max_retries=0, timeout=120)
    started, editor = threading.Event(), {}

    def edit():
        text, finish = [], None
        for ch in c.chat.completions.create(model="tiny-target", max_tokens=200, stream=True,
                                            messages=[{"role": "user", "content": "Count to a thousand"}]):
            if ch.choices:
                text.append(ch.choices[0].delta.content or "")
                finish = ch.choices[0].finish_reason or finish
                started.set()
                time.sleep(0.005)  # an editor that reads as it renders: the server's end comes late
        editor.update(text="".join(text), finish=finish)

    t = threading.Thread(target=edit)
    t.start()
    try:
        assert started.wait(60)
        reply = send(qtbot, win, "and the window asks too")  # queued behind the editor's request
        t.join(120)
        assert editor["finish"] == "length"
        assert reply.stats["finish_reason"] == "length" and reply.stats["generated_tokens"] == 1500
        assert "stopped" not in reply.footer.text()
    finally:
        t.join(120)
        panel.switch.setChecked(False)
        win.close()


def test_desktop_switching_to_dark_restyles_the_charts(qtbot, tmp_path, tiny):
    from app.ui.theme import apply_theme

    hints = QApplication.styleHints()
    win = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0], theme="system")
    apply_theme(QApplication.instance(), "system")
    before = win.stats_bar.chart.backgroundBrush().color().lightness()
    try:
        hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)  # what the desktop's switch sends
        assert QApplication.palette().window().color().lightness() < 128
        assert before > 128 and win.stats_bar.chart.backgroundBrush().color().lightness() < 128
    finally:
        apply_theme(QApplication.instance(), "light")
        win.close()


# ---- draft length: one bound, one spelling -------------------------------------------------
def test_draft_length_bounds_agree_everywhere(qtbot, tmp_path, tiny):
    from engine.cli import build_parser
    from engine.serve.request import ApiError, Sampling, TandemOptions, config

    win = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0])
    try:
        assert win.draft_spin.maximum() == MAX_DRAFT
        win.draft_spin.setValue(MAX_DRAFT)
        assert win.session.reply_settings().draft_max == MAX_DRAFT
        win.draft_spin.setValue(0)
        assert win.session.reply_settings().draft_max == AUTO
        assert win.store.conversation(win.session.conversation_id).options.draft_max == AUTO
        e = win.session.worker.engine
        for k, ok in ((MAX_DRAFT, True), (MAX_DRAFT + 1, False), (AUTO, True), (0, False)):
            req = Sampling(max_tokens=8, tandem=TandemOptions(draft_max=k))
            if ok:
                assert config(e, req, "chat").draft_max == k
            else:
                with pytest.raises(ApiError):
                    config(e, req, "chat")
        p = build_parser()
        assert p.parse_args(["generate", "--draft-max", str(MAX_DRAFT), "x"]).draft_max == MAX_DRAFT
        with pytest.raises(SystemExit):
            p.parse_args(["generate", "--draft-max", str(MAX_DRAFT + 1), "x"])
    finally:
        win.close()


# ---- the new user's walk ----------------------------------------------------------------
def test_a_failed_model_switch_keeps_the_loaded_model(qtbot, tmp_path, tiny, monkeypatch):
    shown = []
    monkeypatch.setattr("app.ui.window.message", lambda p, icon, title, text, *a: shown.append(text))
    win = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0])
    try:
        win.load_models(str(tmp_path / "gone.gguf"), "")  # a file that was moved away
        qtbot.waitUntil(lambda: bool(shown), timeout=TIMEOUT)
        qtbot.waitUntil(lambda: win.send_btn.isEnabled(), timeout=TIMEOUT)
        assert "gone.gguf" in shown[0]
        assert win.session.model_info.target == str(tiny["target"])
        assert win.picker.currentText().startswith("tiny-target")
        assert send(qtbot, win, "still here?").stats["mode"] == "hybrid"
    finally:
        win.close()


def test_new_chat_focuses_the_input_and_makes_one_empty_chat(qtbot, tmp_path, tiny):
    win = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0])
    try:
        send(qtbot, win, "a first chat")
        win.activateWindow()
        win.chat_list.setFocus()
        new = next(a for a in win.findChildren(type(win.origin_switch)) if a.text() == "New chat")
        new.trigger()
        new.trigger()
        titles = [c.title for c in win.store.conversations()]
        assert titles.count("New chat") == 1 and len(titles) == 2
        qtbot.waitUntil(lambda: win.input.hasFocus(), timeout=5000)
    finally:
        win.close()


def test_escape_stops_a_reply_wherever_the_focus_is(qtbot, tmp_path, tiny):
    win = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0], max_tokens=4000)
    try:
        win.activateWindow()
        qtbot.waitUntil(lambda: win.isActiveWindow(), timeout=5000)
        win.input.setPlainText("Count to a thousand")
        win.send()
        qtbot.waitUntil(lambda: bool(win.chat_view.widgets()[-1].text), timeout=TIMEOUT)
        win.chat_list.setFocus()
        qtbot.keyClick(win.chat_list, Qt.Key_Escape)
        qtbot.waitUntil(lambda: idle(win), timeout=TIMEOUT)
        reply = win.chat_view.widgets()[-1]
        assert reply.stats["finish_reason"] == "cancelled" and reply.stats["generated_tokens"] < 4000
    finally:
        win.close()


def test_a_measured_speed_up_withdraws_the_cannot_help_banner_and_busy_means_slower():
    from app.core.chat_types import ReplyResult
    from app.ui.compare import CompareRun, speed_verdict

    run = CompareRun("p", [], True, AUTO)
    for which, tps in (("baseline", 40.0), ("mtp", 43.0)):
        run.next_run()
        run.record(which, ReplyResult("a", "", stats={"decode_tps": tps, "decode_s": 5.0}))
    assert run.concluded and run.ratio == pytest.approx(43 / 40)
    assert "busy" not in speed_verdict(run.ratio, 40.0, 43.0, {}, usual_tps=30.0)  # faster than usual: fine
    assert "busy" in speed_verdict(run.ratio, 20.0, 43.0, {}, usual_tps=30.0)  # slower than usual: busy


def test_the_banner_goes_when_compare_measures_mtp_faster(qtbot, tmp_path, tiny):
    from app.core.chat_types import ReplyResult
    from app.ui.compare import CompareRun

    win = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0])
    try:
        win.session.mtp_limit.emit(0.8, (20.0, 60.0, 4.0))
        assert win.mtp_banner.isVisible()
        run = CompareRun("p", [], True, AUTO)
        for which, tps in (("baseline", 40.0), ("mtp", 46.0)):
            run.next_run()
            run.record(which, ReplyResult("a", "", stats={"decode_tps": tps, "decode_s": 5.0}))
        win.session.compare_concluded.emit(run)
        assert not win.mtp_banner.isVisible()
    finally:
        win.close()


def test_a_stopped_compare_says_so_in_both_panes(qtbot, tmp_path, tiny):
    win = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0], max_tokens=3000)
    try:
        win.input.setPlainText("Count to a thousand")
        win.compare()
        page = win.compare_page
        qtbot.waitUntil(lambda: bool(page.base.view.toPlainText().strip("running…")), timeout=TIMEOUT)
        win.stop()
        qtbot.waitUntil(lambda: page.concluded and idle(win), timeout=TIMEOUT)
        assert "running…" not in page.base.view.toPlainText() + page.mtp.view.toPlainText()
        assert "waiting" not in page.mtp.view.toPlainText() and "stopped" in page.mtp.view.toPlainText()
    finally:
        win.close()


def test_a_reply_cut_by_a_dying_server_keeps_its_text_and_offers_continue(qtbot, tmp_path, tiny):
    from app.ui.dialogs.connections import Connection, save_connections

    srv = RecordedServer("ollama", model="gemma4:e4b", cut_after=4)
    win = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0])
    try:
        save_connections(win.settings, [Connection("box", srv.url)])
        win.load_remote("box", "gemma4:e4b")
        qtbot.waitUntil(lambda: win.session.model_info is not None and bool(win.session.model_info.remote),
                        timeout=TIMEOUT)
        assert win.picker.currentText().startswith("gemma4:e4b — box")  # the model's name, not its key
        monkey = []
        win.session.reply_failed.disconnect()
        win.session.reply_failed.connect(monkey.append)
        reply = send(qtbot, win, "Why is the sky blue?")
        assert reply.text == "The sky is blue" and monkey and "ended before the reply was complete" in monkey[0]
        assert reply.stats["finish_reason"] == "error" and reply.buttons["continue"].isVisible()
        stored = win.store.messages(win.session.conversation_id)[-1]
        assert stored.content == "The sky is blue" and stored.stats["finish_reason"] == "error"
    finally:
        win.close()
        srv.stop()


def test_the_offline_download_message_does_not_cover_the_progress(qtbot, tiny, tmp_path):
    from app.ui.dialogs.welcome import DownloadDialog
    from engine.models.catalog import find
    from engine.models.download import Downloader

    dlg = DownloadDialog(Downloader(cache_dir=tmp_path), find("gemma-4-e4b"), "Q4_K_M", Library(tmp_path / "m.json"))
    qtbot.addWidget(dlg)
    dlg.show()
    qtbot.waitExposed(dlg)
    dlg.worker.failed.emit("offline: the Hub cannot be reached (" + "x" * 300 + ")", "offline")  # as a download says it
    QApplication.processEvents()
    qtbot.waitUntil(lambda: dlg.status.height() >= dlg.status.heightForWidth(dlg.status.width()), timeout=5000)
    shown = [w for w in (*dlg.labels.values(), *dlg.bars.values(), dlg.status, dlg.local_btn) if w.isVisible()]
    for i, a in enumerate(shown):
        for b in shown[i + 1:]:
            assert not a.geometry().intersects(b.geometry()), (a, b)


def test_answering_no_to_an_overflow_puts_the_message_back_in_the_input(qtbot, tmp_path, tiny, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    w = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7], n_ctx=256, max_tokens=8)
    asked = []
    monkeypatch.setattr("app.ui.window_dialogs.ask_overflow", lambda p, help: asked.append(help.title) or "")
    try:
        for i in range(12):
            send(qtbot, w, f"question number {i} " + "word " * 12)
            if asked:
                break
        assert asked == ["Conversation too long"]
        roles = [m.role for m in w.store.messages(w.session.conversation_id)]
        assert roles[-1] == "assistant" and roles.count("user") == roles.count("assistant")
        assert w.input.toPlainText().startswith(f"question number {i} ")
        assert [x.role for x in w.chat_view.widgets()][-1] == "assistant"
    finally:
        w.close()


def test_the_window_title_follows_the_chat_title(qtbot, tmp_path, tiny):
    w = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0])
    try:
        assert w.windowTitle() == "New chat — Tandem"
        send(qtbot, w, "Hello world, this is a test")
        assert w.windowTitle() == "Hello world, this is a test — Tandem"
    finally:
        w.close()


def test_the_chat_view_follows_a_long_reply_to_its_end(qtbot, tmp_path, tiny):
    w = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0], max_tokens=400)
    try:
        w.resize(900, 520)
        bar = w.chat_view.scroll.verticalScrollBar()
        for text in ("Count to a thousand", "and on"):
            send(qtbot, w, text)
        qtbot.waitUntil(lambda: settled(w), timeout=TIMEOUT)
        QApplication.processEvents()  # the layout the last render asked for
        qtbot.waitUntil(lambda: bar.maximum() > 0 and bar.value() == bar.maximum(), timeout=5000)
        w.settings["max_tokens"] = 300  # (the chat must still fit the context)
        w.input.setPlainText("and again")
        w.send()  # sending goes to the end; scrolling up while it streams stays up
        qtbot.waitUntil(lambda: len(w.chat_view.widgets()[-1].text) > 20, timeout=TIMEOUT)
        bar.setValue(0)
        qtbot.waitUntil(lambda: settled(w), timeout=TIMEOUT)
        QApplication.processEvents()  # the layout the last render asked for
        assert bar.value() == 0 < bar.maximum()
    finally:
        w.close()


def test_a_new_compare_while_a_replay_plays(qtbot, tmp_path, tiny):
    """Replay of one comparison, then another Compare: no error, no text from the old replay."""
    errors = []
    import sys

    hook, sys.excepthook = sys.excepthook, lambda *e: errors.append(e)
    w = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0], max_tokens=200)
    try:
        w.input.setPlainText("Count to a thousand")
        w.compare()
        page = w.compare_page
        qtbot.waitUntil(lambda: page.concluded and idle(w), timeout=TIMEOUT)
        page.replay()
        assert page.replaying
        w.compare()
        qtbot.waitUntil(lambda: page.concluded and idle(w), timeout=TIMEOUT)
        qtbot.wait(300)  # room for the old replay's late text or error: an absence has no event to wait on
        assert not errors and not page.replaying
        from app.ui.render import for_display

        assert page.base.view.toPlainText() == for_display(page.base.result.answer)
    finally:
        sys.excepthook = hook
        w.close()


def test_settings_refuse_a_model_path_that_does_not_exist(qtbot, tmp_path, tiny):
    """Found by a user: Settings → Model "64" (a number typed in the wrong box) was saved, and the
    next start failed to load it. OK keeps the dialog open and says which file is missing."""
    from PySide6.QtWidgets import QDialogButtonBox

    from app.ui.dialogs.settings_dialog import SettingsDialog

    w = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0])
    dlg = SettingsDialog(w.settings, w)
    qtbot.addWidget(dlg)
    dlg.show()
    dlg.target.setText("64")
    dlg.findChild(QDialogButtonBox).button(QDialogButtonBox.Ok).click()
    assert dlg.isVisible() and dlg.result() != SettingsDialog.Accepted
    assert "64" in dlg.error.text() and "does not exist" in dlg.error.text() and dlg.error.isVisible()
    assert w.settings["target"] == str(tiny["target"])  # nothing saved
    dlg.target.setText(str(tiny["target"]))
    dlg.drafter.setText(str(tmp_path / "gone.gguf"))
    dlg.findChild(QDialogButtonBox).button(QDialogButtonBox.Ok).click()
    assert dlg.isVisible() and "gone.gguf" in dlg.error.text()
    dlg.drafter.setText("")  # no drafter is a choice
    dlg.findChild(QDialogButtonBox).button(QDialogButtonBox.Ok).click()
    assert dlg.result() == SettingsDialog.Accepted
    w.close()
