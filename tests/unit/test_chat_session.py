"""The reply rules of `ChatSession`, against a stand-in engine worker that answers at once:
no model, no thread, milliseconds a test (the Mu editor tests its logic the same way). The real
worker and engine are exercised by test_app.py and the tests next to it."""

from __future__ import annotations

import inspect

import pytest
from PySide6.QtCore import QMetaMethod, QObject, Signal

from app.session.chat_session import ChatSession
from app.core.chat_types import ModelInfo, ReplyResult
from app.ui.chat_view import ChatView
from app.core.settings import Settings
from app.core.store import Store
from app.session.worker import EngineWorker
from engine.generation import AUTO

# The stand-in's signals are the real worker's own Signal objects, taken at import: a signal the
# worker gains or changes is the stand-in's too (test_the_stand_in_is_the_real_workers_shape checks the rest).
WorkerSignals = type("WorkerSignals", (QObject,), {
    name: sig for name in dir(EngineWorker)
    if isinstance(sig := getattr(EngineWorker, name), Signal) and not hasattr(QObject, name)})
TEST_SIDE = {"reply", "fail"}  # the stand-in's own methods: the engine's answers, as the test gives them


class FakeWorker(WorkerSignals):
    """The EngineWorker's signals and its public methods; requests are kept for the test to answer."""

    def __init__(self):
        super().__init__()
        self.engine = None
        self.requests, self.loads, self.cancelled = [], [], []

    def load(self, req):
        self.loads.append(req)

    def generate(self, req):
        self.requests.append(req)

    def count_tokens(self, cid, messages, thinking, tools, rid):
        self.counted.emit(cid, sum(len(m["content"]) for m in messages), 4096, None)

    def count_texts(self, tag, texts):
        self.texts_counted.emit(tag, [len(t.split()) for t in texts], False)

    def shutdown(self):
        pass

    def cancel(self, rid):
        self.cancelled.append(rid)

    def request_close(self):
        pass

    # the test's side: the engine answers
    def reply(self, text: str, finish: str = "stop", **stats):
        req = self.requests[-1]
        self.stream.emit(req.rid, [[text, "answer", False]], {})
        self.finished.emit(req.rid, ReplyResult(text, "", [[text, False]], [],
                                                {"finish_reason": finish, "footer": "f", **stats}))

    def fail(self, kind: str, msg: str = "", partial: str = ""):
        req = self.requests[-1]
        if partial:
            self.stream.emit(req.rid, [[partial, "answer", False]], {})
        self.failed.emit(req.rid, kind, msg)


def _signals(cls) -> set[str]:
    """The signals `cls` adds to QObject's, as Qt sees them: name and argument types."""
    meta = cls.staticMetaObject
    return {bytes(meta.method(i).methodSignature()).decode()
            for i in range(QObject.staticMetaObject.methodCount(), meta.methodCount())
            if meta.method(i).methodType() == QMetaMethod.Signal}


def _public_methods(cls) -> dict[str, list[str]]:
    """{name: parameter names} of the public methods `cls` itself defines."""
    return {name: list(inspect.signature(f).parameters) for name, f in vars(cls).items()
            if inspect.isfunction(f) and not name.startswith("_")}


def test_the_stand_in_is_the_real_workers_shape():
    """The rules below hold for the real worker only while the stand-in is its shape: the same
    signals (names and argument types) and the same public methods with the same parameters. A
    worker that gains, drops or changes one fails here, not quietly in the rules' tests."""
    assert _signals(FakeWorker) == _signals(EngineWorker) and len(_signals(EngineWorker)) >= 8
    fake = {n: p for n, p in _public_methods(FakeWorker).items() if n not in TEST_SIDE}
    assert fake == _public_methods(EngineWorker)


INFO = ModelInfo(target="/m/t.gguf", drafter="/m/d.gguf", target_name="t.gguf", drafter_name="d.gguf",
                 n_ctx=4096, has_mtp=True)


@pytest.fixture
def session(qtbot, tmp_path):
    worker = FakeWorker()
    view = ChatView()
    qtbot.addWidget(view)
    s = ChatSession(Settings(tmp_path / "s.json"), Store(tmp_path / "c.sqlite3"), worker)
    view.observe(s.model)  # the window's wiring: the view shows the session's chat model
    s.view = view
    s.load_local("/m/t.gguf", "/m/d.gguf")
    worker.loaded.emit(INFO)
    s.new_conversation()
    yield s
    s.store.close()


def texts(s) -> list[tuple[str, str]]:
    return [(w.role, w.text) for w in s.view.widgets()]


