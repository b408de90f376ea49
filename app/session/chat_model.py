"""The open chat as data: its messages on the path shown, the reply being streamed into the last
one, and each tool call's state. The session changes it and reads it back as the truth; the
chat view observes its signals and builds its widgets from it (the session builds none)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from PySide6.QtCore import QObject, Signal

# a call's states: "asking" (waits for the user's yes), "running", "stopped" (never ran, or an
# older chat's call whose result was not found), or how it ended: "ok", "denied", "error",
# "timeout", "crashed", "too_large", "unknown"


@dataclass
class ToolCall:
    """One call an answer made, and what came of it."""

    id: str
    name: str
    arguments: dict
    server: str = ""
    state: str = "asking"
    text: str = ""  # the result ("ok"), or the one line saying why there is none


@dataclass
class ShownMessage:
    """One message as shown: what was said, its numbers, attachments, versions and calls."""

    id: int
    role: str
    text: str = ""
    thinking: str = ""
    origins: list = field(default_factory=list)  # [[text, drafted], ...] of the answer
    stats: dict | None = None
    media: list = field(default_factory=list)  # [(path or None, name, kind, source)]
    version: int = 1
    versions: int = 1
    calls: dict = field(default_factory=dict)  # call id -> ToolCall, in the order they were made

    @property
    def message_id(self) -> int:
        return self.id


def media_items(media: list, attachment_path: Callable) -> list:
    """A stored message's attachments as shown: (path or None, name, kind, source)."""
    return [(attachment_path(i), str(i.get("name", "")), str(i.get("kind", "image")), str(i.get("source", "")))
            for i in media]


class ChatModel(QObject):
    reset = Signal()  # a chat's path shown anew (opened, a version switched)
    added = Signal(object)  # a ShownMessage at the end
    removed = Signal(int)  # a message id
    streamed = Signal(int, str, str, list)  # message id, answer and thinking added, the engine's pieces
    content_set = Signal(int)  # a message's text, thinking and origins set anew
    stats_set = Signal(int)  # a message's numbers (its footer)
    call_added = Signal(int, object)  # message id, ToolCall
    call_changed = Signal(int, object)  # message id, ToolCall (its state or outcome)
    reply_started = Signal(int)  # the message a reply is written into (new, or continued)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.messages: list[ShownMessage] = []

    def message(self, mid: int) -> ShownMessage | None:
        return next((m for m in self.messages if m.id == mid), None)

    @property
    def last(self) -> ShownMessage | None:
        return self.messages[-1] if self.messages else None

    def show(self, messages: list, attachment_path: Callable) -> None:
        """A chat's path from the store (`store.Message`s); a tool message is folded into the
        call it answers, in the answer before it."""
        shown: list[ShownMessage] = []
        for m in messages:
            if m.role == "tool":
                call = shown[-1].calls.get((m.tool or {}).get("call_id")) if shown else None
                if call is not None:
                    kind = (m.tool or {}).get("kind", "ok")
                    call.state = kind
                    call.server = str((m.tool or {}).get("server", ""))
                    call.text = m.content if kind == "ok" else m.content.split(": ", 1)[-1].rstrip(".")
                continue
            calls = {str(c.get("id", "")): ToolCall(str(c.get("id", "")), str(c.get("name", "")),
                                                    c.get("arguments") or {}, state="stopped")
                     for c in m.calls}  # "stopped" until its result is found after it
            shown.append(ShownMessage(m.id, m.role, m.content, m.thinking, list(m.origins or []), m.stats,
                                      media_items(m.media, attachment_path), m.version, m.versions, calls))
        self.messages = shown
        self.reset.emit()

    def add(self, role: str, mid: int, text: str = "", media: list | None = None) -> ShownMessage:
        m = ShownMessage(mid, role, text, media=list(media or []))
        self.messages.append(m)
        self.added.emit(m)
        return m

    def remove(self, mid: int) -> None:
        self.messages = [m for m in self.messages if m.id != mid]
        self.removed.emit(mid)

    def start_reply(self, mid: int) -> None:
        self.reply_started.emit(mid)

    def append(self, mid: int, answer: str, thinking: str, pieces: list) -> None:
        """Streaming: what the engine added to the reply."""
        m = self.message(mid)
        m.text += answer
        m.thinking += thinking
        m.origins.extend([t, d] for t, ch, d in pieces if ch == "answer")
        self.streamed.emit(mid, answer, thinking, pieces)

    def set_content(self, mid: int, text: str, thinking: str, origins: list) -> None:
        m = self.message(mid)
        m.text, m.thinking, m.origins = text, thinking, list(origins)
        self.content_set.emit(mid)

    def set_stats(self, mid: int, stats: dict | None) -> None:
        self.message(mid).stats = stats
        self.stats_set.emit(mid)

    def add_call(self, mid: int, call: ToolCall) -> None:
        self.message(mid).calls[call.id] = call
        self.call_added.emit(mid, call)

    def call(self, mid: int, call_id: str) -> ToolCall | None:
        m = self.message(mid)
        return m.calls.get(call_id) if m else None

    def set_call(self, mid: int, call_id: str, state: str, text: str = "") -> None:
        call = self.call(mid, call_id)
        call.state, call.text = state, text
        self.call_changed.emit(mid, call)
