"""Daily basics people expect from a chat app (issue 33, item 9): find in the chat, shortcuts
and their list, right-click on a chat, long titles elided, charts per chat, drafts per chat.
The real window, offscreen, on the tiny synthetic models."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt, QTimer
from PySide6.QtGui import QContextMenuEvent, QKeySequence
from PySide6.QtWidgets import QApplication

from ..support.window import TIMEOUT, make_window, send


@pytest.fixture
def win(win):
    win.settings["max_tokens"] = 24  # short replies: these tests are about the window, not the text
    return win


def _action(win, text):
    """The window's menu entry whose text starts with `text`."""
    for menu in win.menuBar().actions():
        for act in menu.menu().actions():
            if act.text().replace("&", "").startswith(text):
                return act
    raise AssertionError(f"no menu entry {text!r}")


def _shown_matches(win, word):
    return sum(w.body.toPlainText().lower().count(word) for w in win.chat_view.widgets())


def test_ctrl_f_finds_in_the_chat_steps_through_matches_and_esc_closes(qtbot, win):
    send(qtbot, win, "Quokka one")
    send(qtbot, win, "Two quokka and a quokka")
    n = _shown_matches(win, "quokka")
    assert n >= 3
    qtbot.keyClick(win.input, Qt.Key_F, Qt.ControlModifier)
    bar = win.find_bar
    qtbot.waitUntil(lambda: bar.isVisible() and bar.edit.hasFocus(), timeout=5000)
    qtbot.keyClicks(bar.edit, "QUOKKA")  # case does not matter
    assert bar.count.text() == f"1 of {n}"
    w, cur = bar.current_match()
    assert cur.selectedText().lower() == "quokka" and w.body.extraSelections()  # highlighted
    qtbot.keyClick(bar.edit, Qt.Key_Return)
    assert bar.count.text() == f"2 of {n}"
    qtbot.keyClick(win.input, Qt.Key_F3)  # F3 works wherever the focus is
    assert bar.count.text() == f"3 of {n}"
    qtbot.keyClick(bar.edit, Qt.Key_Return, Qt.ShiftModifier)
    assert bar.count.text() == f"2 of {n}"
    qtbot.keyClick(bar.edit, Qt.Key_F3, Qt.ShiftModifier)
    assert bar.count.text() == f"1 of {n}"
    qtbot.keyClick(bar.edit, Qt.Key_Return, Qt.ShiftModifier)  # round from the first to the last
    assert bar.count.text() == f"{n} of {n}"
    bar.edit.setText("no such word anywhere")
    assert bar.count.text() == "No matches"
    assert not any(w.body.extraSelections() for w in win.chat_view.widgets())
    qtbot.keyClick(bar.edit, Qt.Key_Escape)  # Esc in the find bar closes it, and stops nothing
    assert not bar.isVisible()
    assert win.input.hasFocus() or not win.isActiveWindow()


def test_esc_stops_a_reply_even_with_the_find_bar_open(qtbot, win):
    """The find bar takes Esc only when it has the focus: Esc in the input still stops a reply."""
    send(qtbot, win, "a b c")
    qtbot.keyClick(win.input, Qt.Key_F, Qt.ControlModifier)
    win.input.setFocus()  # back to the input, as a click there does
    qtbot.waitUntil(lambda: win.input.hasFocus(), timeout=5000)
    win.settings["max_tokens"] = 100000
    win.input.setPlainText("d e f")
    qtbot.keyClick(win.input, Qt.Key_Return)
    qtbot.waitUntil(lambda: win.session.busy, timeout=TIMEOUT)
    qtbot.keyClick(win.input, Qt.Key_Escape)
    qtbot.waitUntil(lambda: not win.session.busy, timeout=TIMEOUT)
    assert win.find_bar.isVisible()
    qtbot.keyClick(win.input, Qt.Key_Escape)  # nothing left to stop: Esc closes the bar
    assert not win.find_bar.isVisible()


def test_shortcuts_for_settings_and_tools_and_their_list(qtbot, win):
    assert _action(win, "Settings").shortcut() == QKeySequence("Ctrl+,")
    assert _action(win, "Tools").shortcut() == QKeySequence("Ctrl+T")
    keys = [a.shortcut() for a in win.findChildren(type(_action(win, "Quit"))) if not a.shortcut().isEmpty()]
    assert len(keys) == len(set(k.toString() for k in keys))  # no key does two things
    _action(win, "Keyboard shortcuts").trigger()
    qtbot.waitUntil(lambda: win.shortcuts_dialog is not None and win.shortcuts_dialog.isVisible(), timeout=5000)
    rows = win.shortcuts_dialog.rows()
    listed = {what: key for key, what in rows}
    for text, key in (("Settings", "Ctrl+,"), ("Tools (MCP servers)", "Ctrl+T"), ("Find in chat", "Ctrl+F"),
                      ("New chat", QKeySequence(QKeySequence.New).toString(QKeySequence.NativeText))):
        assert listed.get(text) == QKeySequence(key).toString(QKeySequence.NativeText), (text, rows)
    assert any(key == "Esc" for key, _ in rows) and any(key == "Shift+Enter" for key, _ in rows)
    delete = QKeySequence(QKeySequence.Delete).toString(QKeySequence.NativeText)
    assert (delete, "Delete the selected chats (in the chat list)") in rows  # the list's own key too
    win.shortcuts_dialog.close()


