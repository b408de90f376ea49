"""The question a chat that does not fit the context asks: what takes the room, and a button
for each thing that can help (app.session.context_parts.overflow_help decides which)."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox

from .safe_text import message_box

LABELS = {"drop": "Leave out the oldest turns", "tools_off": "Turn tools off and answer",
          "tools_off_only": "Turn tools off", "settings": "Raise the context size…"}


def ask_overflow(parent, help) -> str:
    """The user's choice (one of help.choices: LABELS' keys), or "" for Cancel."""
    box = message_box(parent, QMessageBox.Question, help.title, help.text, QMessageBox.Cancel)  # plain text
    buttons = {box.addButton(LABELS[c], QMessageBox.AcceptRole): c for c in help.choices}
    box.setDefaultButton(next(iter(buttons)))
    box.exec()
    return buttons.get(box.clickedButton(), "")
