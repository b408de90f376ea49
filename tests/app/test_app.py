"""The desktop app, offscreen, driving the real engine with the synthetic tiny models."""

from __future__ import annotations

import time

import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QMessageBox, QToolButton

from app.core.settings import Settings
from app.core.store import Store

from ..support.window import TIMEOUT, compare, make_window, send


def test_send_streams_and_finishes_with_stats(qtbot, win):
    chunks = []
    win.session.worker.stream.connect(lambda rid, pieces, stats: chunks.append((pieces, stats)))
    win.settings["max_tokens"] = 400
    assert win.draft_spin.value() == 0 and win.draft_spin.text() == "k auto"  # the default
    win.draft_spin.setValue(3)
    reply = send(qtbot, win, "Hello world, this is a test")
    assert reply.role == "assistant" and len(reply.text) > 100
    assert len(chunks) >= 2  # it streamed, coalesced
    assert sum(len(p) for p, _ in chunks) == 400  # every token arrived exactly once
    s = reply.stats
    assert s["mode"] == "hybrid" and s["draft_max"] == 3  # auto: the drafter and lookup
    assert s["decode_tps"] > 0 and s["ttft_s"] > 0 and 0 < s["acceptance_rate"] < 1
    assert 1 < s["mean_accepted_length"] <= 4
    assert "tok/s" in reply.footer.text() and "MTP + lookup k=3" in reply.footer.text()
    assert reply.footer.text().startswith("400 tokens in ")  # how much and how long, not only how fast
    assert "tok/s:" in win.stats_bar.labels["decode"][0].text()
    assert win.stats_bar.labels["k"][0].text() == "MTP + lookup k: 3"
    assert len(win.stats_bar.chart.points) >= 1
    # the conversation got a title from the first message
    assert win.chat_list.titles()[0].startswith("Hello world")


def test_mtp_toggle_takes_effect_on_next_reply(qtbot, win):
    first = send(qtbot, win, "a b c d e f g")
    assert first.stats["mode"] == "hybrid"
    win.mtp_switch.setChecked(False)
    assert not win.draft_spin.isEnabled()
    win.session.regenerate()
    qtbot.waitUntil(lambda: not win.session.busy, timeout=TIMEOUT)
    second = win.chat_view.widgets()[-1]
    assert second.stats["mode"] == "baseline" and "baseline" in second.footer.text()
    assert second.text == first.text  # greedy: the drafter changes speed, not output
    win.mtp_switch.setChecked(True)
    win.draft_spin.setValue(5)
    win.session.regenerate()
    qtbot.waitUntil(lambda: not win.session.busy, timeout=TIMEOUT)
    assert win.chat_view.widgets()[-1].stats["draft_max"] == 5
    # per-chat settings are stored with the conversation
    assert win.store.conversation(win.session.conversation_id).options.draft_max == 5


def test_without_a_drafter_the_switch_drafts_by_lookup(qtbot, tmp_path, tiny):
    """Every model can draft by lookup: the switch says so and works; off, it is baseline."""
    w = make_window(qtbot, tmp_path, tiny["target"])
    assert w.mtp_switch.isEnabled() and w.mtp_switch.text() == "Lookup"
    assert "no drafter" in w.mtp_switch.toolTip() and "Lookup" in w.mtp_switch.toolTip()
    assert w.picker.currentText().endswith("(no drafter) — lookup drafting")
    reply = send(qtbot, w, "hi")
    assert reply.stats["mode"] == "lookup" and "· Lookup k auto" in reply.footer.text()  # as the switch names it
    # Compare names what drafts (lookup, not MTP) on every surface, with one acceptance
    page = compare(qtbot, w, "abcdefghijklmnopqrstuvwxyz abcdefgh")
    assert page.mtp.title.text().startswith("<b>Lookup drafting</b>") and "no drafting" in page.base.title.text()
    assert "MTP" not in page.verdict.text() and "MTP" not in page.mtp.title.text()
    assert set(w.stats_bar.chart.series) == {"baseline", "Lookup"}
    together = page.run.drafting_stats()
    assert together["acceptance_rate"] is not None and w.stats_bar.bars.values  # the positions, lookup's
    assert w.stats_bar.labels["accept"][0].text() == f"accepted: {together['acceptance_rate'] * 100:.0f} %"
    assert "MTP" not in w.stats_bar.labels["k"][0].text()
    w.compare_page.back.emit()
    w.mtp_switch.setChecked(False)
    assert send(qtbot, w, "hi").stats["mode"] == "baseline"
    w.close()


