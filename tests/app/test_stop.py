"""Stop always stops: before the request reaches the engine thread, while a (runaway) chat
template renders, and when the window closes."""

from __future__ import annotations

import time

from app.core.chat_types import LoadRequest, ReplyRequest, ReplySettings
from app.session.worker import EngineWorker
from engine.gemma4.chat import ChatTemplate

from ..support.window import TIMEOUT, make_window

RUNAWAY = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


def _worker(tiny):
    w = EngineWorker()
    w.load(LoadRequest(target=str(tiny["target"]), drafter=str(tiny[1.0])))
    assert w.engine is not None
    return w


def _collect(w):
    out = {"finished": [], "failed": []}
    w.finished.connect(lambda rid, res: out["finished"].append((rid, res)))
    w.failed.connect(lambda rid, kind, msg: out["failed"].append((rid, kind)))
    return out


def test_stop_before_the_request_starts_is_not_lost(tiny):
    """The GUI's Stop can arrive before the engine thread picks the request up; starting the
    generation used to clear it and the reply ran to the end."""
    w = _worker(tiny)
    try:
        out = _collect(w)
        w.cancel(1)  # Stop for request 1, pressed before the worker got to it
        w.generate(ReplyRequest(1, [{"role": "user", "content": "Hello world"}], ReplySettings(max_tokens=200)))
        assert out["failed"] == [(1, "cancelled")] and not out["finished"]
        # the next request is not affected
        w.generate(ReplyRequest(2, [{"role": "user", "content": "Hello world"}], ReplySettings(max_tokens=20)))
        assert out["finished"][0][1].finish_reason in ("length", "stop")
        assert out["finished"][0][1].stats["generated_tokens"] > 0
    finally:
        w.shutdown()


def test_stop_between_rendering_and_the_first_token(tiny):
    """Stop pressed while the prompt is being prepared (after the engine cleared its flag)."""
    w = _worker(tiny)
    try:
        out = _collect(w)
        real = w.engine.chat

        def chat_then_stop(*a, **k):
            events = real(*a, **k)
            w.cancel(1)  # lands after generate() started: the request's should_stop catches it
            return events

        w.engine.chat = chat_then_stop
        w.generate(ReplyRequest(1, [{"role": "user", "content": "Hello world"}], ReplySettings(max_tokens=200)))
        assert out["finished"][0][1].finish_reason == "cancelled"
        assert out["finished"][0][1].stats["generated_tokens"] == 0
    finally:
        w.shutdown()


def test_stop_and_close_during_a_runaway_template(qtbot, tmp_path, tiny):
    win = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0])
    win.session.worker.engine.template = ChatTemplate(RUNAWAY)  # as if the model file carried it
    win.input.setPlainText("hello")
    win.send()
    qtbot.wait(300)  # into the template's render, which says nothing the window could wait on
    assert win.session.busy
    win.stop()
    qtbot.waitUntil(lambda: not win.session.busy, timeout=5000)  # far below the 10 s render limit
    assert win.send_btn.text() == "Send"
    # a second runaway request, then closing the window while it renders
    win.input.setPlainText("again")
    win.send()
    qtbot.wait(300)  # into the render again
    t0 = time.monotonic()
    win.close()
    assert time.monotonic() - t0 < TIMEOUT / 1000
    assert not win.session.thread.isRunning()
