"""The chat view: a chat's messages (one path through its tree of versions), the example
prompts of an empty chat, and the banner shown while a message is being edited."""

from __future__ import annotations

from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QLabel, QScrollArea, QVBoxLayout, QWidget

from .render import cut_off
from app.core.store import Message
from .widgets import EmptyState, MessageWidget


class ChatView(QWidget):
    action = Signal(str, object)  # a message's button: (name, MessageWidget)
    save_code = Signal(str, str)  # a code block's Save as…: (code, suggested file name)
    diff_code = Signal(str, object, bool)  # a code block's Diff with…: (code, AttachedFile, cut off)
    example_chosen = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.show_origins = False
        self.attachment_path = lambda item: None  # the store's: where an attachment's file is
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

    def show_messages(self, messages: list[Message]) -> None:
        from .tool_view import ToolCard

        self.clear()
        w = None
        for m in messages:
            if m.role == "tool":  # a call's result: folded under the call, in the answer that made it
                card = w.tool_cards.get((m.tool or {}).get("call_id")) if w is not None else None
                if card is not None:
                    kind = (m.tool or {}).get("kind", "ok")
                    card.set_outcome(kind, m.content if kind == "ok" else
                                     m.content.split(": ", 1)[-1].rstrip("."))
                continue
            w = self.add(m.role, m.id)
            for c in m.calls:
                card = ToolCard(str(c.get("id", "")), str(c.get("name", "")), c.get("arguments") or {})
                card.set_state("stopped")  # until its result is found after it
                w.add_tool_card(card)
            if m.media:
                w.set_media([(self.attachment_path(i), str(i.get("name", "")), str(i.get("kind", "image")),
                              str(i.get("source", ""))) for i in m.media])
            w.set_content(m.content, m.thinking, m.origins or [])
            w.set_stats(m.stats)
            w.set_version(m.version, m.versions)
        self.mark_last()

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
