"""The chat view: a chat's messages (one path through its tree of versions), built from the
session's chat model as it changes; the example prompts of an empty chat, and the banner shown
while a message is being edited."""

from __future__ import annotations

from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QLabel, QScrollArea, QVBoxLayout, QWidget

from .render import cut_off
from .widgets import EmptyState, MessageWidget


class ChatView(QWidget):
    action = Signal(str, object)  # a message's button: (name, MessageWidget)
    save_code = Signal(str, str)  # a code block's Save as…: (code, suggested file name)
    diff_code = Signal(str, object, bool)  # a code block's Diff with…: (code, AttachedFile, cut off)
    example_chosen = Signal(str)
    tool_decided = Signal(str, str)  # a tool card's answer: (call id, "once" | "always" | "deny")

    def __init__(self, parent=None):
        super().__init__(parent)
        self.show_origins = False
        self.model = None  # the ChatModel it shows (observe)
        self.attached_files = lambda: []  # the session's: the chat's text files, for code blocks' diffs
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.empty_state = EmptyState()
        self.empty_state.chosen.connect(self.example_chosen)
        lay.addWidget(self.empty_state)
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.host = QWidget()
        self.msg_layout = QVBoxLayout(self.host)
        self.msg_layout.addStretch(1)
        self.scroll.setWidget(self.host)
        lay.addWidget(self.scroll, 1)
        # follow the end while it grows (a streaming reply, its deferred Markdown render, its
        # footer), until the user scrolls up; scrolling back to the end follows again
        self.following = True
        bar = self.scroll.verticalScrollBar()
        bar.rangeChanged.connect(lambda _lo, hi: self.following and bar.setValue(hi))
        bar.valueChanged.connect(self._scrolled)

    def _scrolled(self, value: int) -> None:
        self.following = value >= self.scroll.verticalScrollBar().maximum() - 4

    # ---- contents -------------------------------------------------------------------
    def widgets(self) -> list[MessageWidget]:
        return [self.msg_layout.itemAt(i).widget() for i in range(self.msg_layout.count() - 1)]

    def clear(self) -> None:
        while self.msg_layout.count() > 1:
            w = self.msg_layout.takeAt(0).widget()
            if w:
                self.remove(w)

    # ---- the chat model: the session changes it, the view follows ----------------------
    def observe(self, model) -> None:
        """Follow `model` (app.session.chat_model.ChatModel): every widget here is built from it."""
        self.model = model
        model.reset.connect(self._reset)
        model.added.connect(self._added)
        model.removed.connect(self._removed)
        model.streamed.connect(lambda mid, answer, thinking, pieces:
                               self.widget_for(mid).append(answer, thinking, pieces))
        model.content_set.connect(self._content_set)
        model.stats_set.connect(self._stats_set)
        model.call_added.connect(lambda mid, call: self._add_card(self.widget_for(mid), call))
        model.call_changed.connect(lambda mid, call: self.widget_for(mid).tool_cards[call.id].set_outcome(
            call.state, call.text))
        model.reply_started.connect(self._reply_started)

    def widget_for(self, mid: int) -> MessageWidget | None:
        return next((w for w in self.widgets() if w.message_id == mid), None)

    def _reset(self) -> None:
        self.clear()
        for m in self.model.messages:
            w = self.add(m.role, m.id)
            for call in m.calls.values():
                self._add_card(w, call)
            if m.media:
                w.set_media(m.media)
            w.set_content(m.text, m.thinking, list(m.origins))  # the widget's own copy: it grows its own
            w.set_stats(m.stats)
            w.set_version(m.version, m.versions)
        self.mark_last()
        self.scroll_to_end()

    def _added(self, m) -> None:
        w = self.add(m.role, m.id)
        if m.media:
            w.set_media(m.media)
        w.set_content(m.text)
        self.mark_last()

    def _removed(self, mid: int) -> None:
        w = self.widget_for(mid)
        if w is not None:
            self.remove(w)
        self.mark_last()

    def _content_set(self, mid: int) -> None:
        m = self.model.message(mid)
        self.widget_for(mid).set_content(m.text, m.thinking, list(m.origins))

    def _stats_set(self, mid: int) -> None:
        self.widget_for(mid).set_stats(self.model.message(mid).stats)
        self.mark_last()

    def _reply_started(self, mid: int) -> None:
        self.mark_last()
        self.scroll_to_end()

    def _add_card(self, w: MessageWidget, call) -> None:
        from .tool_view import ToolCard

        card = ToolCard(call.id, call.name, call.arguments, call.server)
        card.set_outcome(call.state, call.text)
        card.decided.connect(lambda choice, call_id=call.id: self.tool_decided.emit(call_id, choice))
        w.add_tool_card(card)

    def add(self, role: str, mid: int) -> MessageWidget:
        w = MessageWidget(role, mid)
        w.show_origins = self.show_origins
        w.copy_requested.connect(lambda text: QGuiApplication.clipboard().setText(text))
        w.action.connect(self.action)
        w.save_requested.connect(self.save_code)
        # a block the reply stopped inside is only the start of a file: the dialog must not save it over one
        w.diff_requested.connect(lambda code, f, w=w: self.diff_code.emit(code, f, cut_off(w.text, code)))
        w.attached_files = lambda: self.attached_files()  # read when it renders: set after the view is built
        self.msg_layout.insertWidget(self.msg_layout.count() - 1, w)
        w.show()  # now, not on the next event loop pass: hidden ones are the edited ones
        return w

    def remove(self, w: MessageWidget) -> None:
        # out of the view now, not when the deferred delete runs (a nested event loop may not run it)
        w.setParent(None)
        w.deleteLater()

    def mark_last(self) -> None:
        """Continue only on the last reply, where the model was cut off."""
        ws = self.widgets()
        self.empty_state.setVisible(not ws)
        for i, w in enumerate(ws):
            w.set_last(i == len(ws) - 1)

    def hide_from(self, w: MessageWidget | None) -> None:
        """Editing: the edited message and what follows it leave the view (None: all back)."""
        hiding = False
        for x in self.widgets():
            hiding = hiding or x is w
            x.setHidden(hiding)
        self.mark_last()

    def set_origins(self, on: bool) -> None:
        self.show_origins = on
        for w in self.widgets():
            w.show_origins = on
            w.refresh()

    def refresh(self) -> None:
        for w in self.widgets():
            w.refresh()

    def scroll_to_end(self) -> None:
        """To the end, and follow it from now on."""
        self.following = True
        bar = self.scroll.verticalScrollBar()
        bar.setValue(bar.maximum())
        QTimer.singleShot(0, lambda: bar.setValue(bar.maximum()))


class EditBanner(QLabel):
    """Shown above the input while a message is being edited."""

    def __init__(self, parent=None):
        super().__init__("Editing a message: sending makes a new version (the old one stays, "
                         "reachable with its ‹ › arrows). Esc cancels.", parent)
        self.setObjectName("editBanner")
        self.setWordWrap(True)
        self.hide()
