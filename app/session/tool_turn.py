"""An answer's tool calls: each waits for the user's yes (or runs at once, for a tool allowed
always in this chat), runs through the ToolRunner, and its result — or the one line saying why
there is none — goes into the chat, for the model and the user alike. When every call has one,
`ended` tells the chat session, which asks the model to go on. Nothing runs before the yes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from PySide6.QtCore import QObject, Signal

from app.core.settings import Settings
from app.core.store import Store
from .chat_model import ChatModel, ToolCall

MAX_TOOL_ROUNDS = 8  # answers in a row that call tools before the loop stops and says so
TOOL_ROOM_TOKENS = 512  # what a tool's result must leave free in the context for the answer
CHARS_PER_TOKEN = 3  # a cautious rate for tool output (code and JSON run short tokens)


@dataclass
class ToolTurn:
    """An answer's tool calls, waiting for the user's decisions and the tools' results."""

    cid: int
    mid: int  # the answer that called
    calls: dict  # call id -> {"id", "name", "arguments"}
    pending: list  # call ids not answered yet, in order
    round: int


def result_room(n_ctx: int, used: int) -> int:
    """The characters a tool's result may take: what the context has left, less room for the answer."""
    room = (n_ctx - used - TOOL_ROOM_TOKENS) * CHARS_PER_TOKEN if n_ctx else 10**6
    return max(room, 200)


class ToolTurns(QObject):
    status = Signal(str, int)
    asked = Signal()  # a call waits for the user's approval
    ended = Signal(object, bool)  # the ToolTurn, every call answered; whether the model goes on

    def __init__(self, settings: Settings, store: Store, model: ChatModel, room: Callable[[], int], parent=None):
        """`room`: the characters a result may take now."""
        super().__init__(parent)
        self.settings, self.store, self.model = settings, store, model
        self.room = room
        self.runner = None  # app.session.tool_runner.ToolRunner
        self.turn: ToolTurn | None = None

    def set_runner(self, runner) -> None:
        self.runner = runner
        runner.finished.connect(self._on_finished)

    def _state(self, call_id: str) -> str:
        return self.model.call(self.turn.mid, call_id).state

    def begin(self, cid: int, mid: int, calls: list, round_: int) -> None:
        """Show each call the answer made; ask the user about each (a tool allowed always in
        this chat runs at once)."""
        self.store.set_tool(mid, {"calls": calls})
        self.turn = ToolTurn(cid, mid, {c["id"]: c for c in calls}, [c["id"] for c in calls], round_)
        allowed = set(self.store.conversation(cid).options.allowed_tools)
        asking = False
        for c in calls:
            info = self.runner.tool(c["name"]) if self.runner else None
            self.model.add_call(mid, ToolCall(c["id"], c["name"], c["arguments"], info.server if info else ""))
            if c["name"] in allowed:
                self._run(c)
            else:
                asking = True
        if asking:
            self.status.emit("The model wants to use a tool: allow or deny it", 0)
            self.asked.emit()

    def decide(self, call_id: str, choice: str) -> None:
        """The user's answer to a call: "once", "always" (this tool, in this chat) or "deny"."""
        turn = self.turn
        if turn is None or call_id not in turn.pending or self._state(call_id) != "asking":
            return
        call = turn.calls[call_id]
        if choice == "deny":
            self.answered(call_id, "denied", "you denied this call")
            return
        if choice == "always":
            allowed = self.store.conversation(turn.cid).options.allowed_tools  # the asking chat's
            if call["name"] not in allowed:
                self.store.update_chat_options(turn.cid, allowed_tools=allowed + (call["name"],))
            for other in list(turn.pending):  # the same tool asked again in this answer runs too
                if other != call_id and turn.calls[other]["name"] == call["name"] and self._state(other) == "asking":
                    self._run(turn.calls[other])
        self._run(call)

    def _run(self, call: dict) -> None:
        self.model.set_call(self.turn.mid, call["id"], "running")
        self.status.emit(f"Running {call['name']}…", 0)
        self.runner.call(call["id"], call["name"], call["arguments"], timeout_s=self.settings["tool_timeout_s"],
                         max_chars=self.room())

    def _on_finished(self, call_id: str, outcome) -> None:
        turn = self.turn
        if turn is not None and call_id in turn.pending and self._state(call_id) == "running":
            self.answered(call_id, outcome.kind, outcome.text)

    def stop(self) -> None:
        """The user stopped: calls waiting or running are answered "stopped", and the model does not go on."""
        for call_id in list(self.turn.pending):
            self.answered(call_id, "stopped", "you stopped before it ran" if self._state(call_id) == "asking"
                          else "you stopped while it ran", go_on=False)

    def answered(self, call_id: str, kind: str, text: str, go_on: bool = True) -> None:
        """A call's result, or the one line saying why there is none, goes into the chat; when
        every call of the answer has one, the turn ends."""
        turn = self.turn
        call = turn.calls[call_id]
        for_model = text if kind == "ok" else f"The call did not run: {text}." if kind in ("denied", "stopped") \
            else f"The call failed: {text}"
        server = self.model.call(turn.mid, call_id).server  # kept, so the card names it after a restart
        self.store.add_message(turn.cid, "tool", for_model, tool={"call_id": call_id, "name": call["name"],
                                                                  "kind": kind, "server": server})
        self.model.set_call(turn.mid, call_id, kind, text)
        turn.pending.remove(call_id)
        if kind not in ("ok", "stopped"):
            self.status.emit(f"{call['name']}: {text}", 8000)
        if not turn.pending:
            self.turn = None
            self.ended.emit(turn, go_on)
