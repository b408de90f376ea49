"""A tool call in the chat: which tool, with which arguments, and what the user decides —
Allow once, Always allow this tool in this chat, Deny — then its result, folded under the call.
Everything here is model or tool output: shown as plain text, never as HTML."""

from __future__ import annotations

import json
import re

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QToolButton, QVBoxLayout

ARGS_SHOWN = 2000  # characters of the arguments shown on the card (the tooltip has more)
RESULT_SHOWN = 100_000  # characters of a result shown when unfolded
RESULT_LINES = 14  # the unfolded result's height at most (it scrolls past that)

# what a card says in each state; an outcome's own line follows for the ones that failed
STATES = {"asking": "Waiting for your approval", "running": "Running…", "ok": "Done", "denied": "Denied",
          "error": "The tool reported an error", "timeout": "Timed out", "crashed": "The tool's server stopped",
          "too_large": "Result too large", "unknown": "Not available", "stopped": "Not run"}


BREAK_RUN = 40  # characters without a space after which a card's text may wrap


def arguments_text(arguments: dict, limit: int = ARGS_SHOWN) -> str:
    if not arguments:
        return "(no arguments)"
    text = json.dumps(arguments, ensure_ascii=False, indent=1)
    return text if len(text) <= limit else text[:limit] + "…"


def breakable(text: str) -> str:
    """Text with a zero-width break point in every long run without a space: a label wraps only
    at breaks, and one long argument (a path, a model's run of symbols) must not widen the chat."""
    return re.sub(rf"(\S{{{BREAK_RUN}}})(?=\S)", "\\1\u200b", text)


class ToolCard(QFrame):
    """One call. `decided` carries "once", "always" or "deny"; `set_outcome` shows what came of it."""

    decided = Signal(str)

    def __init__(self, call_id: str, name: str, arguments: dict, server: str = "", parent=None):
        super().__init__(parent)
        self.call_id, self.name, self.arguments = call_id, name, arguments
        self.state = "asking"
        self.setObjectName("toolCard")
        self.setFrameShape(QFrame.StyledPanel)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 6, 8, 6)
        lay.setSpacing(4)
        self.title = QLabel(f"⚙ {name}" + (f"  ·  {server}" if server else ""))
        self.title.setTextFormat(Qt.PlainText)
        self.title.setStyleSheet("font-weight:600")
        lay.addWidget(self.title)
        self.args = QLabel(breakable(arguments_text(arguments)))
        self.args.setTextFormat(Qt.PlainText)
        self.args.setWordWrap(True)
        self.args.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.args.setFont(QFontDatabase.systemFont(QFontDatabase.FixedFont))
        lay.addWidget(self.args)
        self.status = QLabel()
        self.status.setTextFormat(Qt.PlainText)
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        row = QHBoxLayout()
        self.buttons = {}
        for key, text in (("once", "Allow once"), ("always", "Always allow this tool in this chat"), ("deny", "Deny")):
            b = QPushButton(text)
            b.clicked.connect(lambda _=False, k=key: self._decide(k))
            row.addWidget(b)
            self.buttons[key] = b
        row.addStretch(1)
        lay.addLayout(row)
        self.fold = QToolButton()
        self.fold.setAutoRaise(True)
        self.fold.setCheckable(True)
        self.fold.toggled.connect(self._toggle)
        self.fold.hide()
        lay.addWidget(self.fold)
        self.result = QPlainTextEdit()
        self.result.setReadOnly(True)
        self.result.setFont(QFontDatabase.systemFont(QFontDatabase.FixedFont))
        self.result.hide()
        lay.addWidget(self.result)
        self.set_state("asking")

    def _decide(self, key: str) -> None:
        if self.state == "asking":
            self.decided.emit(key)

    def set_state(self, state: str, line: str = "") -> None:
        self.state = state
        self.status.setText(breakable(STATES.get(state, state) + (f": {line}" if line else "")))
        for b in self.buttons.values():
            b.setVisible(state == "asking")

    def set_outcome(self, kind: str, text: str) -> None:
        """What came of the call: a result folded under it, or one line saying why there is none."""
        if kind == "ok":
            self.set_state("ok")
            self.result.setPlainText(text[:RESULT_SHOWN] + ("…" if len(text) > RESULT_SHOWN else ""))
            lines = min(text.count("\n") + 1, RESULT_LINES)  # a short result takes a short box
            self.result.setFixedHeight(self.result.fontMetrics().lineSpacing() * lines + 14)
            self.fold.setText(f"▸ Result ({len(text):,} characters)")
            self.fold.show()
        else:
            self.set_state(kind, text)

    def _toggle(self, on: bool) -> None:
        self.fold.setText(("▾" if on else "▸") + self.fold.text()[1:])
        self.result.setVisible(on)