def test_compare_mode_fills_both_panes_and_replays(qtbot, win):
    win.input.setPlainText("The quick brown fox")
    qtbot.mouseClick(win.compare_btn, Qt.LeftButton)
    page = win.compare_page
    qtbot.waitUntil(lambda: page.concluded, timeout=TIMEOUT)
    assert win.stack.currentIndex() == 1
    # the tiny model's runs take milliseconds: each was repeated, and the verdict uses medians
    assert len(page.run.runs["baseline"]) == len(page.run.runs["mtp"]) == 3
    assert "median of 3 runs each" in page.verdict.text() and "of 3 runs" in page.mtp.stats.text()
    assert page.base.result.stats["mode"] == "baseline" and page.mtp.result.stats["mode"] == "hybrid"
    assert page.mtp.result.stats["draft_max"] == "auto"  # what the switches say (greedy: no seed to fix k)
    assert page.base.result.answer == page.mtp.result.answer != ""
    assert "identical output" in page.verdict.text()
    assert any(w in page.verdict.text() for w in ("faster", "About the same speed", "slower here"))
    shown = page.base.view.toPlainText(), page.mtp.view.toPlainText()
    page.replay()
    assert page.replaying
    qtbot.waitUntil(lambda: not page.replaying, timeout=TIMEOUT)
    assert (page.base.view.toPlainText(), page.mtp.view.toPlainText()) == shown
    # the comparison did not touch the conversation
    assert win.chat_view.widgets() == [] or all(m.role != "assistant" for m in win.chat_view.widgets())


def test_stop_mid_reply_keeps_partial_answer(qtbot, win):
    win.settings["max_tokens"] = 100000
    for _ in range(5):  # the tiny model sometimes ends its reply by itself before Esc lands
        win.input.setPlainText("a b c")
        qtbot.keyClick(win.input, Qt.Key_Return)
        # some text must be on screen to keep (the first chunks can be hidden control tokens)
        qtbot.waitUntil(lambda: not win.session.busy or bool(win.session.model.last.text), timeout=TIMEOUT)
        qtbot.keyClick(win.input, Qt.Key_Escape)
        qtbot.waitUntil(lambda: not win.session.busy, timeout=TIMEOUT)
        reply = win.chat_view.widgets()[-1]
        if reply.stats["finish_reason"] != "stop":
            break
    assert reply.stats["finish_reason"] == "cancelled" and "stopped" in reply.footer.text()
    saved = win.store.messages(win.session.conversation_id)[-1]
    assert saved.content == reply.text != ""


def test_edit_and_regenerate(qtbot, win):
    send(qtbot, win, "first question")
    send(qtbot, win, "second question")
    n = len(win.chat_view.widgets())
    win.session.regenerate()
    qtbot.waitUntil(lambda: not win.session.busy, timeout=TIMEOUT)
    assert len(win.chat_view.widgets()) == n
    win.edit_message([w for w in win.chat_view.widgets() if w.role == "user"][-1])
    assert win.input.toPlainText() == "second question"
    assert len([w for w in win.chat_view.widgets() if not w.isHidden()]) == n - 2
    reply = send(qtbot, win, "second question, edited")
    assert [m.role for m in win.store.messages(win.session.conversation_id)] == ["user", "assistant"] * 2
    assert win.store.messages(win.session.conversation_id)[-2].content == "second question, edited"
    assert reply.text


def test_esc_while_editing_gives_back_the_draft_that_was_in_the_input(qtbot, win):
    """Found by a user: Esc left the edited message's text in the input (sending it then made a
    new message without its file). Leaving an edit puts back what the input held before it."""
    from PySide6.QtCore import Qt

    send(qtbot, win, "first question")
    win.input.setPlainText("a draft of the next one")
    first = [w for w in win.chat_view.widgets() if w.role == "user"][0]
    win.edit_message(first)
    assert win.input.toPlainText() == "first question"
    qtbot.keyClick(win.input, Qt.Key_Escape)
    assert win.composer.editing is None and not first.isHidden()
    assert win.input.toPlainText() == "a draft of the next one"
    win.edit_message(first)  # and sending the edit gives the draft back too
    win.input.setPlainText("first question, edited")
    reply = send(qtbot, win, "first question, edited")
    assert reply.text and win.input.toPlainText() == "a draft of the next one"


def test_token_origins_view_tints_tokens(qtbot, win):
    reply = send(qtbot, win, "Hello world")
    assert any(d for _, d in reply.origins) and not all(d for _, d in reply.origins)
    win.origin_switch.setChecked(True)
    html = reply.body.toHtml()
    assert "#b7ebc0" in html.lower() and "#ffe2b8" in html.lower()
    win.origin_switch.setChecked(False)
    assert "#b7ebc0" not in reply.body.toHtml().lower()


def test_persistence_survives_restart(qtbot, tmp_path, tiny):
    w = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7])
    reply = send(qtbot, w, "remember me")
    text, footer = reply.text, reply.footer.text()
    w.rename_conversation(w.session.conversation_id, "Kept chat")
    w.close()
    w2 = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7])
    msgs = w2.chat_view.widgets()
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert msgs[1].text == text and msgs[1].footer.text() == footer
    assert w2.chat_list.titles() == ["Kept chat"]
    # search by title and by message text
    w2.chat_list.search.setText("remember")
    assert w2.chat_list.titles() == ["Kept chat"]
    w2.chat_list.search.setText("no such words")
    assert w2.chat_list.titles() == []
    w2.close()


