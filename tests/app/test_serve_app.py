"""The window's "Serve on localhost": the loaded pair answers an editor's (the openai SDK's)
request with MTP, the request appears in the live log, and the window's own chat shares the
engine together (overlapping either way, neither reply is cut, each decoded on its own sequence)."""

from __future__ import annotations

import openai
from PySide6.QtCore import Qt

from ..support.llamaserver import free_port
from ..support.window import TIMEOUT, make_window, send


def serving(qtbot, tmp_path, tiny):
    """A window with the tiny pair, serving on a free port: (window, its server panel)."""
    win = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7])
    win.open_server()
    panel = win.server_panel
    panel.port.setValue(free_port())
    panel.switch.setChecked(True)
    return win, panel


def test_serve_on_localhost_from_the_window(qtbot, tmp_path, tiny):
    win, panel = serving(qtbot, tmp_path, tiny)
    assert panel.server is not None and panel.url.text().startswith("http://127.0.0.1:")
    assert win.serve_label.isVisible() and panel.url.text() in win.serve_label.text()
    c = openai.OpenAI(base_url=panel.url.text(), api_key="any", max_retries=0, timeout=60)
    # a fixed draft length: on this CPU, auto may rightly pause drafting for the tiny pair
    r = c.chat.completions.create(model="tiny-target", max_tokens=32, extra_body={"tandem": {"draft_max": 3}},
                                  messages=[{"role": "user", "content": "Hello world, this is a test"}])
    assert r.choices[0].message.content and r.model_extra["timings"]["draft_n_accepted"] > 0
    qtbot.waitUntil(lambda: panel.log.count() == 1, timeout=TIMEOUT)
    assert "OpenAI chat" in panel.log.item(0).text() and "32 tokens" in panel.log.item(0).text() and "accepted" in panel.log.item(0).text()
    assert send(qtbot, win, "and the window still chats").stats["mode"] == "hybrid"  # the engine, in turn
    panel.switch.setChecked(False)
    assert panel.server is None and not win.serve_label.isVisible()
    try:
        c.models.list()
        raise AssertionError("still serving")
    except openai.APIConnectionError:
        pass
    win.close()


def test_loading_another_model_while_serving_serves_that_one(qtbot, tmp_path, tiny):
    import shutil

    win, panel = serving(qtbot, tmp_path, tiny)
    c = openai.OpenAI(base_url=panel.url.text(), api_key="any", max_retries=0, timeout=60)
    assert [m.id for m in c.models.list().data] == ["tiny-target"]
    other = tmp_path / "other"
    other.mkdir()
    t = shutil.copy(tiny["target"], other / "second-model.gguf")
    win.load_models(str(t), "")
    qtbot.waitUntil(lambda: win.session.model_info is not None and win.session.model_info.target == str(t), timeout=TIMEOUT)
    assert [m.id for m in c.models.list().data] == ["second-model"]
    r = c.chat.completions.create(model="second-model", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content and "draft_n" not in r.model_extra["timings"]  # no drafter now
    panel.switch.setChecked(False)
    win.close()


def test_the_window_and_an_editor_overlap_and_neither_is_cut(qtbot, tmp_path, tiny):
    """An editor's request arrives while the window's reply streams: it waits for its turn, and
    both replies are whole."""
    import threading

    win, panel = serving(qtbot, tmp_path, tiny)
    win.settings["max_tokens"] = 300
    c = openai.OpenAI(base_url=panel.url.text(), api_key="any", max_retries=0, timeout=120)
    got = []
    win.input.setPlainText("Hello world, this is a test")
    qtbot.keyClick(win.input, Qt.Key_Return)
    qtbot.waitUntil(lambda: len(win.chat_view.widgets()[-1].text) > 0, timeout=TIMEOUT)  # it streams
    editor = threading.Thread(target=lambda: got.append(c.chat.completions.create(
        model="tiny-target", max_tokens=40, messages=[{"role": "user", "content": "hi"}])))
    editor.start()
    qtbot.waitUntil(lambda: not win.session.busy, timeout=TIMEOUT)
    editor.join(120)
    reply = win.chat_view.widgets()[-1]
    assert reply.stats["generated_tokens"] == 300 and reply.stats["finish_reason"] == "length", reply.stats
    assert got and got[0].usage.completion_tokens == 40
    panel.switch.setChecked(False)
    win.close()


def test_the_window_chats_while_an_editors_reply_streams(qtbot, tmp_path, tiny):
    """The window is a client like the others: its reply decodes together with an editor's
    (each on its own sequence), so the shorter reply started later ends first; a Stop in the
    window stops only the window's reply."""
    import threading

    win, panel = serving(qtbot, tmp_path, tiny)
    win.settings["max_tokens"] = 120
    c = openai.OpenAI(base_url=panel.url.text(), api_key="any", max_retries=0, timeout=120)
    got = []
    started = threading.Event()

    def editor():
        finish = None
        for ch in c.chat.completions.create(model="tiny-target", max_tokens=1500, stream=True,
                                            messages=[{"role": "user", "content": "hi"}]):
            finish = (ch.choices[0].finish_reason if ch.choices else None) or finish
            started.set()
        got.append(finish)

    t = threading.Thread(target=editor)
    t.start()
    qtbot.waitUntil(started.is_set, timeout=TIMEOUT)  # the editor's reply streams
    win.input.setPlainText("Hello world, this is a test")
    qtbot.keyClick(win.input, Qt.Key_Return)
    qtbot.waitUntil(lambda: not win.session.busy, timeout=TIMEOUT)
    reply = win.chat_view.widgets()[-1]
    assert reply.stats["generated_tokens"] == 120 and reply.stats["finish_reason"] == "length", reply.stats
    assert t.is_alive()  # the editor's 1500 tokens still stream: they were not waited for
    # a Stop in the window stops the window's next reply, not the editor's
    win.settings["max_tokens"] = 2000
    win.chat_list.new_btn.click()  # the tiny pair counts on for long in a new chat
    win.input.setPlainText("Count to a thousand")
    qtbot.keyClick(win.input, Qt.Key_Return)
    qtbot.waitUntil(lambda: len(win.chat_view.widgets()[-1].text) > 0, timeout=TIMEOUT)
    win.stop()  # the Stop button's (and Escape's) action
    qtbot.waitUntil(lambda: not win.session.busy, timeout=TIMEOUT)
    assert win.chat_view.widgets()[-1].stats["finish_reason"] == "cancelled"
    t.join(300)
    assert got == ["length"], got  # whole: never stopped by the window's Stop
    panel.switch.setChecked(False)
    win.close()