def test_ctrl_n_in_the_input_box_starts_a_new_chat_or_says_why_not(qtbot, win):
    """Ctrl+N typed in the input box (the keys, not the method): a new chat; while a reply is
    written, one line why not; in a chat that is new already, one line saying so."""
    send(qtbot, win, "the first chat")
    first = win.session.conversation_id
    win.input.setFocus()
    qtbot.keyClick(win.input, Qt.Key_N, Qt.ControlModifier)
    qtbot.waitUntil(lambda: win.session.conversation_id != first, timeout=5000)
    assert win.chat_view.widgets() == [] and win.input.hasFocus()
    qtbot.keyClick(win.input, Qt.Key_N, Qt.ControlModifier)
    assert "new already" in win.statusBar().currentMessage()
    win.open_conversation(first)
    win.settings["max_tokens"] = 400
    win.input.setPlainText("a long one")
    win.send()
    assert win.session.busy
    qtbot.keyClick(win.input, Qt.Key_N, Qt.ControlModifier)
    assert win.session.conversation_id == first and "stop it (Esc)" in win.statusBar().currentMessage()
    win.stop()
    qtbot.waitUntil(lambda: not win.session.busy, timeout=10000)


def _close_menu_soon():
    def close():
        menu = QApplication.activePopupWidget()
        menu.close() if menu is not None else QTimer.singleShot(20, close)
    QTimer.singleShot(20, close)


def test_right_click_on_a_chat_opens_it_then_shows_its_menu(qtbot, win):
    send(qtbot, win, "the first chat")
    first = win.session.conversation_id
    win.new_conversation()
    lst = win.chat_list.list
    item = next(lst.item(i) for i in range(lst.count()) if lst.item(i).data(Qt.UserRole) == first)
    at = lst.visualItemRect(item).topLeft() + QPoint(10, 4)
    _close_menu_soon()
    # a right-click: the press (it selects the row), then the context menu event the platform sends
    # (QTest's clicks do not make one)
    qtbot.mouseClick(lst.viewport(), Qt.RightButton, pos=at)
    QApplication.sendEvent(lst.viewport(), QContextMenuEvent(QContextMenuEvent.Mouse, at,
                                                            lst.viewport().mapToGlobal(at)))
    qtbot.waitUntil(lambda: win.session.conversation_id == first, timeout=5000)
    assert [w.text for w in win.chat_view.widgets()][0] == "the first chat"
    assert win.chat_list.selected_ids() == [first]


def test_long_chat_titles_are_elided_with_the_full_title_in_a_tooltip(qtbot, win):
    send(qtbot, win, "short")
    title = "A very long chat title that goes on and on about many things " * 3
    win.rename_conversation(win.session.conversation_id, title.strip())
    lst = win.chat_list.list
    item = next(lst.item(i) for i in range(lst.count()) if lst.item(i).data(Qt.UserRole) is not None)
    qtbot.waitUntil(lambda: lst.viewport().width() > 0, timeout=5000)
    assert lst.horizontalScrollBarPolicy() == Qt.ScrollBarAlwaysOff
    assert lst.visualItemRect(item).right() <= lst.viewport().width()  # the text is cut to fit: "…"
    assert title.strip() in item.toolTip()


def test_charts_hidden_while_switching_chats_show_that_chats_bars_when_shown(qtbot, win):
    win.draft_spin.setValue(2)
    send(qtbot, win, "a b c d e f g")
    first = win.session.conversation_id
    win.new_conversation()
    win.charts_act.setChecked(False)
    win.open_conversation(first)
    win.charts_act.setChecked(True)
    assert len(win.stats_bar.bars.values) == 2  # this chat's bars, not none
    win.charts_act.setChecked(False)
    win.new_conversation()
    win.charts_act.setChecked(True)
    assert win.stats_bar.bars.values == [] and win.stats_bar.chart.points == []


def test_the_draft_in_the_input_belongs_to_its_chat(qtbot, win, tmp_path):
    from app.ui.attachments import check

    send(qtbot, win, "chat A")
    a = win.session.conversation_id
    win.input.setPlainText("half a thought for A")
    win.composer.add_attachments([check(b"print(1)\n", "a.py")])
    win.new_conversation()
    b = win.session.conversation_id
    assert win.input.toPlainText() == "" and win.attach_bar.items == []
    win.input.setPlainText("B's own draft")
    win.open_conversation(a)
    assert win.input.toPlainText() == "half a thought for A"
    assert [i.name for i in win.attach_bar.items] == ["a.py"]
    win.open_conversation(b)
    assert win.input.toPlainText() == "B's own draft" and win.attach_bar.items == []
    settings = win.settings
    win.close()  # the text and the files survive a restart
    w2 = make_window(qtbot, tmp_path, settings["target"], settings["drafter"])
    drafts = {a: ("half a thought for A", ["a.py"]), b: ("B's own draft", [])}
    opened = w2.session.conversation_id
    for cid in (opened, a if opened == b else b):
        if cid != opened:
            w2.open_conversation(cid)
        assert (w2.input.toPlainText(), [i.name for i in w2.attach_bar.items]) == drafts[cid]
    w2.open_conversation(a)
    assert w2.attach_bar.items[0].data == b"print(1)\n" and w2.attach_bar.items[0].kind == "text"
    w2.close()