def test_close_while_generating_exits_cleanly_and_saves(qtbot, tmp_path, tiny):
    w = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7], max_tokens=100000)
    chunks = []
    w.session.worker.stream.connect(lambda *a: chunks.append(a))
    w.input.setPlainText("a b c")
    qtbot.keyClick(w.input, Qt.Key_Return)
    qtbot.waitUntil(lambda: len(chunks) >= 2, timeout=TIMEOUT)
    w.close()
    assert not w.session.thread.isRunning()
    saved = Store(tmp_path / "chats.sqlite3").messages(w.session.conversation_id)
    assert saved[-1].role == "assistant" and saved[-1].content  # the partial reply is kept


def test_context_overflow_offers_to_drop_oldest_turns(qtbot, tmp_path, tiny, monkeypatch):
    w = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7], n_ctx=256, max_tokens=8)
    asked = []
    monkeypatch.setattr("app.ui.window_dialogs.ask_overflow", lambda parent, help: asked.append(help.text) or "drop")
    for i in range(8):
        send(qtbot, w, f"question number {i} " + "word " * 12)
    assert asked and "context" in asked[0]
    assert w.chat_view.widgets()[-1].stats["generated_tokens"] >= 1
    # nothing was deleted from the saved conversation
    assert len([m for m in w.store.messages(w.session.conversation_id) if m.role == "user"]) == 8
    w.close()


def test_event_loop_stays_responsive_while_streaming(qtbot, win):
    """Reports the worst lateness of a 10 ms timer while the tiny model streams flat out."""
    win.settings["max_tokens"] = 1500
    lateness, last = [], [time.perf_counter()]

    def tick():
        now = time.perf_counter()
        lateness.append(now - last[0] - 0.010)
        last[0] = now

    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(tick)
    timer.start()
    tokens = 0
    for prompt in ("Hello world", "a b c", "zzz yyy", "The quick brown fox", "List: apples"):
        win.new_conversation()
        tokens += send(qtbot, win, prompt).stats["generated_tokens"]
    timer.stop()
    worst = max(lateness)
    print(f"\nworst 10 ms timer lateness while streaming {tokens} tokens: {worst * 1000:.1f} ms "
          f"over {len(lateness)} ticks")
    assert len(lateness) >= 5  # the GUI thread kept running its timers during generation


def test_settings_dialog_persists_and_reloads(qtbot, win, tiny):
    from app.core.settings import Settings
    from app.ui.dialogs.settings_dialog import SettingsDialog

    dlg = SettingsDialog(win.settings, win)
    qtbot.addWidget(dlg)
    # left to Tandem by default: the spins say "auto", and the value saved is "auto"
    assert dlg.fields["n_ctx"].text() == "auto" and dlg.fields["target_gpu_layers"].text() == "auto"
    assert dlg.values()["target_gpu_layers"] == "auto"
    dlg.fields["n_ctx"].setValue(2048)
    dlg.fields["temperature"].setValue(0.7)
    dlg.system.setPlainText("Be brief.")
    dlg.drafter.setText("")
    reload, theme = dlg.apply()
    assert reload and not theme
    saved = Settings(win.settings.path)
    assert saved["n_ctx"] == 2048 and saved["temperature"] == 0.7 and saved["system_prompt"] == "Be brief."
    assert saved["target_gpu_layers"] == saved["drafter_gpu_layers"] == "auto"  # "auto" survives a restart
    win.load_models(saved["target"], saved["drafter"])
    qtbot.waitUntil(lambda: win.session.model_info is not None, timeout=TIMEOUT)
    assert win.session.model_info.n_ctx == 2048 and not win.session.model_info.has_mtp
    # the GPU layers left to Tandem: chosen at load, and said where the user looks
    from engine.local.llama import supports_gpu_offload

    placement = win.session.model_info.placement
    assert placement.startswith("Chose " + ("every layer" if supports_gpu_offload() else "the CPU")), placement
    assert "context" not in placement and placement in win.picker.toolTip()
    assert win.session.history()[0] == {"role": "system", "content": "Be brief."}


def test_markdown_code_blocks_copy_and_thinking(qtbot):
    from PySide6.QtCore import QUrl
    from PySide6.QtGui import QGuiApplication

    from app.ui.widgets import MessageWidget

    w = MessageWidget("assistant", 1)
    qtbot.addWidget(w)
    text = ("Here is **bold** and a list:\n\n- one\n- two\n\n```python\ndef add(a, b):\n"
            "    return a + b  # " + "x" * 200 + "\n```\n\n<img src=x onerror=alert(1)> done")
    w.set_content(text, thinking="I should write a function.")
    html = w.body.toHtml()
    assert "copy:0" in html and "def" in html and "<b>" not in text
    assert "font-weight" in html  # bold and highlighted keywords
    assert "<img" not in html.lower()  # raw HTML from the model is not rendered
    assert "&lt;img" in html or "img src" in w.body.toPlainText()
    assert w.code_blocks == ["def add(a, b):\n    return a + b  # " + "x" * 200]
    copied = []
    w.copy_requested.connect(copied.append)
    w.follow_link(QUrl("copy:0"))
    assert copied == [w.code_blocks[0]]
    # the thinking part is there, collapsed until asked for
    assert w.think_toggle.isVisibleTo(w) and not w.think_view.isVisibleTo(w)
    w.think_toggle.click()
    assert w.think_view.isVisibleTo(w) and "function" in w.think_view.text()
    QGuiApplication.clipboard()  # clipboard exists offscreen


