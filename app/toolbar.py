"""The bar above the chat: the model picker, the MTP switch and draft length, thinking,
Compare, How MTP works and Settings. The window connects to its widgets' own signals."""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QPushButton, QSpinBox, QToolButton, QWidget

from engine.models.library import Library

from .model_picker import ModelPicker


class ChatToolbar(QWidget):
    def __init__(self, library: Library, settings=None, parent=None):
        super().__init__(parent)
        bar = QHBoxLayout(self)
        bar.setContentsMargins(0, 0, 0, 0)
        self.picker = ModelPicker(library, settings)
        self.mtp_switch = QCheckBox("MTP")
        self.mtp_switch.setObjectName("mtpSwitch")
        self.draft_spin = QSpinBox()
        self.draft_spin.setRange(0, 8)  # 0 = auto
        self.draft_spin.setPrefix("k = ")
        self.draft_spin.setSpecialValueText("k auto")
        self.draft_spin.setToolTip("Draft length: tokens the drafter proposes per step. 'auto' chooses it "
                                   "every step from what drafting costs on this machine and how often the "
                                   "model accepts drafts, and pauses drafting when it does not pay off")
        self.think_switch = QCheckBox("Thinking")
        self.think_switch.setToolTip("Gemma 4 thinking mode for this chat")
        self.compare_btn = QPushButton("Compare")
        self.compare_btn.setToolTip("Send the prompt in the input box twice: baseline, then MTP, and compare")
        self.help_btn = QToolButton()
        self.help_btn.setText("?")
        self.help_btn.setToolTip("How MTP works, in plain words")
        self.settings_btn = QToolButton()
        self.settings_btn.setText("⚙")
        self.settings_btn.setToolTip("Settings")
        bar.addWidget(self.picker, 1)
        for w in (self.mtp_switch, self.draft_spin, self.think_switch, self.compare_btn, self.help_btn,
                  self.settings_btn):
            bar.addWidget(w)
