"""The per-chat system prompt: presets or your own text; empty means the default from Settings."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QDialog, QDialogButtonBox, QLabel, QPlainTextEdit, QVBoxLayout

PRESETS = {
    "Default (from Settings)": "",
    "Concise": "Answer briefly and directly. Use short paragraphs or lists.",
    "Coding assistant": "You are a careful programming assistant. Give working code in fenced blocks with the "
                        "language named, explain only what is not obvious, and say when you are unsure.",
    "Teacher": "Explain step by step for a curious beginner, with a small example, and check understanding "
               "at the end.",
}


class SystemPromptDialog(QDialog):
    def __init__(self, current: str, parent=None):
        super().__init__(parent)
        self.setWindowTitle("System prompt for this chat")
        self.setMinimumWidth(520)
        lay = QVBoxLayout(self)
        lay.addWidget(QLabel("Instructions the model reads before this chat (replacing the default from "
                             "Settings). Takes effect from the next reply."))
        self.preset = QComboBox()
        self.preset.addItems(list(PRESETS) + ["Custom"])
        lay.addWidget(self.preset)
        self.text = QPlainTextEdit(current)
        lay.addWidget(self.text, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        match = next((name for name, text in PRESETS.items() if text == current), "Custom")
        self.preset.setCurrentText(match)
        self.preset.currentTextChanged.connect(self._preset_chosen)

    def _preset_chosen(self, name: str) -> None:
        if name in PRESETS:
            self.text.setPlainText(PRESETS[name])

    def value(self) -> str:
        return self.text.toPlainText().strip()
