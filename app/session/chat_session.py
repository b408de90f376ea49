"""The chat session: the controller between the window and the engine thread.

It owns the open conversation, the reply being streamed and the engine worker (in its own
QThread); the loaded model is its `ModelLoader`'s, an answer's tool calls its `ToolTurns`'.
It builds each request (`history`), writes the store as replies stream, recovers from failures
(a regenerate that never started brings back the previous version; a cut reply keeps its text
and can be continued) and decides what an overflowing chat needs — asking the window through
`overflow` only where the user must choose. It builds no widget: what the chat shows is its
`ChatModel`, which the chat view observes. Tests drive it with a stand-in worker.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QThread, Signal

from app.core.chat_types import ChatOptions, LoadRequest, ModelInfo, ReplyRequest, ReplySettings
from app.core.settings import Settings
from app.core.store import Store
from . import history as hist
from .chat_model import ChatModel
from .compare_run import CompareRun, CompareRuns
from .model_loader import ModelLoader
from .replies import Replies
from .tool_turn import MAX_TOOL_ROUNDS, ToolTurn, ToolTurns, result_room


class ChatSession(Replies, CompareRuns, QObject):
    # to the engine thread, queued
    _generate = Signal(object)  # ReplyRequest
    _count = Signal(int, list, bool, list, int)
    _count_texts = Signal(int, list)
    _shutdown = Signal()

    # to the window
    busy_changed = Signal()  # a reply started or ended: controls follow
    model_changed = Signal()  # model_info changed (loaded, loading, or none)
    loading = Signal(str, str)  # picker key, "loading…" | "connecting…"
    load_failed = Signal(str)  # what went wrong, in the engine's words
    status = Signal(str, int)  # a status-bar line and how long it stays (ms)
    stats_reset = Signal(bool)  # the stats bar starts again (True: keep the chart's lines)
    live_stats = Signal(dict, object, bool)  # stats, seconds since the start (None: not on the chart), final
    context = Signal(int, int)  # tokens the open chat's prompt takes (-1: counted by the server), context size
    overflow = Signal(str, bool)  # the chat does not fit: the engine's words, whether old turns were left out
    reply_failed = Signal(str)  # a reply failed: the engine's words
    mtp_limit = Signal(float, object)  # MTP cannot beat plain decoding here: ceiling, (decode, verify, draft) ms
    drafting_learned = Signal()  # a server showed whether it drafts
    conversations_changed = Signal()
    conversation_opened = Signal(int)
    chat_shown = Signal()  # the chat's path shown anew (opened, a version switched)
    tool_asked = Signal()  # a tool call waits for the user's approval
    # Compare, for its page
    compare_started = Signal(object, object)  # the CompareRun, (baseline server, MTP server) or None
    compare_streamed = Signal(str, str)  # which run, text added
    compare_run_done = Signal(object, str)  # the CompareRun, which run finished
    compare_interrupted = Signal(str)  # why it stopped
    compare_concluded = Signal(object)  # the CompareRun

    def __init__(self, settings: Settings, store: Store, worker=None, parent=None):
        """`worker`: an object with the EngineWorker's signals and slots (tests give a stand-in
        that lives on this thread); by default the real one, on its own thread."""
        super().__init__(parent)
        self.settings, self.store = settings, store
        self.model = ChatModel(self)
        self.loader = ModelLoader(settings, self)
        self.conversation_id: int | None = None
        self.active = None  # the ActiveReply being streamed
        self.compare_run: CompareRun | None = None
        self.closing = False
        self._rid = 0
        self._text_counts: dict = {}  # tag -> callback(counts, exact), for count_texts
        self._texts = hist.AttachedTexts(store)
        self.tools = None  # app.session.tool_runner.ToolRunner: the MCP servers the user switched on
        self.tool_turns = ToolTurns(settings, store, self.model,
                                    lambda: result_room(self.model_info.n_ctx if self.model_info else 0,
                                                        self._context_used), self)
        self.force_tool = ""  # the user asked that the next answer call this tool
        self._context_used = 0  # the open chat's tokens, as last counted
        self.context_parts = None  # what takes them (app.session.context_parts.ContextParts), as last counted
        self._wire_parts()
        self._start_worker(worker)

    def _wire_parts(self) -> None:
        ld, tt = self.loader, self.tool_turns
        for theirs, ours in ((ld.loading, self.loading), (ld.model_changed, self.model_changed),
                             (ld.load_failed, self.load_failed), (ld.status, self.status),
                             (tt.status, self.status), (tt.asked, self.tool_asked)):
            theirs.connect(ours)
        ld.about_to_load.connect(self.stop)
        ld.ready.connect(self.count_context)
        tt.ended.connect(self._tools_ended)

    def _start_worker(self, worker) -> None:
        self.thread = None
        if worker is None:
            from .worker import EngineWorker

            self.thread = QThread(self)
            self.thread.setObjectName("tandem-engine")
            worker = EngineWorker()
            worker.moveToThread(self.thread)
        self.worker = worker
        self.loader.load.connect(worker.load)
        self._generate.connect(worker.generate)
        self._count.connect(worker.count_tokens)
        self._count_texts.connect(worker.count_texts)
        worker.texts_counted.connect(self._on_texts_counted)
        self._shutdown.connect(worker.shutdown)
        worker.loaded.connect(self.loader.on_loaded)
        worker.load_failed.connect(self.loader.on_load_failed)
        worker.load_progress.connect(lambda label, frac: self.status.emit(f"Loading {label}… {frac * 100:.0f} %", 0))
        worker.stream.connect(self._on_stream)
        worker.finished.connect(self._on_finished)
        worker.failed.connect(self._on_failed)
        worker.counted.connect(self._on_counted)
        if self.thread is not None:
            self.thread.start()

    @property
    def model_info(self) -> ModelInfo | None:
        """What is loaded (None while loading, or with nothing loaded)."""
        return self.loader.info

    @property
    def tool_turn(self) -> ToolTurn | None:
        """The answer's tool calls waiting for the user or their results."""
        return self.tool_turns.turn

    @property
    def busy(self) -> bool:
        """A reply streams, or an answer's tool calls wait for the user or their results."""
        return self.active is not None or self.tool_turn is not None

    @property
    def loading_model(self) -> bool:
        return self.loader.loading_model

    def engine(self):
        """The local engine, for `tandem serve` in the app (None for a server or nothing loaded)."""
        return self.worker.engine if self.model_info and not self.model_info.remote else None

    # ---- models ------------------------------------------------------------------------
    def load_local(self, target: str, drafter: str = "", mmproj: str | None = None) -> None:
        self.loader.load_local(target, drafter, mmproj)

    def load_remote(self, req: LoadRequest) -> None:
        self.loader.load_remote(req)

    # ---- conversations ---------------------------------------------------------------
    def chat_options(self) -> ChatOptions:
        """The open chat's own switches (the defaults when none is open)."""
        conv = self.store.conversation(self.conversation_id) if self.conversation_id is not None else None
        return conv.options if conv else ChatOptions()

    def update_chat_options(self, **changes) -> None:
        """Change some of the open chat's options (ChatOptions' fields); a bad one raises ValueError."""
        if self.conversation_id is not None:
            self.store.update_chat_options(self.conversation_id, **changes)

    def set_chat_options(self, drafting: bool, draft_max: int | str, thinking: bool) -> None:
        """The toolbar's switches."""
        self.update_chat_options(drafting=drafting, draft_max=draft_max, thinking=thinking)

    def new_conversation(self) -> int | None:
        """A new chat, or the empty one already there (pressing New chat twice makes one)."""
        if self.busy:
            return None
        empty = next((c for c in self.store.conversations()  # untouched: no message, no own system prompt
                      if c.title == "New chat" and not c.options.system_prompt
                      and not self.store.messages(c.id)), None)
        if empty is None:
            s = self.settings
            cid = self.store.create_conversation("New chat", ChatOptions(drafting=s["use_mtp"], draft_max=s["draft_max"]))
            self.conversations_changed.emit()
        else:
            cid = empty.id
        self.open_conversation(cid)
        return cid

    def open_conversation(self, cid: int) -> None:
        if self.busy or (cid == self.conversation_id and self.model.messages):
            return
        self.conversation_id = cid
        self.show_chat()
        self.conversation_opened.emit(cid)
        self.count_context()

    def delete_conversation(self, cid: int) -> None:
        if self.busy and cid == self.conversation_id:
            return
        self.store.delete_conversation(cid)
        if cid == self.conversation_id:
            self.conversation_id = None
            rest = self.store.conversations()
            if rest:
                self.open_conversation(rest[0].id)
            else:
                self.new_conversation()
        self.conversations_changed.emit()

    def show_chat(self) -> None:
        """Show the chat's current path (after opening it, or a version switch)."""
        self.model.show(self.store.messages(self.conversation_id), self.store.attachment_path)
        self.chat_shown.emit()

    def switch_version(self, mid: int, step: int) -> None:
        if not self.busy:
            self.store.show_version(self.conversation_id, mid, step)
            self.show_chat()
            self.count_context()

    def set_system_prompt(self, text: str) -> None:
        self.update_chat_options(system_prompt=text)
        self.count_context()

    def count_context(self, history: list[dict] | None = None) -> None:
        """Ask the engine thread how many tokens this chat's prompt takes: its history (or the
        `history` a reply is about to be given), system prompt and tool declarations."""
        if self.model_info is not None and self.conversation_id is not None:
            rid = self.active.rid if history is not None and self.active else 0  # its Stop stops the count
            self._count.emit(self.conversation_id, self.history() if history is None else history,
                             self.chat_options().thinking, self.tool_declarations(), rid)

    def _on_counted(self, cid: int, used: int, n_ctx: int, parts) -> None:
        if cid == self.conversation_id:
            self._context_used, self.context_parts = max(used, 0), parts
            self.context.emit(used, n_ctx)

    def count_texts(self, texts: list[str], done) -> None:
        """Tokens of each text by the loaded model (attached files); `done(counts, exact)` runs
        on the GUI thread when the engine thread has counted."""
        tag = self._next_rid()
        self._text_counts[tag] = done
        self._count_texts.emit(tag, list(texts))

    def _on_texts_counted(self, tag: int, counts: list, exact: bool) -> None:
        done = self._text_counts.pop(tag, None)
        if done is not None:
            done(counts, exact)

    def attached_files(self) -> list:
        """The text files attached in the chat as shown (newest last): what a reply's code
        block may be a new version of."""
        return self._texts.files(self.conversation_id)

    # ---- requests ----------------------------------------------------------------------
    def with_system(self, msgs: list[dict]) -> list[dict]:
        """The chat's own system prompt if it has one, else the default from Settings."""
        return hist.with_system(self.settings["system_prompt"], self.chat_options(), msgs)

    def history(self, upto: int | None = None) -> list[dict]:
        """The messages sent to the model: the chat's path (to its leaf, or to message `upto`)."""
        return self.with_system(hist.chat_messages(self.store, self.conversation_id, self.model_info, upto))

    def reply_settings(self) -> ReplySettings:
        """The app's generation settings with this chat's switches."""
        return hist.reply_settings(self.settings, self.chat_options(), self.model_info, self.tool_declarations())

    def _request(self, messages: list[dict], settings: ReplySettings) -> None:
        self._generate.emit(ReplyRequest(self.active.rid, messages, settings))

    def _next_rid(self) -> int:
        self._rid += 1
        return self._rid

    # ---- tools -------------------------------------------------------------------------
    def set_tool_runner(self, runner) -> None:
        """The MCP servers' runner (app.session.tool_runner.ToolRunner): calls the user allowed go to it."""
        self.tools = runner
        self.tool_turns.set_runner(runner)
        runner.listed.connect(lambda *_: self.count_context())  # a server's tools came or went

    def tools_available(self) -> str:
        """Why this chat cannot offer tools ("" when it can)."""
        info = self.model_info
        if info is None:
            return "no model is loaded"
        if not info.tools:
            return "this model's chat template has no tool calling (Gemma 4's has)"
        if self.tools is None or not self.tools.declarations():
            return "no MCP server is switched on (Settings → Tools)"
        return ""

    def tools_on(self) -> bool:
        return self.chat_options().tools

    def set_tools_on(self, on: bool) -> None:
        self.update_chat_options(tools=bool(on))
        self.count_context()  # the declarations come into the prompt, or leave it

    def tool_declarations(self) -> list[dict]:
        """The tools this chat offers the model: the switched-on servers', when the chat has tools on."""
        return self.tools.declarations() if self.tools_on() and not self.tools_available() else []

    def decide_tool(self, call_id: str, choice: str) -> None:
        """The user's answer to a call: "once", "always" (this tool, in this chat) or "deny"."""
        self.tool_turns.decide(call_id, choice)

    def _tools_ended(self, turn: ToolTurn, go_on: bool) -> None:
        """Every call of the answer has its result: the model goes on (up to MAX_TOOL_ROUNDS)."""
        if go_on and turn.round + 1 < MAX_TOOL_ROUNDS and turn.cid == self.conversation_id:
            self._start_reply(tool_round=turn.round + 1)
            return
        if go_on:
            self.status.emit(f"Stopped after {MAX_TOOL_ROUNDS} answers in a row that called tools", 8000)
        self.busy_changed.emit()
        self.count_context()

    # ---- closing -----------------------------------------------------------------------
    def close(self) -> None:
        """Stop what runs, free the models, and save the reply that was streaming."""
        self.closing = self.loader.closing = True
        self.worker.request_close()
        self._shutdown.emit()
        if self.thread is not None:
            self.thread.quit()
            self.thread.wait(30000)
        # deliver the worker's last signals (the stopped reply) so nothing is lost
        from PySide6.QtCore import QCoreApplication, QEventLoop

        QCoreApplication.processEvents(QEventLoop.AllEvents, 200)
        a = self.active
        if a and not a.compare:
            m = self.model.message(a.mid)
            self.store.update_message(a.mid, m.text, m.thinking, None, m.origins)