def test_a_reply_streams_into_the_view_and_the_store(session):
    w = session.worker
    assert session.send("Hello", [])
    assert session.busy and w.requests[-1].messages[-1] == {"role": "user", "content": "Hello"}
    assert w.requests[-1].settings.spec == AUTO and w.requests[-1].settings.draft_max == AUTO
    w.reply("Hi there")
    assert not session.busy and texts(session) == [("user", "Hello"), ("assistant", "Hi there")]
    assert [m.content for m in session.store.messages(session.conversation_id)] == ["Hello", "Hi there"]
    assert session.store.conversation(session.conversation_id).title == "Hello"


def test_a_regenerate_that_never_starts_brings_the_previous_version_back(session):
    w = session.worker
    session.send("Q", [])
    w.reply("first answer")
    session.regenerate()
    assert texts(session)[-1] == ("assistant", "")  # the new version, in place of the old
    w.fail("error", "the engine said no")
    assert texts(session) == [("user", "Q"), ("assistant", "first answer")]
    assert [m.content for m in session.store.messages(session.conversation_id)] == ["Q", "first answer"]


def test_a_continued_reply_is_glued_to_what_was_there(session):
    w = session.worker
    session.send("Count", [])
    w.reply("one, two,", finish="length")
    reply = session.view.widgets()[-1]
    session.continue_reply(reply.message_id)
    assert w.requests[-1].settings.answer_prefix == "one, two,"
    assert w.requests[-1].messages[-1] == {"role": "user", "content": "Count"}  # up to the question
    w.reply(" three")
    assert texts(session)[-1] == ("assistant", "one, two, three")
    assert session.store.messages(session.conversation_id)[-1].content == "one, two, three"


def test_an_overflow_asks_once_and_a_retry_leaves_out_the_oldest_turns(session):
    w = session.worker
    asked = []
    session.overflow.connect(lambda msg, dropped: asked.append(dropped))
    session.send("long", [])
    w.fail("overflow", "the conversation is 5000 tokens but the context holds 4096")
    assert asked == [False] and texts(session) == [("user", "long")]  # the empty reply is gone
    session.retry_dropping_oldest()
    assert w.requests[-1].settings.drop_oldest
    w.fail("overflow", "still too long")
    assert asked == [False, True]  # the window then says the message alone does not fit


def test_a_reply_cut_by_a_lost_connection_keeps_its_text_and_can_continue(session):
    w = session.worker
    failed = []
    session.reply_failed.connect(failed.append)
    session.send("Why?", [])
    w.fail("error", "the connection ended before the reply was complete", partial="Because")
    reply = session.view.widgets()[-1]
    assert reply.text == "Because" and reply.stats["finish_reason"] == "error"
    assert reply.buttons["continue"].isVisibleTo(session.view)
    stored = session.store.messages(session.conversation_id)[-1]
    assert stored.content == "Because" and stored.stats["finish_reason"] == "error"
    assert failed and "connection ended" in failed[0]


def test_stop_reaches_the_worker_and_a_stopped_reply_keeps_its_text(session):
    w = session.worker
    session.send("Go", [])
    w.stream.emit(w.requests[-1].rid, [["partial", "answer", False]], {})
    session.stop()
    assert w.cancelled == [w.requests[-1].rid]
    w.reply("", finish="cancelled")  # the engine's last event: nothing more
    assert not session.busy


def test_a_file_that_is_gone_keeps_the_loaded_model(session):
    w = session.worker
    failed = []
    session.load_failed.connect(failed.append)
    session.load_local("/gone.gguf")
    assert session.model_info is None and session.loading_model
    w.load_failed.emit("/gone.gguf: no such file", True)  # refused before unloading anything
    assert session.model_info is INFO and failed == ["/gone.gguf: no such file"]
    assert session.send("still here?", [])


def test_a_switch_that_fails_half_way_loads_the_previous_model_again(session):
    w = session.worker
    session.load_local("/big.gguf")
    w.load_failed.emit("out of memory", False)  # the old one was unloaded first
    assert w.loads[-1].target == "/m/t.gguf" and session.loading_model


def test_new_chat_twice_makes_one_empty_chat(session):
    first = session.conversation_id
    assert session.new_conversation() == first  # the empty chat already there
    session.send("hi", [])
    session.worker.reply("hello")
    second = session.new_conversation()
    assert second != first and session.new_conversation() == second
    assert len(session.store.conversations()) == 2


def test_the_chat_options_and_app_settings_make_the_request(session):
    s = session
    s.settings.update(temperature=0.5, max_tokens=33)
    s.set_chat_options(False, 4, True)
    r = s.reply_settings()
    assert (r.spec, r.draft_max, r.thinking, r.sampling.temperature, r.max_tokens) == ("none", 4, True, 0.5, 33)
    s.set_chat_options(True, AUTO, False)
    assert s.reply_settings().spec == AUTO and s.reply_settings().draft_max == AUTO
    with pytest.raises(ValueError):
        s.set_chat_options(True, 99, False)  # past MAX_DRAFT