def test_export_markdown_and_json(qtbot, win):
    import json

    send(qtbot, win, "export me")
    md = win.store.export_markdown(win.session.conversation_id)
    js = json.loads(win.store.export_json(win.session.conversation_id))
    assert "**You:**" in md and "export me" in md and "tok/s" in md
    assert [m["role"] for m in js["messages"]] == ["user", "assistant"]
    assert js["messages"][1]["stats"]["mode"] == "hybrid"


def test_stopping_a_comparison_leaves_the_window_usable(qtbot, win):
    win.input.setPlainText("a b c")
    win.compare()
    win.stop()  # before the first run has even started
    qtbot.waitUntil(lambda: not win.session.busy, timeout=TIMEOUT)
    qtbot.waitUntil(lambda: "stopped" in win.compare_page.verdict.text(), timeout=TIMEOUT)
    assert win.send_btn.text() == "Send" and win.compare_btn.isEnabled()


def test_damaged_chat_database_is_recovered_and_the_user_told(qtbot, tmp_path, tiny, monkeypatch):
    db = tmp_path / "chats.sqlite3"
    s = Store(db)
    cid = s.create_conversation("Kept chat")
    s.add_message(cid, "user", "remember me")
    assert s.backup_if_due(now=time.time() + 2 * 86400) is not None  # a day later: a backup
    late = s.create_conversation("After the backup")
    s.add_message(late, "user", "newer")
    s.close()
    db.write_bytes(b"this is not a database" * 100)  # damaged beyond reading
    shown = []
    monkeypatch.setattr("app.ui.window.message", lambda parent, icon, title, text, *a: shown.append((title, text)))
    w = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0])
    qtbot.waitUntil(lambda: bool(shown), timeout=5000)
    title, text = shown[0]
    damaged = list(tmp_path.glob("chats.sqlite3.damaged-*"))
    assert len(damaged) == 1 and damaged[0].read_bytes().startswith(b"this is not")
    assert str(damaged[0]) in text and "backup" in text
    assert [c.title for c in w.store.conversations()] == ["Kept chat"]
    assert w.store.messages(w.store.conversations()[0].id)[0].content == "remember me"
    w.close()


def test_damaged_pages_keep_readable_rows_without_a_backup(tmp_path):
    db = tmp_path / "chats.sqlite3"
    s = Store(db)
    for b in s.backups():
        b.unlink()  # no backup to fall back on
    cid = s.create_conversation("Big chat")
    for i in range(400):
        s.add_message(cid, "user", f"message {i} " + "x" * 500)
    s.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    s.close()
    data = bytearray(db.read_bytes())
    page = 4096
    data[-3 * page:-2 * page] = b"\xff" * page  # one damaged page near the end
    db.write_bytes(bytes(data))
    s = Store(db)
    try:
        assert s.recovered and "damaged" in s.recovered
        assert [c.title for c in s.conversations()] == ["Big chat"]
        assert 0 < len(s.messages(cid)) <= 400
    finally:
        s.close()


def test_second_start_brings_the_running_window_forward(qtbot, tmp_path):
    from app.ui.single_instance import SingleInstance

    shown = []
    first = SingleInstance(tmp_path / "chats.sqlite3", on_show=lambda: shown.append(True))
    assert first.acquire()
    second = SingleInstance(tmp_path / "chats.sqlite3")
    assert not second.acquire()  # the database is taken
    assert second.ask_owner_to_show()
    qtbot.waitUntil(lambda: bool(shown), timeout=5000)
    other_db = SingleInstance(tmp_path / "other.sqlite3")
    assert other_db.acquire()  # another database is another instance
    other_db.release()
    first.release()
    third = SingleInstance(tmp_path / "chats.sqlite3")
    assert third.acquire()  # free again once the owner is gone
    third.release()


def test_auto_draft_length_in_the_window(qtbot, win):
    """k auto is the default: the live stats say what auto does, the footer and Details
    report the mean draft length."""
    assert win.draft_spin.text() == "k auto"
    reply = send(qtbot, win, "Hello world, this is a test")
    s = reply.stats
    assert s["draft_max"] == "auto" and s["mean_draft_length"] is not None
    assert "MTP + lookup k auto" in reply.footer.text()
    k_text = win.stats_bar.labels["k"][0].text()
    assert k_text.startswith("MTP + lookup k auto (now ") or k_text == "MTP paused, lookup on"


def test_says_once_when_mtp_cannot_help_on_this_machine(qtbot, win):
    from engine.strategies import CostModel

    c = CostModel()  # as measured where the model spills to system memory: 2 rows cost 3 decodes
    for rows in range(1, 17):
        for _ in range(10):
            c.record_batch(rows, 0.02 * (1 + 2.0 * (rows - 1)))
    c.record_draft(0.004)
    win.session.worker.engine.costs = c
    win.settings["max_tokens"] = 4
    send(qtbot, win, "Hello")
    assert win.mtp_banner.isVisible()
    text = win.mtp_banner.text()
    assert "unlikely to be faster" in text and "20.0 ms" in text and "60.0 ms" in text
    qtbot.mouseClick(win.mtp_banner.close_btn, Qt.LeftButton)  # the user closes it
    assert not win.mtp_banner.isVisible()
    send(qtbot, win, "again")
    assert not win.mtp_banner.isVisible()  # said once per loaded model


