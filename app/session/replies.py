"""The chat session's replies: the user's message sent, another answer (a new version), a cut
answer continued; each streamed into the chat model and the store, and what a failure leaves
(a regenerate that never started brings back the previous version; a cut reply keeps its text
and can be continued; an overflow asks the window). A part of `ChatSession` (it reads the
session's model, store and settings), kept in its own module."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from app.core.chat_types import ReplyResult
from app.core.store import chat_title
from .chat_model import media_items

SAVE_INTERVAL_S = 1.0  # a streaming reply is written to disk at least this often


@dataclass
class ContinuedFrom:
    """What a continued reply already said, so the new text is glued after it."""

    answer: str
    origins: list
    thinking: str


@dataclass
class ActiveReply:
    """The request being streamed: a chat reply (into message `mid`) or one Compare run."""

    rid: int
    t0: float
    mid: int = 0
    cid: int = 0
    saved: float = 0.0
    drop_oldest: bool = False
    parent: int | None = None  # a new version of the reply to this message
    cont: ContinuedFrom | None = None
    compare: str = ""  # Compare: "baseline" or "mtp"
    chart: bool = True  # its speeds go on the chart (a Compare repeat adds numbers only)
    tool_round: int = 0  # answers before this one that called tools, since the user's message
    speeds: list = field(default_factory=list)  # [seconds, decode tok/s] as it streamed, kept with its stats


class Replies:
    """The replies' part of ChatSession (a mixin: ChatSession holds the state and the signals)."""

    def send(self, text: str, attachments: list, edit_of: int | None = None) -> bool:
        """Add the user's message (a new version of message `edit_of`, when editing) and answer it."""
        if not (text or attachments) or self.busy or self.model_info is None or self.conversation_id is None:
            return False
        cid = self.conversation_id
        media = [self.store.save_attachment(a.data, a.name, a.kind, a.source) for a in attachments]
        if self.store.conversation(cid).title == "New chat":
            self.store.rename(cid, chat_title(text) if text else (attachments[0].name if attachments else "New chat"))
            self.conversations_changed.emit()
        if edit_of is not None:  # a new version beside the edited message
            self.store.add_message(cid, "user", text, parent=self.store.parent_of(edit_of), media=media)
            self.show_chat()
        else:
            mid = self.store.add_message(cid, "user", text, media=media)
            self.model.add("user", mid, text, media_items(media, self.store.attachment_path))
        self._start_reply()
        return True

    def regenerate(self, mid: int | None = None) -> None:
        """Another answer to the same question (message `mid`'s, or the last); the old one stays as a version."""
        m = self.model.message(mid) if mid is not None else self.model.last
        if m is not None and m.role == "assistant" and not self.busy and self.model_info is not None:
            self._start_reply(parent=self.store.parent_of(m.id))

    def continue_reply(self, mid: int) -> None:
        m = self.model.message(mid)
        if not self.busy and m is not None and m.role == "assistant" and m.text and self.model_info is not None:
            self._start_reply(cont=mid)

    def retry_dropping_oldest(self) -> None:
        """The user agreed to leave out the oldest turns for this reply."""
        self._start_reply(drop_oldest=True)

    def answer_again(self) -> None:
        """Answer the chat's last message again (after what stood in the way changed: tools off)."""
        if not self.busy and self.model_info is not None and self.model.last is not None:
            self._start_reply()

    def has_older_turns(self) -> bool:
        """Whether the chat has turns before its last message, that could be left out."""
        return sum(m.get("role") != "system" for m in self.history()) > 1

    def withdraw_unanswered(self):
        """The chat's last message, when it is the user's and has no answer (it did not fit),
        taken out of the chat: its ShownMessage (text, media), for the composer to put back in
        the input box."""
        last = self.model.last
        if self.busy or last is None or last.role != "user":
            return None
        cid = self.conversation_id
        self.store.delete_message(cid, last.id)
        self.model.remove(last.id)
        if self.model.last is None:  # the chat is empty again: it no longer goes by that message
            self.store.rename(cid, "New chat")
            self.conversations_changed.emit()
        self.count_context()
        return last

    def _start_reply(self, drop_oldest: bool = False, parent: int | None = None, cont: int | None = None,
                     tool_round: int = 0):
        """Answer the chat's last message, or write a new version of the reply to `parent`, or
        continue the cut reply `cont` (a message id)."""
        cid = self.conversation_id
        if cont is not None:
            history, mid = self.history(self.store.parent_of(cont)), cont
        else:
            history = self.history(parent)
            mid = self.store.add_message(cid, "assistant", "", parent="leaf" if parent is None else parent)
            if parent is not None:
                self.show_chat()  # the new version replaces the old one in view
            else:
                self.model.add("assistant", mid)
        m = self.model.message(mid)
        self.model.start_reply(mid)
        now = time.perf_counter()
        self.active = ActiveReply(self._next_rid(), now, mid=mid, cid=cid, saved=now,
                                  drop_oldest=drop_oldest, parent=parent, tool_round=tool_round,
                                  cont=None if cont is None else ContinuedFrom(m.text, list(m.origins), m.thinking))
        self.stats_reset.emit(False)
        self.busy_changed.emit()
        self.status.emit("Generating…", 0)
        settings = self.reply_settings().but(drop_oldest=drop_oldest, answer_prefix=m.text if cont else "")
        names = {t["function"]["name"] for t in settings.tools}
        if self.force_tool and tool_round == 0:  # the user asked for this tool: this answer calls it
            settings = settings.but(force_tool=self.force_tool if self.force_tool in names else "")
            self.force_tool = ""
        if cont is None:  # while it answers, the meter shows the prompt the engine reads (counted first)
            self.count_context(history)
        self._request(history, settings)

    def stop(self) -> None:
        if self.tool_turn is not None and self.active is None:  # calls waiting or running: none is answered further
            self.tool_turns.stop()
            return
        if self.active:
            self.worker.cancel(self.active.rid)
            if self.compare_run is not None:
                self.compare_run.stop()

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
            t = self._elapsed(a)
            self.live_stats.emit(stats, t, False)
            _keep_speed(a, t, stats)
        if a.compare:
            self.compare_streamed.emit(a.compare, answer)
            return
        self.model.append(a.mid, answer, thinking, pieces)
        now = time.perf_counter()
        if now - a.saved >= SAVE_INTERVAL_S:
            m = self.model.message(a.mid)
            self.store.update_message(a.mid, m.text, m.thinking, None, m.origins)
            a.saved = now  # (the view follows the growing reply itself, unless the user scrolled up)

    def _on_finished(self, rid: int, result: ReplyResult) -> None:
        a = self.active
        if not a or a.rid != rid:
            return
        self.active = None
        if result.mtp_ceiling is not None:
            self.mtp_limit.emit(result.mtp_ceiling, result.mtp_costs_ms)
        t = self._elapsed(a)
        self.live_stats.emit(result.stats, t, True)
        if _keep_speed(a, t, result.stats, final=True):
            result.stats["speeds"] = a.speeds  # the chart of this reply again, when its chat is opened
        if a.compare:
            self._compare_finished(a.compare, result)
            return
        self._learn_drafting(result.stats)
        answer, thinking, origins = result.answer, result.thinking, result.origins
        if a.cont:  # a continued reply: what was there, then what was added
            answer, origins, thinking = a.cont.answer + answer, a.cont.origins + origins, a.cont.thinking + thinking
        self.model.set_content(a.mid, answer, thinking, origins)
        self.model.set_stats(a.mid, result.stats)
        self.store.update_message(a.mid, answer, thinking, result.stats, origins)
        if result.stats.get("finish_reason") == "context":  # cut where no more fits: say so, and what helps
            n_ctx = self.model_info.n_ctx if self.model_info else 0
            self.status.emit(f"The reply filled the model's context ({n_ctx:,} tokens) and was cut there: start a "
                             "new chat, or raise the context size in Settings", 20000)
        else:
            self.status.emit(result.stats.get("footer", ""), 8000)
        if result.tool_calls and self.tools is not None and result.finish_reason != "cancelled":
            # busy until the calls are answered (a stopped reply's never run)
            self.tool_turns.begin(a.cid, a.mid, result.tool_calls, a.tool_round)
        self.busy_changed.emit()
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
            self._compare_interrupted(msg)
            return
        self._keep_what_was_written(a)
        if self.closing or kind == "cancelled":
            return
        if kind == "overflow":
            self.overflow.emit(msg, a.drop_oldest)
        else:
            self.reply_failed.emit(msg)

    def _keep_what_was_written(self, a: ActiveReply) -> None:
        """A failed reply: what it wrote stays (and can be continued); an empty one goes."""
        m = self.model.message(a.mid)
        if a.cont and len(m.text) == len(a.cont.answer):  # nothing was added: the reply stays as it was
            return
        if m.text:  # cut by an error (a dropped connection): keep what was written, and offer Continue
            stats = {**(m.stats or {}), "footer": "stopped by an error", "finish_reason": "error"}
            self.store.update_message(a.mid, m.text, m.thinking, stats, m.origins)
            self.model.set_stats(a.mid, stats)
            return
        self.store.delete_message(a.cid, a.mid)  # the empty reply placeholder goes; the user's message stays
        if a.parent is not None:  # a new version that never started: the previous one again
            self.store.show_version(a.cid, a.parent, 0)
            if a.cid == self.conversation_id:
                self.show_chat()
        else:
            self.model.remove(a.mid)


SPEED_EVERY_S = 0.25  # as the chart draws them (app.ui.stats_panel.StatsBar.LIVE_INTERVAL_S)
MAX_SPEEDS = 240  # a minute's worth: a longer reply keeps every other point


def _keep_speed(a: ActiveReply, t: float | None, stats: dict, final: bool = False) -> bool:
    """A point of the reply's speed chart, kept at most SPEED_EVERY_S apart (and the last one);
    True when the reply has a chart to keep."""
    tps = stats.get("decode_tps")
    if t is None or not tps:
        return bool(a.speeds) and t is not None
    if final or not a.speeds or t - a.speeds[-1][0] >= SPEED_EVERY_S:
        a.speeds.append([round(t, 3), round(tps, 2)])
        if len(a.speeds) > MAX_SPEEDS:
            a.speeds[:] = a.speeds[::2]
    return True
