"""The chat session: the controller between the window and the engine thread.

It owns the open conversation, the loaded model's `ModelInfo`, the reply being streamed and
the engine worker (in its own QThread). It builds each request's history and settings, writes
the store as replies stream, recovers from failures (a regenerate that never started brings
back the previous version; a cut reply keeps its text and can be continued) and decides what
an overflowing chat needs — asking the window through `overflow` only where the user must
choose. An answer that calls tools (MCP) is held on a `ToolTurn`: each call waits for the
user's yes on its card, runs through the ToolRunner, and its result (or the one line why there
is none) goes into the chat before the model is asked to go on. The window shows; the session
decides. Tests drive it with a stand-in worker.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, QThread, QTimer, Signal

from engine.generation import AUTO, SPEC_NONE, check_draft_length

from app.core.chat_types import LoadRequest, ModelInfo, ReplyRequest, ReplyResult, ReplySettings
from .chat_view import ChatView
from .compare import CompareRun, ComparePage
from app.core.settings import Settings
from app.core.store import Store, chat_title
from .widgets import MessageWidget

SAVE_INTERVAL_S = 1.0  # a streaming reply is written to disk at least this often
MAX_TOOL_ROUNDS = 8  # answers in a row that call tools before the loop stops and says so
TOOL_ROOM_TOKENS = 512  # what a tool's result must leave free in the context for the answer
CHARS_PER_TOKEN = 3  # a cautious rate for tool output (code and JSON run short tokens)
GENERATION_KEYS = ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "max_tokens")


@dataclass
class ContinuedFrom:
    """What a continued reply already said, so the new text is glued after it."""

    answer: str
    origins: list
    thinking: str


@dataclass
class ActiveReply:
    """The request being streamed: a chat reply (into `widget`) or one Compare run."""

    rid: int
    t0: float
    widget: MessageWidget | None = None  # chat replies
    mid: int = 0
    cid: int = 0
    saved: float = 0.0
    drop_oldest: bool = False
    parent: int | None = None  # a new version of the reply to this message
    cont: ContinuedFrom | None = None
    compare: str = ""  # Compare: "baseline" or "mtp"
    chart: bool = True  # its speeds go on the chart (a Compare repeat adds numbers only)
    tool_round: int = 0  # answers before this one that called tools, since the user's message


@dataclass
class ToolTurn:
    """An answer's tool calls, waiting for the user's decisions and the tools' results."""

    cid: int
    widget: MessageWidget  # the answer that called; its cards show each call
    calls: dict  # call id -> {"id", "name", "arguments"}
    pending: list  # call ids not answered yet, in order
    round: int


def chat_options(settings: dict) -> tuple[bool, int | str, bool]:
    """A conversation's (use_mtp, draft_max, thinking); Tandem 0.1 wrote 0 for auto."""
    k = settings.get("draft_max", AUTO)
    try:
        k = check_draft_length(AUTO if k in (0, None) else k)
    except ValueError:
        k = AUTO
    return bool(settings.get("use_mtp", True)), k, bool(settings.get("thinking", False))