def test_a_message_longer_than_the_context_never_loops(qtbot, tmp_path, tiny, monkeypatch):
    """One message that does not fit even alone, as a chat's first: no offer to drop older turns
    (there are none); say the message itself is too long, with a way to raise the context, once.
    With an older turn, dropping it is offered once, then the message is too long."""
    w = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7], n_ctx=256, max_tokens=8)
    asked, opened = [], []
    monkeypatch.setattr("app.ui.window_dialogs.ask_overflow",
                        lambda parent, help: asked.append((help.title, help.choices)) or help.choices[0])
    monkeypatch.setattr(w, "open_settings", lambda focus="": opened.append(focus))
    w.input.setPlainText("word " * 400)
    w.send()
    qtbot.waitUntil(lambda: len(asked) >= 1 and not w.session.busy, timeout=TIMEOUT)
    qtbot.wait(300)  # room for a second question, were it asked again: an absence has no event to wait on
    assert asked == [("Message too long for the context", ("settings",))]
    assert opened == ["n_ctx"]  # Settings opens on the context size
    assert "Generating" not in w.statusBar().currentMessage()
    # the message goes back to the input box to be shortened (nothing lost); no unanswered turn
    # and no empty reply are left behind in the chat
    assert w.input.toPlainText() == ("word " * 400).strip()
    assert w.store.messages(w.session.conversation_id) == [] and w.chat_view.widgets() == []
    # nor does the chat's name in the list: it is empty again, so a new chat again
    assert w.store.conversation(w.session.conversation_id).title == "New chat"
    assert w.chat_list.titles()[0] == "New chat"

    send(qtbot, w, "hi")
    asked.clear()
    w.input.setPlainText("word " * 400)
    w.send()
    qtbot.waitUntil(lambda: len(asked) >= 2 and not w.session.busy, timeout=TIMEOUT)
    qtbot.wait(300)
    assert asked == [("Conversation too long", ("drop", "settings")), ("Message too long for the context", ("settings",))]
    assert w.input.toPlainText() == ("word " * 400).strip() and len(w.chat_view.widgets()) == 2
    w.close()


def test_settings_open_on_the_field_asked_for(qtbot, win):
    """"Raise the context size…" opens Settings with the context size's field ready to type in."""
    from PySide6.QtWidgets import QApplication

    from app.ui.dialogs.settings_dialog import SettingsDialog

    seen = []

    def look():
        dlg = next(w for w in QApplication.topLevelWidgets() if isinstance(w, SettingsDialog) and w.isVisible())
        field, has = dlg.fields["n_ctx"], dlg.focusWidget()
        seen.append(has is field or field.isAncestorOf(has))
        dlg.reject()

    QTimer.singleShot(300, look)
    win.open_settings(focus="n_ctx")
    assert seen == [True]


def test_dark_theme_shows_disabled_controls_placeholders_and_check_boxes(qapp):
    from PySide6.QtGui import QPalette

    from app.ui.theme import apply_theme

    try:
        apply_theme(qapp, "dark")
        pal = qapp.palette()
        for role in (QPalette.ButtonText, QPalette.WindowText, QPalette.Text):
            active, disabled = pal.color(QPalette.Active, role), pal.color(QPalette.Disabled, role)
            assert active.lightness() - disabled.lightness() > 60  # disabled reads as disabled
        assert pal.color(QPalette.PlaceholderText).lightness() > 110  # readable on the dark base
        assert "QCheckBox::indicator" in qapp.styleSheet()  # outlines drawn, not darker-than-window
    finally:
        apply_theme(qapp, "light")
    assert "QCheckBox::indicator {" not in qapp.styleSheet()


def test_context_meter_per_chat(qtbot, win):
    label = win.context_label
    qtbot.waitUntil(lambda: "/ " in label.text(), timeout=TIMEOUT)  # counted once the model loaded
    assert label.text().startswith("context: 0 / ")
    send(qtbot, win, "Hello world, this is a test")
    reply = win.chat_view.widgets()[-1]

    def shown() -> int:
        return int(label.text().split()[1].replace(",", "")) if label.text()[9:10].isdigit() else 0

    # counted again after the reply (while it ran, the meter showed its prompt): the history now
    # holds the prompt and the reply
    qtbot.waitUntil(lambda: shown() >= reply.stats["prompt_tokens"] + reply.stats["generated_tokens"] - 2,
                    timeout=TIMEOUT)
    used = shown()
    assert f"/ {win.session.model_info.n_ctx:,} tokens" in label.text()
    first = win.session.conversation_id
    win.new_conversation()
    qtbot.waitUntil(lambda: label.text().startswith("context: 0 / "), timeout=TIMEOUT)
    win.open_conversation(first)
    qtbot.waitUntil(lambda: label.text().startswith(f"context: {used:,} / "), timeout=TIMEOUT)


