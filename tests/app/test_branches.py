"""Every version of a message is kept: edits and regenerations are branches with < n/m >
arrows, and a reply cut at max tokens can be continued. Store first, then the real window."""

from __future__ import annotations

import sqlite3

from PySide6.QtCore import Qt

from app.core.store import Store

from ..support.window import TIMEOUT, make_window, send


def test_regenerate_and_edit_keep_every_version(tmp_path):
    s = Store(tmp_path / "c.sqlite3")
    cid = s.create_conversation()
    u1 = s.add_message(cid, "user", "q1")
    a1 = s.add_message(cid, "assistant", "a1")
    u2 = s.add_message(cid, "user", "q2")
    a2 = s.add_message(cid, "assistant", "a2")
    a2b = s.add_message(cid, "assistant", "a2 again", parent=u2)  # regenerate
    assert [m.content for m in s.messages(cid)] == ["q1", "a1", "q2", "a2 again"]
    assert (s.messages(cid)[-1].version, s.messages(cid)[-1].versions) == (2, 2)
    u2b = s.add_message(cid, "user", "q2 edited", parent=a1)  # edit q2
    s.add_message(cid, "assistant", "a2 for the edit")
    m = s.messages(cid)
    assert [x.content for x in m] == ["q1", "a1", "q2 edited", "a2 for the edit"]
    assert (m[2].version, m[2].versions, m[3].versions) == (2, 2, 1)
    # back to the first q2: its newest answer comes with it
    assert s.show_version(cid, u2b, -1) == u2
    assert [x.content for x in s.messages(cid)] == ["q1", "a1", "q2", "a2 again"]
    assert s.show_version(cid, a2b, -1) == a2
    assert [x.content for x in s.messages(cid)] == ["q1", "a1", "q2", "a2"]
    assert s.show_version(cid, a2, -1) == a2  # the first version stays first
    # exports follow what is shown; a reopened store shows the same path
    assert "a2 again" not in s.export_markdown(cid) and "**Gemma:**\n\na2\n" in s.export_markdown(cid)
    s.close()
    s = Store(tmp_path / "c.sqlite3")
    assert [x.content for x in s.messages(cid)] == ["q1", "a1", "q2", "a2"]
    assert len(s.db.execute("SELECT id FROM messages").fetchall()) == 7  # nothing was ever deleted
    # a reply that never started is removed and the chat ends at its question again
    empty = s.add_message(cid, "assistant", "", parent=u1)
    s.delete_message(cid, empty)
    assert [x.content for x in s.messages(cid)] == ["q1"]


def test_chats_saved_before_branches_open_unchanged(tmp_path):
    """A database from the previous version (no parent_id, no leaf_id) is migrated in place."""
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL,
            updated REAL NOT NULL, settings TEXT NOT NULL DEFAULT '{}');
        CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL
            REFERENCES conversations(id) ON DELETE CASCADE, role TEXT NOT NULL, content TEXT NOT NULL DEFAULT '',
            thinking TEXT NOT NULL DEFAULT '', stats TEXT, origins TEXT, created REAL NOT NULL);
        INSERT INTO conversations VALUES (1, 'one', 0, 0, '{}'), (2, 'two', 0, 0, '{}');
        INSERT INTO messages(id, conversation_id, role, content, created) VALUES
            (1, 1, 'user', 'a', 0), (2, 2, 'user', 'x', 0), (3, 1, 'assistant', 'b', 0),
            (4, 2, 'assistant', 'y', 0), (5, 1, 'user', 'c', 0);
    """)
    db.commit()
    db.close()
    s = Store(path)
    assert [m.content for m in s.messages(1)] == ["a", "b", "c"]
    assert [m.content for m in s.messages(2)] == ["x", "y"]
    s.add_message(1, "assistant", "d")
    assert [m.content for m in s.messages(1)] == ["a", "b", "c", "d"]


def _shown(win):
    return [(w.role, w.text) for w in win.chat_view.widgets() if not w.isHidden()]


def test_window_regenerate_edit_and_arrows(qtbot, tmp_path, tiny):
    win = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7], temperature=0.8, max_tokens=30)
    send(qtbot, win, "first question")
    send(qtbot, win, "second question")
    before = _shown(win)
    reply = win.chat_view.widgets()[-1]
    reply.action.emit("regenerate", reply)
    qtbot.waitUntil(lambda: not win.session.busy, timeout=TIMEOUT)
    ws = win.chat_view.widgets()
    assert len(ws) == 4 and ws[-1].version_label.text() == "2 / 2" and not ws[-1].version_label.isHidden()
    second = ws[-1].text
    ws[-1].action.emit("previous", ws[-1])  # back to the first answer
    assert _shown(win) == before
    assert win.chat_view.widgets()[-1].version_label.text() == "1 / 2"
    win.chat_view.widgets()[-1].action.emit("next", win.chat_view.widgets()[-1])
    assert win.chat_view.widgets()[-1].text == second

    # edit the FIRST question: a new branch from the start; the old one stays reachable
    first_q = win.chat_view.widgets()[0]
    first_q.action.emit("edit", first_q)
    assert win.input.toPlainText() == "first question" and not win.edit_banner.isHidden()
    assert _shown(win) == []  # the edited message and what followed are out of view while editing
    qtbot.keyClick(win.input, Qt.Key_Escape)  # Esc cancels the edit
    assert win.edit_banner.isHidden() and len(_shown(win)) == 4
    first_q.action.emit("edit", first_q)
    send(qtbot, win, "first question, edited")
    ws = win.chat_view.widgets()
    assert [w.text for w in ws][0] == "first question, edited" and len(ws) == 2
    assert ws[0].version_label.text() == "2 / 2"
    ws[0].action.emit("previous", ws[0])
    assert [w.text for w in win.chat_view.widgets()][:3] == ["first question", before[1][1], "second question"]
    assert len(win.store.db.execute("SELECT id FROM messages").fetchall()) == 7
    win.close()


def test_continue_a_reply_cut_at_max_tokens(qtbot, tmp_path, tiny):
    win = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7], max_tokens=16)
    reply = send(qtbot, win, "Hello world, this is a test")
    assert reply.stats["finish_reason"] == "length" and reply.buttons["continue"].isVisible()
    cut, n_cut = reply.text, len(reply.origins)
    reply.action.emit("continue", reply)
    qtbot.waitUntil(lambda: not win.session.busy, timeout=TIMEOUT)
    ws = win.chat_view.widgets()
    assert len(ws) == 2 and ws[-1].text.startswith(cut) and len(ws[-1].text) > len(cut)
    stored = win.store.messages(win.session.conversation_id)[-1]
    assert stored.content == ws[-1].text and len(stored.origins) > n_cut  # both parts' tokens
    assert "".join(t for t, _ in stored.origins) == stored.content
    # the same 32 tokens in one go give the same text (greedy)
    win.settings["max_tokens"] = 32
    reply.action.emit("regenerate", ws[-1])
    qtbot.waitUntil(lambda: not win.session.busy, timeout=TIMEOUT)
    assert win.chat_view.widgets()[-1].text == stored.content
    win.close()