class ChatSession(QObject):
    # to the engine thread, queued
    _load = Signal(object)  # LoadRequest
    _generate = Signal(object)  # ReplyRequest
    _count = Signal(int, list, bool)
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
    context = Signal(int, int)  # tokens the open chat takes (-1: counted by the server), context size
    overflow = Signal(str, bool)  # the chat does not fit: the engine's words, whether old turns were left out
    reply_failed = Signal(str)  # a reply failed: the engine's words
    mtp_limit = Signal(float, object)  # MTP cannot beat plain decoding here: ceiling, (decode, verify, draft) ms
    drafting_learned = Signal()  # a server showed whether it drafts
    conversations_changed = Signal()
    conversation_opened = Signal(int)
    chat_shown = Signal()  # the view shows the chat's path anew (opened, a version switched)
    compare_concluded = Signal(object)  # the CompareRun
    tool_asked = Signal()  # a tool call waits for the user's approval

    def __init__(self, settings: Settings, store: Store, view: ChatView, compare_page: ComparePage,
                 worker=None, parent=None):
        """`worker`: an object with the EngineWorker's signals and slots (tests give a stand-in
        that lives on this thread); by default the real one, on its own thread."""
        super().__init__(parent)
        self.settings, self.store, self.view, self.compare_page = settings, store, view, compare_page
        self.model_info: ModelInfo | None = None
        self.conversation_id: int | None = None
        self.active: ActiveReply | None = None
        self.compare_run: CompareRun | None = None
        self.closing = False
        self._rid = 0
        self._last_load: LoadRequest | None = None  # what is loaded, to load again after a failed switch
        self._loaded_info: ModelInfo | None = None  # its ModelInfo (model_info is None while loading)
        self._pending_load: LoadRequest | None = None
        self._text_counts: dict = {}  # tag -> callback(counts, exact), for count_texts
        self._file_texts: dict = {}  # attachment path -> its text, for attached_files
        self.tools = None  # app.session.tool_runner.ToolRunner: the MCP servers the user switched on
        self.tool_turn: ToolTurn | None = None
        self.force_tool = ""  # the user asked that the next answer call this tool
        self._context_used = 0  # the open chat's tokens, as last counted
        self._start_worker(worker)

    def _start_worker(self, worker) -> None:
        self.thread = None
        if worker is None:
            from app.session.worker import EngineWorker

            self.thread = QThread(self)
            self.thread.setObjectName("tandem-engine")
            worker = EngineWorker()
            worker.moveToThread(self.thread)
        self.worker = worker
        self._load.connect(worker.load)
        self._generate.connect(worker.generate)
        self._count.connect(worker.count_tokens)
        self._count_texts.connect(worker.count_texts)
        worker.texts_counted.connect(self._on_texts_counted)
        self._shutdown.connect(worker.shutdown)
        worker.loaded.connect(self._on_loaded)
        worker.load_failed.connect(self._on_load_failed)
        worker.load_progress.connect(lambda label, frac: self.status.emit(f"Loading {label}… {frac * 100:.0f} %", 0))
        worker.stream.connect(self._on_stream)
        worker.finished.connect(self._on_finished)
        worker.failed.connect(self._on_failed)
        worker.counted.connect(self._on_counted)
        if self.thread is not None:
            self.thread.start()

    @property
    def busy(self) -> bool:
        """A reply streams, or an answer's tool calls wait for the user or their results."""
        return self.active is not None or self.tool_turn is not None

    @property
    def loading_model(self) -> bool:
        return self._pending_load is not None

    def engine(self):
        """The local engine, for `tandem serve` in the app (None for a server or nothing loaded)."""
        return self.worker.engine if self.model_info and not self.model_info.remote else None

    # ---- models ------------------------------------------------------------------------
    def load_local(self, target: str, drafter: str = "", mmproj: str | None = None) -> None:
        s = self.settings
        self._begin_load(LoadRequest(target=target, drafter=drafter, mmproj=mmproj, n_ctx=s["n_ctx"],
                                     threads=s["threads"], target_gpu_layers=s["target_gpu_layers"],
                                     drafter_gpu_layers=s["drafter_gpu_layers"]), target, "loading…")

    def load_remote(self, req: LoadRequest) -> None:
        self._begin_load(req, f"remote:{req.connection}:{req.model}", "connecting…")

    def _begin_load(self, req: LoadRequest, key: str, words: str) -> None:
        self.stop()
        self._pending_load = req
        self.model_info = None
        self.loading.emit(key, words)
        self.model_changed.emit()
        self.status.emit("Connecting…" if req.remote else "Loading model…", 0)
        self._load.emit(req)

    def _on_loaded(self, info: ModelInfo) -> None:
        self.model_info = self._loaded_info = info
        self._last_load, self._pending_load = self._pending_load, None
        s = self.settings
        if info.remote:
            s["remote"] = {"connection": info.remote.connection, "model": info.remote.model}
        else:
            s["target"], s["drafter"], s["remote"] = info.target, info.drafter, None
        s.save()
        where = f" on {info.engine} at {info.remote.server}" if info.remote else ""
        ctx = f"context {info.n_ctx} tokens" if info.n_ctx else "context set by the server"
        self.status.emit(f"Loaded {info.target_name}{where} ({ctx})", 5000)
        self.model_changed.emit()
        self.count_context()

    def _on_load_failed(self, message: str, still_loaded: bool) -> None:
        failed, self._pending_load = self._pending_load, None
        if still_loaded and self._loaded_info is not None:  # refused before unloading: the old one is there
            self.model_info = self._loaded_info
            self.model_changed.emit()
            self.count_context()
        elif self._last_load is not None and failed != self._last_load and not self.closing:
            previous = self._last_load  # the switch failed half-way: back to what worked
            self._last_load = self._loaded_info = None
            self._begin_load(previous, previous.target or f"remote:{previous.connection}:{previous.model}",
                             "loading…")
        else:
            self.model_info = self._loaded_info = None
            self.model_changed.emit()
        self.status.emit("Loading failed", 5000)
        if not self.closing:
            self.load_failed.emit(message)

    # ---- conversations ---------------------------------------------------------------
    def chat_settings(self) -> dict:
        conv = self.store.conversation(self.conversation_id) if self.conversation_id is not None else None
        return dict(conv.settings) if conv else {}

    def set_chat_options(self, use_mtp: bool, draft_max: int | str, thinking: bool) -> None:
        if self.conversation_id is not None:
            self.store.set_conversation_settings(self.conversation_id, {
                **self.chat_settings(), "use_mtp": use_mtp, "draft_max": check_draft_length(draft_max),
                "thinking": thinking})

    def new_conversation(self) -> int | None:
        """A new chat, or the empty one already there (pressing New chat twice makes one)."""
        if self.busy:
            return None
        empty = next((c for c in self.store.conversations()  # untouched: no message, no own system prompt
                      if c.title == "New chat" and not c.settings.get("system_prompt")
                      and not self.store.messages(c.id)), None)
        if empty is None:
            s = self.settings
            cid = self.store.create_conversation("New chat", {"use_mtp": s["use_mtp"], "draft_max": s["draft_max"],
                                                              "thinking": False})
            self.conversations_changed.emit()
        else:
            cid = empty.id
        self.open_conversation(cid)
        return cid

    def open_conversation(self, cid: int) -> None:
        if self.busy or (cid == self.conversation_id and self.view.widgets()):
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
        self.view.show_messages(self.store.messages(self.conversation_id))
        self.view.scroll_to_end()
        self.chat_shown.emit()

    def switch_version(self, w: MessageWidget, step: int) -> None:
        if not self.busy:
            self.store.show_version(self.conversation_id, w.message_id, step)
            self.show_chat()
            self.count_context()

    def set_system_prompt(self, text: str) -> None:
        self.store.set_conversation_settings(self.conversation_id, {**self.chat_settings(), "system_prompt": text})
        self.count_context()

    def count_context(self) -> None:
        """Ask the engine thread how many tokens this chat's history takes."""
        if self.model_info is not None and self.conversation_id is not None:
            self._count.emit(self.conversation_id, self.history(), chat_options(self.chat_settings())[2])

    def _on_counted(self, cid: int, used: int, n_ctx: int) -> None:
        if cid == self.conversation_id:
            self._context_used = max(used, 0)
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
        from app.core.text_files import AttachedFile, decode_text

        out = []
        if self.conversation_id is None:
            return out
        for m in self.store.messages(self.conversation_id):
            for item in m.media:
                path = self.store.attachment_path(item)
                if item.get("kind") != "text" or path is None:
                    continue
                if path not in self._file_texts:
                    try:
                        self._file_texts[path] = decode_text(path.read_bytes())
                    except (OSError, ValueError):
                        continue
                out.append(AttachedFile(str(item.get("name", "")), self._file_texts[path], str(item.get("source", ""))))
        return out

    # ---- requests ----------------------------------------------------------------------
    def with_system(self, msgs: list[dict]) -> list[dict]:
        """The chat's own system prompt if it has one, else the default from Settings."""
        sp = (self.chat_settings().get("system_prompt") or "").strip() or self.settings["system_prompt"].strip()
        return ([{"role": "system", "content": sp}] if sp else []) + msgs

    def history(self, upto: int | None = None) -> list[dict]:
        """The messages sent to the model: the chat's path (to its leaf, or to message `upto`);
        attachments go as files, decoded in the engine thread."""
        out = []
        # earlier tool calls and results go to a model whose template reads them (Gemma 4's,
        # locally); to any other the chat goes on without them
        info = self.model_info
        keep_tools = bool(info and info.tools and not info.remote)
        for m in self.store.messages(self.conversation_id, upto):
            if m.role not in ("user", "assistant", "tool") or (m.role == "tool" and not keep_tools):
                continue
            d = m.as_chat()
            if not keep_tools:
                d.pop("tool_calls", None)
            files = [{"path": str(p), "name": str(i.get("name", "")), "kind": str(i.get("kind", "image"))}
                     for i in m.media if (p := self.store.attachment_path(i)) is not None]
            if files:
                d["attachments"] = files
            out.append(d)
        return self.with_system(out)

    def reply_settings(self) -> ReplySettings:
        """The app's generation settings with this chat's switches; drafting only where the
        loaded model can switch it (a server that drafts decides for itself)."""
        use_mtp, k, thinking = chat_options(self.chat_settings())
        info = self.model_info
        can = bool(info and info.can_draft and (not info.remote or info.can_switch_mtp))
        return ReplySettings(**{key: self.settings[key] for key in GENERATION_KEYS},
                             spec=AUTO if use_mtp and can else SPEC_NONE,
                             draft_max=k, thinking=thinking, tools=tuple(self.tool_declarations()))

    # ---- tools -------------------------------------------------------------------------
    def set_tool_runner(self, runner) -> None:
        """The MCP servers' runner (app.session.tool_runner.ToolRunner): calls the user allowed go to it."""
        self.tools = runner
        runner.finished.connect(self._on_tool_finished)

    def tools_available(self) -> str:
        """Why this chat cannot offer tools ("" when it can)."""
        info = self.model_info
        if info is None:
            return "no model is loaded"
        if info.remote or not info.tools:
            return ("tools are offered to local models only" if info.remote else
                    "this model's chat template has no tool calling (Gemma 4's has)")
        if self.tools is None or not self.tools.declarations():
            return "no MCP server is switched on (Settings → Tools)"
        return ""

    def tools_on(self) -> bool:
        return bool(self.chat_settings().get("tools"))

    def set_tools_on(self, on: bool) -> None:
        if self.conversation_id is not None:
            self.store.set_conversation_settings(self.conversation_id, {**self.chat_settings(), "tools": bool(on)})

    def tool_declarations(self) -> list[dict]:
        """The tools this chat offers the model: the switched-on servers', when the chat has tools on."""
        return self.tools.declarations() if self.tools_on() and not self.tools_available() else []

    def _begin_tools(self, a: ActiveReply, calls: list) -> None:
        """Show each call the answer made; ask the user about each (a tool allowed always in
        this chat runs at once). Nothing runs before the user's yes."""
        from .tool_view import ToolCard

        self.store.set_tool(a.mid, {"calls": calls})
        turn = self.tool_turn = ToolTurn(a.cid, a.widget, {c["id"]: c for c in calls}, [c["id"] for c in calls],
                                         a.tool_round)
        allowed = set(self.chat_settings().get("allowed_tools") or [])
        asking = False
        for c in calls:
            info = self.tools.tool(c["name"]) if self.tools else None
            card = ToolCard(c["id"], c["name"], c["arguments"], info.server if info else "")
            card.decided.connect(lambda choice, cid=c["id"]: self.decide_tool(cid, choice))
            turn.widget.add_tool_card(card)
            if c["name"] in allowed:
                self._run_tool(c)
            else:
                asking = True
        if asking:
            self.status.emit("The model wants to use a tool: allow or deny it", 0)
            self.tool_asked.emit()

    def decide_tool(self, call_id: str, choice: str) -> None:
        """The user's answer to a call: "once", "always" (this tool, in this chat) or "deny"."""
        turn = self.tool_turn
        if turn is None or call_id not in turn.pending or turn.widget.tool_cards[call_id].state != "asking":
            return
        call = turn.calls[call_id]
        if choice == "deny":
            self._tool_answered(call_id, "denied", "you denied this call")
            return
        if choice == "always":
            cs = self.chat_settings()
            allowed = list(cs.get("allowed_tools") or [])
            if call["name"] not in allowed:
                self.store.set_conversation_settings(turn.cid, {**cs, "allowed_tools": allowed + [call["name"]]})
            for other in list(turn.pending):  # the same tool asked again in this answer runs too
                card = turn.widget.tool_cards[other]
                if other != call_id and turn.calls[other]["name"] == call["name"] and card.state == "asking":
                    self._run_tool(turn.calls[other])
        self._run_tool(call)

    def _run_tool(self, call: dict) -> None:
        turn = self.tool_turn
        turn.widget.tool_cards[call["id"]].set_state("running")
        self.status.emit(f"Running {call['name']}…", 0)
        n_ctx = self.model_info.n_ctx if self.model_info else 0
        room = (n_ctx - self._context_used - TOOL_ROOM_TOKENS) * CHARS_PER_TOKEN if n_ctx else 10**6
        self.tools.call(call["id"], call["name"], call["arguments"], timeout_s=self.settings["tool_timeout_s"],
                        max_chars=max(room, 200))

    def _on_tool_finished(self, call_id: str, outcome) -> None:
        turn = self.tool_turn
        if turn is not None and call_id in turn.pending and turn.widget.tool_cards[call_id].state == "running":
            self._tool_answered(call_id, outcome.kind, outcome.text)

    def _tool_answered(self, call_id: str, kind: str, text: str, go_on: bool = True) -> None:
        """A call's result, or the one line saying why there is none, goes into the chat (for the
        model and the user alike); when every call of the answer has one, the model goes on."""
        turn = self.tool_turn
        call = turn.calls[call_id]
        for_model = text if kind == "ok" else f"The call did not run: {text}." if kind in ("denied", "stopped") \
            else f"The call failed: {text}"
        self.store.add_message(turn.cid, "tool", for_model, tool={"call_id": call_id, "name": call["name"],
                                                                  "kind": kind})
        turn.widget.tool_cards[call_id].set_outcome(kind, text)
        turn.pending.remove(call_id)
        if kind not in ("ok", "stopped"):
            self.status.emit(f"{call['name']}: {text}", 8000)
        if turn.pending:
            return
        self.tool_turn = None
        if go_on and turn.round + 1 < MAX_TOOL_ROUNDS and turn.cid == self.conversation_id:
            self._start_reply(tool_round=turn.round + 1)
            return
        if go_on:
            self.status.emit(f"Stopped after {MAX_TOOL_ROUNDS} answers in a row that called tools", 8000)
        self.busy_changed.emit()
        self.count_context()

    def _request(self, messages: list[dict], settings: ReplySettings) -> None:
        self._generate.emit(ReplyRequest(self.active.rid, messages, settings))

    def _next_rid(self) -> int:
        self._rid += 1
        return self._rid

    # ---- replies -----------------------------------------------------------------------
    def send(self, text: str, attachments: list, edit_of: MessageWidget | None = None) -> bool:
        """Add the user's message (a new version of `edit_of`'s, when editing) and answer it."""
        if not (text or attachments) or self.busy or self.model_info is None or self.conversation_id is None:
            return False
        cid = self.conversation_id
        media = [self.store.save_attachment(a.data, a.name, a.kind, a.source) for a in attachments]
        if self.store.conversation(cid).title == "New chat":
            self.store.rename(cid, chat_title(text) if text else (attachments[0].name if attachments else "New chat"))
            self.conversations_changed.emit()
        if edit_of is not None:  # a new version beside the edited message
            self.store.add_message(cid, "user", text, parent=self.store.parent_of(edit_of.message_id), media=media)
            self.show_chat()
        else:
            mid = self.store.add_message(cid, "user", text, media=media)
            w = self.view.add("user", mid)
            if media:
                w.set_media([(self.store.attachment_path(m), m["name"], m["kind"], m.get("source", "")) for m in media])
            w.set_content(text)
        self._start_reply()
        return True

    def regenerate(self, w: MessageWidget | None = None) -> None:
        """Another answer to the same question; the old one stays as a version."""
        ws = self.view.widgets()
        w = w or (ws[-1] if ws else None)
        if w is not None and w.role == "assistant" and not self.busy and self.model_info is not None:
            self._start_reply(parent=self.store.parent_of(w.message_id))

    def continue_reply(self, w: MessageWidget) -> None:
        if not self.busy and w.role == "assistant" and w.text and self.model_info is not None:
            self._start_reply(cont=w)

    def retry_dropping_oldest(self) -> None:
        """The user agreed to leave out the oldest turns for this reply."""
        self._start_reply(drop_oldest=True)

    def withdraw_unanswered(self) -> MessageWidget | None:
        """The chat's last message, when it is the user's and has no answer (it did not fit),
        taken out of the chat: its widget, for the composer to put back in the input box."""
        ws = self.view.widgets()
        if self.busy or not ws or ws[-1].role != "user":
            return None
        w = ws[-1]
        self.store.delete_message(self.conversation_id, w.message_id)
        self.view.remove(w)
        self.view.mark_last()
        self.count_context()
        return w

    def _start_reply(self, drop_oldest: bool = False, parent: int | None = None, cont: MessageWidget | None = None,
                     tool_round: int = 0):
        """Answer the chat's last message, or write a new version of the reply to `parent`, or
        continue the cut reply `cont`."""
        cid = self.conversation_id
        if cont is not None:
            history, mid, w = self.history(self.store.parent_of(cont.message_id)), cont.message_id, cont
        else:
            history = self.history(parent)
            mid = self.store.add_message(cid, "assistant", "", parent="leaf" if parent is None else parent)
            if parent is not None:
                self.show_chat()  # the new version replaces the old one in view
                w = self.view.widgets()[-1]
            else:
                w = self.view.add("assistant", mid)
            w.set_content("")
        self.view.mark_last()
        self.view.scroll_to_end()
        now = time.perf_counter()
        self.active = ActiveReply(self._next_rid(), now, widget=w, mid=mid, cid=cid, saved=now,
                                  drop_oldest=drop_oldest, parent=parent, tool_round=tool_round,
                                  cont=None if cont is None else ContinuedFrom(w.text, list(w.origins), w.thinking))
        self.stats_reset.emit(False)
        self.busy_changed.emit()
        self.status.emit("Generating…", 0)
        settings = self.reply_settings().but(drop_oldest=drop_oldest, answer_prefix=w.text if cont else "")
        names = {t["function"]["name"] for t in settings.tools}
        if self.force_tool and tool_round == 0:  # the user asked for this tool: this answer calls it
            settings = settings.but(force_tool=self.force_tool if self.force_tool in names else "")
            self.force_tool = ""
        self._request(history, settings)

    def stop(self) -> None:
        turn = self.tool_turn
        if turn is not None and self.active is None:  # calls waiting or running: none is answered further
            for call_id in list(turn.pending):
                self._tool_answered(call_id, "stopped", "you stopped before it ran"
                                    if turn.widget.tool_cards[call_id].state == "asking" else
                                    "you stopped while it ran", go_on=False)
            return
        if self.active:
            self.worker.cancel(self.active.rid)
            if self.compare_run is not None:
                self.compare_run.stop()

    # ---- compare ---------------------------------------------------------------------
    def start_compare(self, text: str) -> bool:
        """Baseline, then MTP, on one prompt (repeated when the runs are short)."""
        info = self.model_info
        if not text or self.busy or info is None or not info.has_baseline:
            return False
        servers = (info.baseline_server or info.remote.server, info.remote.server) if info.remote else None
        rs = self.reply_settings()
        self.compare_run = run = CompareRun(text, self.with_system([{"role": "user", "content": text}]),
                                            rs.temperature <= 0, rs.draft_max)
        self.compare_page.start(run, servers)
        self.stats_reset.emit(False)
        # marks the comparison as running until the first run starts
        self.active = ActiveReply(self._next_rid(), time.perf_counter(), compare="baseline")
        self.busy_changed.emit()
        # let the page switch paint first: the GUI thread shares the GIL with the engine
        # thread, and both runs must see an idle window for a fair comparison
        QTimer.singleShot(150, self._next_compare)
        return True

    def _next_compare(self) -> None:
        run = self.compare_run
        nxt = run.next_run() if run is not None else None
        if nxt is None:
            if self.active and self.active.compare:  # stopped before the first run began
                self.active = None
                self.busy_changed.emit()
                self.compare_page.interrupted("stopped before both runs finished")
            return
        which, drafting, first = nxt  # repeats add numbers, not lines on the chart
        self.stats_reset.emit(bool(run.runs["baseline"]))  # both runs on one chart
        self.active = ActiveReply(self._next_rid(), time.perf_counter(), compare=which, chart=first)
        self.busy_changed.emit()
        info = self.model_info
        # fresh cache for each run, so both pay the same prefill; same seed for sampling (a
        # seed fixes the draft length, so greedy runs, which need none, keep auto's);
        # servers that cannot switch drafting off run the baseline on the baseline server
        settings = self.reply_settings().but(spec=AUTO if drafting else SPEC_NONE, fresh=True,
                                             seed=None if run.greedy else 1234,
                                             on_baseline_server=bool(info.remote and not drafting
                                                                     and not info.can_switch_mtp))
        self._request(run.messages, settings)

    # ---- worker signals --------------------------------------------------------------
    def _elapsed(self, a: ActiveReply) -> float | None:
        return time.perf_counter() - a.t0 if a.chart else None

    def _on_stream(self, rid: int, pieces: list, stats: dict) -> None:
        a = self.active
        if not a or a.rid != rid:
            return
        answer = "".join(t for t, ch, _ in pieces if ch == "answer")
        thinking = "".join(t for t, ch, _ in pieces if ch == "thinking")
        if stats:
            self.live_stats.emit(stats, self._elapsed(a), False)
        if a.compare:
            self.compare_page.stream(a.compare, answer)
            return
        w = a.widget
        w.append(answer, thinking, pieces)
        now = time.perf_counter()
        if now - a.saved >= SAVE_INTERVAL_S:
            self.store.update_message(a.mid, w.text, w.thinking, None, w.origins)
            a.saved = now  # (the view follows the growing reply itself, unless the user scrolled up)

    def _on_finished(self, rid: int, result: ReplyResult) -> None:
        a = self.active
        if not a or a.rid != rid:
            return
        self.active = None
        if result.mtp_ceiling is not None:
            self.mtp_limit.emit(result.mtp_ceiling, result.mtp_costs_ms)
        self.live_stats.emit(result.stats, self._elapsed(a), True)
        if a.compare:
            run = self.compare_run
            run.record(a.compare, result)
            self.compare_page.show_run(run, a.compare)
            if run.concluded:
                self.compare_concluded.emit(run)
            self.busy_changed.emit()
            self._next_compare()
            return
        self._learn_drafting(result.stats)
        w = a.widget
        answer, thinking, origins = result.answer, result.thinking, result.origins
        if a.cont:  # a continued reply: what was there, then what was added
            answer, origins, thinking = a.cont.answer + answer, a.cont.origins + origins, a.cont.thinking + thinking
        w.set_content(answer, thinking, origins)
        w.set_stats(result.stats)
        self.store.update_message(a.mid, answer, thinking, result.stats, origins)
        self.status.emit(result.stats.get("footer", ""), 8000)
        if result.tool_calls and self.tools is not None and result.finish_reason != "cancelled":
            self._begin_tools(a, result.tool_calls)  # busy until the calls are answered (a stopped reply's never run)
        self.busy_changed.emit()
        self.view.mark_last()
        self.count_context()

    def _learn_drafting(self, stats: dict) -> None:
        """A server shows whether it drafts with its replies: the MTP switch follows."""
        info = self.model_info
        if not (info and info.remote and stats.get("drafts_reported")):
            return
        info.has_mtp = stats.get("mode") in ("mtp", "hybrid")
        info.mtp_reason = "" if info.has_mtp else f"{info.engine} reports no drafting"
        self.drafting_learned.emit()

    def _on_failed(self, rid: int, kind: str, msg: str) -> None:
        a = self.active
        if not a or a.rid != rid:
            return
        self.active = None
        self.busy_changed.emit()
        self.status.emit("Stopped" if kind == "cancelled" else "No reply", 5000)
        if kind == "no_model":
            msg = "No model is loaded." if not a.compare or self.model_info is None else \
                "The baseline server is not connected."
        if a.compare:
            self.compare_page.interrupted(msg)
            return
        w = a.widget
        if a.cont and len(w.text) == len(a.cont.answer):  # nothing was added: the reply stays as it was
            pass
        elif w.text:  # cut by an error (a dropped connection): keep what was written, and offer Continue
            stats = {**(w.stats or {}), "footer": "stopped by an error", "finish_reason": "error"}
            self.store.update_message(a.mid, w.text, w.thinking, stats, w.origins)
            w.set_stats(stats)
        else:  # drop the empty reply placeholder; the user's message stays
            self.store.delete_message(a.cid, a.mid)
            if a.parent is not None:  # a new version that never started: the previous one again
                self.store.show_version(a.cid, a.parent, 0)
                if a.cid == self.conversation_id:
                    self.show_chat()
            else:
                self.view.remove(w)
        self.view.mark_last()
        if self.closing or kind == "cancelled":
            return
        if kind == "overflow":
            self.overflow.emit(msg, a.drop_oldest)
        else:
            self.reply_failed.emit(msg)

    # ---- closing -----------------------------------------------------------------------
    def close(self) -> None:
        """Stop what runs, free the models, and save the reply that was streaming."""
        self.closing = True
        self.worker.request_close()
        self._shutdown.emit()
        if self.thread is not None:
            self.thread.quit()
            self.thread.wait(30000)
        # deliver the worker's last signals (the stopped reply) so nothing is lost
        from PySide6.QtCore import QCoreApplication, QEventLoop

        QCoreApplication.processEvents(QEventLoop.AllEvents, 200)
        a = self.active
        if a and a.widget is not None:
            w = a.widget
            self.store.update_message(a.mid, w.text, w.thinking, None, w.origins)


def model_label(info: ModelInfo) -> tuple[str, str]:
    """The picker's status words and tooltip for a loaded model."""
    if info.remote:
        r = info.remote
        return info.engine, f"{r.model} on {info.engine} at {r.server}. Switch with one click"
    d = f" + {info.drafter_name}" if info.drafter_name else " (no MTP drafter)"
    return ("" if info.drafter_name else "no drafter",
            f"{info.target_name}{d}. Switch with one click; Models… to add or remove")


def target_stem(info: ModelInfo | None) -> str:
    return Path(info.target_name).stem if info else "model"