def test_compare_verdict_in_plain_words():
    from app.ui.compare import speed_verdict

    fast = speed_verdict(1.8, 10.0, 18.0, {"acceptance_rate": 0.9})
    assert "MTP was 1.80× faster" in fast and "90 % of the drafted tokens accepted" in fast
    assert "About the same speed" in speed_verdict(1.0, 10.0, 10.0, {})
    slow = speed_verdict(0.6, 10.0, 6.0, {"acceptance_rate": 0.3, "draft_max": 3})
    assert "slower here" in slow and "30 % of the drafted tokens accepted" in slow and "rejected most" in slow
    paused = speed_verdict(0.9, 10.0, 9.0, {"draft_max": "auto", "mean_draft_length": 0.0, "acceptance_rate": 0.4})
    assert "auto paused it" in paused
    cpu = speed_verdict(0.8, 10.0, 8.0, {"acceptance_rate": 0.9, "draft_max": 3})
    assert "costs nearly as much" in cpu and "try draft length auto" in cpu
    # already auto: no advice to choose what was chosen
    auto = speed_verdict(0.83, 10.0, 8.3, {"acceptance_rate": 0.74, "draft_max": "auto", "mean_draft_length": 1.0})
    assert "costs nearly as much" in auto and "try draft length auto" not in auto, auto
    busy = speed_verdict(1.0, 6.1, 6.1, {}, usual_tps=44.0)
    assert "it was busy" in busy and "44.0" in busy
    assert "busy" not in speed_verdict(1.0, 43.0, 43.0, {}, usual_tps=44.0)


def test_every_number_and_mtp_are_explained(qtbot, win, monkeypatch):
    for key, (label, _) in win.stats_bar.labels.items():
        assert len(label.toolTip()) > 30, key
    assert "same answer" in win.mtp_switch.toolTip().lower()
    shown = []
    monkeypatch.setattr(QMessageBox, "information", lambda parent, title, text: shown.append(text))
    help_menu = next(a.menu() for a in win.menuBar().actions() if a.text() == "&Help")
    next(a for a in help_menu.actions() if a.text() == "How MTP works").trigger()
    assert shown and "exactly the same" in shown[0]


@pytest.mark.parametrize("text,title", [
    ("```python\nprint(1)\n```\nWhy does this print 1?", "Why does this print 1?"),
    ("# Plan\nsecond line", "Plan"),
    ("```\nonly code\n```", "Code snippet"),
    ("Please explain how speculative decoding works in llama.cpp and why it is lossless",
     "Please explain how speculative decoding works…"),
])
def test_chat_titles_come_from_the_first_line_of_prose(text, title):
    from app.core.store import chat_title

    assert chat_title(text) == title


def test_exports_close_fences_and_carry_models(tmp_path):
    import json

    from app.core.chat_types import ChatOptions
    from app.core.store import file_name

    s = Store(tmp_path / "c.sqlite3")
    cid = s.create_conversation("```python", ChatOptions(draft_max=3))
    s.add_message(cid, "user", "write code")
    s.add_message(cid, "assistant", "Here:\n```python\nprint(1)\n")  # cut off inside the block
    md = s.export_markdown(cid)
    assert sum(1 for line in md.splitlines() if line.startswith("```")) % 2 == 0  # every block closed
    data = json.loads(s.export_json(cid, models={"target": "t.gguf", "drafter": "d.gguf"},
                                    app_settings={"temperature": 0.0}))
    assert data["models"]["target"] == "t.gguf" and data["generation"]["temperature"] == 0.0
    assert data["settings"]["draft_max"] == 3 and data["settings"]["use_mtp"] is True
    assert file_name('a/b:c*?"<>|') == "a b c" and file_name("```python") == "```python"
    assert file_name("...") == "chat"
    s.close()


def test_chat_list_groups_by_date_deletes_with_the_key_and_multi_select(qtbot, tmp_path, tiny, monkeypatch):
    import sqlite3

    from PySide6.QtCore import Qt as QtCore_Qt

    from app.ui.chat_list import date_group

    now = time.time()
    assert date_group(now, now) == "Today" and date_group(now - 86400, now) == "Yesterday"
    assert date_group(now - 3 * 86400, now) == "Previous 7 days" and date_group(now - 30 * 86400, now) == "Older"
    store = Store(tmp_path / "chats.sqlite3")
    ids = [store.create_conversation(f"chat {i}") for i in range(3)]
    store.db.execute("UPDATE conversations SET updated=? WHERE id=?", (now - 40 * 86400, ids[0]))
    store.db.commit()
    store.close()
    w = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0])
    rows = [w.chat_list.list.item(i).text() for i in range(w.chat_list.list.count())]
    assert rows[0] == "Today" and "Older" in rows and rows[-1] == "chat 0"
    monkeypatch.setattr("app.ui.chat_list.message", lambda *a: QMessageBox.Yes)
    lst = w.chat_list.list
    lst.clearSelection()
    for i in range(lst.count()):
        if lst.item(i).text() in ("chat 1", "chat 2"):
            lst.item(i).setSelected(True)
    lst.setFocus()
    qtbot.keyClick(lst, QtCore_Qt.Key_Delete)
    assert "chat 1" not in w.chat_list.titles() and "chat 2" not in w.chat_list.titles()
    assert "chat 0" in w.chat_list.titles()
    assert sqlite3.connect(tmp_path / "chats.sqlite3").execute("SELECT COUNT(*) FROM conversations "
                                                               "WHERE title LIKE 'chat %'").fetchone()[0] == 1
    w.close()


