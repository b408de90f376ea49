"""The window's "Serve on localhost": the loaded pair answers an editor's (the openai SDK's)
request with MTP, the request appears in the live log, and the window's own chat shares the
engine in turn."""

from __future__ import annotations

import openai

from .llamaserver import free_port
from .test_app import TIMEOUT, make_window, send


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
    assert "32 tokens" in panel.log.item(0).text() and "accepted" in panel.log.item(0).text()
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