def test_daily_basics_examples_tab_font_and_geometry(qtbot, tmp_path, tiny):
    from PySide6.QtCore import QRect
    from PySide6.QtWidgets import QApplication

    from app.ui.theme import apply_theme

    apply_theme(QApplication.instance(), "light")  # as `tandem` starts: the app's style sheet is set
    w = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0])
    w.new_conversation()
    assert w.chat_view.empty_state.isVisible()  # a new chat offers example prompts
    w.chat_view.empty_state.findChildren(QToolButton)[2].click()  # the speed demo
    qtbot.waitUntil(lambda: not w.session.busy and len(w.chat_view.widgets()) == 2, timeout=TIMEOUT)
    assert not w.chat_view.empty_state.isVisible()
    assert w.chat_view.widgets()[0].text.startswith("Count from one to fifty")
    assert w.input.tabChangesFocus()  # Tab leaves the input box
    # View → Larger text reaches what the user reads: the input, the messages, the chat list
    view = next(a.menu() for a in w.menuBar().actions() if a.text() == "&View")
    larger = {a.text(): a for a in view.actions()}

    def sizes():
        reply = w.chat_view.widgets()[-1]
        return [x.font().pointSizeF() for x in (w.input, reply.body, w.chat_list)]

    base = sizes()
    larger["Larger text"].trigger()
    larger["Larger text"].trigger()
    assert w.settings["font_scale"] == 1.2
    assert sizes() == pytest.approx([b * 1.2 for b in base], rel=0.02)
    larger["Normal text size"].trigger()
    assert sizes() == pytest.approx(base, rel=0.01)
    w.setGeometry(QRect(40, 50, 1200, 640))
    assert (w.width(), w.height()) == (1200, 640)  # the example prompts do not force it wider
    w.close()
    assert Settings(tmp_path / "settings.json")["geometry"]  # saved on close
    w2 = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0])
    assert w2.height() == 640  # restored (the offscreen platform clamps widths to its screen)
    w2.close()


def test_per_chat_system_prompt(qtbot, win):
    from app.ui.dialogs.system_prompt import PRESETS, SystemPromptDialog

    win.settings["system_prompt"] = "Default instructions."
    assert win.session.history()[:1] == [] or win.session.history()[0]["content"] == "Default instructions."
    win.session.set_system_prompt(PRESETS["Concise"])
    win.mtp_switch.setChecked(not win.mtp_switch.isChecked())  # other chat settings keep it
    assert win.session.with_system([])[0] == {"role": "system", "content": PRESETS["Concise"]}
    first = win.session.conversation_id
    win.new_conversation()
    assert win.session.with_system([])[0]["content"] == "Default instructions."  # other chats: the default
    win.open_conversation(first)
    assert win.session.with_system([])[0]["content"] == PRESETS["Concise"]
    dlg = SystemPromptDialog(PRESETS["Concise"])
    qtbot.addWidget(dlg)
    assert dlg.preset.currentText() == "Concise"
    dlg.preset.setCurrentText("Coding assistant")
    assert dlg.value() == PRESETS["Coding assistant"]


def test_speed_charts_have_axes_overlay_compare_and_show_acceptance_bars(qtbot, win):
    from app.core.help_text import position_bars

    chart, bars = win.stats_bar.chart, win.stats_bar.bars
    assert chart.units == {"left": "tok/s", "bottom": "seconds"}
    assert "tok/s over seconds" in chart.getPlotItem().titleLabel.text
    win.draft_spin.setValue(3)
    send(qtbot, win, "a b c d e f g")
    assert set(chart.series) == {"MTP + lookup"} and len(bars.values) == 3  # named by what drafted
    win.input.setPlainText("The quick brown fox")
    qtbot.mouseClick(win.compare_btn, Qt.LeftButton)
    page = win.compare_page
    qtbot.waitUntil(lambda: page.concluded, timeout=TIMEOUT)
    assert set(chart.series) == {"baseline", "MTP + lookup"}  # both runs on one chart
    assert len(chart.series["baseline"][0]) >= 1 and len(chart.series["MTP + lookup"][0]) >= 1
    # one acceptance: the strip and the bars show the drafting runs together, as the verdict does
    together = page.run.drafting_stats()
    assert [round(v, 6) for v in bars.values] == [round(v, 6) for v in position_bars(together)[0]]
    assert win.stats_bar.labels["accept"][0].text() == f"accepted: {together['acceptance_rate'] * 100:.0f} %"
    assert bars.getPlotItem().titleLabel.text.endswith(f"(all: {together['acceptance_rate'] * 100:.0f} %)")
    assert "MTP + lookup drafting" in page.mtp.title.text()
    # View → Speed charts hides them, and the choice is kept
    win.charts_act.setChecked(False)
    assert win.stats_bar.charts.isHidden() and win.settings["show_charts"] is False
    n = len(chart.points)
    send(qtbot, win, "zzz yyy")
    assert n > 0 and len(chart.points) == 0  # cleared for the reply, and a hidden chart draws nothing


def test_switching_chats_shows_that_chats_numbers_not_the_previous_ones(qtbot, win):
    win.draft_spin.setValue(2)
    send(qtbot, win, "a b c d e f g")
    first = win.stats_bar.labels["decode"][0].text()
    assert first != "tok/s: –" and len(win.stats_bar.chart.points) >= 1
    first_chat = win.session.conversation_id
    win.new_conversation()
    assert win.stats_bar.labels["decode"][0].text() == "tok/s: –"  # a new chat has no numbers yet
    assert win.stats_bar.chart.points == [] and win.stats_bar.bars.values == []
    chart = win.stats_bar.chart
    # nor the last reply's axes
    assert chart.getPlotItem().vb.viewRange()[1][1] < 2.0, chart.getPlotItem().vb.viewRange()
    line = [p for p in win.store.messages(first_chat)[-1].stats["speeds"]]
    win.open_conversation(first_chat)  # back: its last reply's numbers, bars and speed line again
    assert win.stats_bar.labels["decode"][0].text() == first
    assert win.stats_bar.labels["k"][0].text() == "MTP + lookup k: 2" and len(win.stats_bar.bars.values) == 2
    assert line and [list(p) for p in chart.points] == line
    # a reply of one point is a line from its first token, not a dot
    x, y = next(iter(chart.series.values()))[2].getData()
    assert len(x) >= 2 and x[0] < x[-1], (x, y)


def test_usable_at_800_by_600(qtbot, win):
    from PySide6.QtCore import QPoint

    win.draft_spin.setValue(0)
    win.settings["max_tokens"] = 200
    send(qtbot, win, "Hello world, this is a test")  # a long footer and stats in the window
    win.input.setPlainText("a b c")
    win.compare()  # the compare page's long footers too
    qtbot.waitUntil(lambda: win.compare_page.concluded, timeout=TIMEOUT)
    win.stack.setCurrentIndex(0)
    win.resize(800, 600)
    qtbot.waitUntil(lambda: win.size().width() == 800 and win.size().height() == 600, timeout=5000)

    def laid_out():  # the stats fold into two rows on the resize (a layout pass or two later)
        assert win.stats_bar.charts.isHidden()  # folded away below 700 px: the chat keeps its room
        for w in (win.picker, win.mtp_switch, win.draft_spin, win.think_switch, win.compare_btn,
                  win.toolbar.help_btn, win.toolbar.settings_btn, win.send_btn,
                  *[lab for lab, _ in win.stats_bar.labels.values()]):
            right = w.mapTo(win, QPoint(w.width(), 0)).x()
            assert w.isVisible() and right <= win.width(), w
            assert w.width() >= w.minimumSizeHint().width(), w  # nothing squeezed below its text

    qtbot.waitUntil(laid_out, timeout=5000)
    assert win.chat_view.scroll.height() > 150 and win.input.isVisible()
    assert win.settings.get("show_charts", True) is True  # folding is not the user's choice: kept


def test_switching_chats_leaves_no_old_message_on_screen(qtbot, win):
    from app.ui.widgets import MessageWidget

    send(qtbot, win, "first chat")
    win.new_conversation()  # no event loop turn in between: a deferred delete has not run yet
    assert [w for w in win.chat_view.host.findChildren(MessageWidget) if w.isVisible()] == []


def test_the_token_origin_legend_has_the_themes_colours(qtbot, win):
    """The legend's chips are the tints the tokens get: dark ones in the dark theme."""
    from app.ui.render import DRAFTED_DARK, DRAFTED_LIGHT, LOOKUP_DARK, TARGET_DARK

    win.toggle_origins(True)
    assert DRAFTED_LIGHT in win.origin_legend.text()
    win.settings["theme"] = "dark"
    try:
        win.restyle()
        legend = win.origin_legend.text()
        assert all(c in legend for c in (DRAFTED_DARK, LOOKUP_DARK, TARGET_DARK)), legend
    finally:
        win.settings["theme"] = "light"
        win.restyle()
    assert DRAFTED_LIGHT in win.origin_legend.text()


def test_a_reply_that_fills_the_context_says_so(qtbot, tmp_path, tiny):
    w = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7], n_ctx=256, max_tokens=2000)
    try:
        reply = send(qtbot, w, "Hello world, this is a test")  # the synthetic model writes on and on
        assert reply.stats["finish_reason"] == "context"
        assert reply.footer.text().endswith(" · cut: the context is full")
        assert w.statusBar().currentMessage().startswith("The reply filled the model's context (256 tokens)")
        assert not reply.buttons["continue"].isVisible()  # nothing more fits: Continue would only fail
    finally:
        w.close()

