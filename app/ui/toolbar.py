"""The bar above the chat: the model picker, the MTP switch and draft length, thinking,
Compare, How MTP works and Settings. The window connects to its widgets' own signals."""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QPushButton, QSpinBox, QToolButton, QWidget

from engine.generation import AUTO, MAX_DRAFT
from engine.models.library import Library

from app.core import help_text
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
        self.draft_spin.setRange(0, MAX_DRAFT)  # 0 shows as "k auto": chat_options() says AUTO
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

    def show_model(self, info, busy: bool) -> None:
        """Enable what the loaded model (an app.core.chat_types.ModelInfo, or None) allows."""
        can_draft = bool(info and info.can_draft)
        fixed = bool(info and info.remote and not info.can_switch_mtp)  # the server decides, not each request
        self.mtp_switch.setText(info.sources_label if info else "MTP")
        self.mtp_switch.setEnabled(can_draft and not fixed)
        self.draft_spin.setEnabled(can_draft and not fixed and self.mtp_switch.isChecked())
        self.mtp_switch.setToolTip(help_text.mtp_switch_tip(info))
        can_compare = bool(info and info.has_baseline)
        self.compare_btn.setEnabled(can_compare and not busy)
        self.compare_btn.setToolTip(
            (info.baseline_error or help_text.COMPARE_NEEDS_BASELINE) if info and info.remote and not can_compare
            else "Send the prompt in the input box twice: baseline, then MTP, and compare"
            + (" (the baseline on the connection's baseline server)" if info and info.remote else ""))
        self.picker.setEnabled(not busy)

    def chat_options(self) -> tuple[bool, int | str, bool]:
        """(drafting, draft_max, thinking) as the switches show them; draft_max AUTO or 1..MAX_DRAFT."""
        k = self.draft_spin.value()
        return self.mtp_switch.isChecked(), AUTO if k == 0 else k, self.think_switch.isChecked()

    def set_chat_options(self, drafting: bool, draft_max: int | str, thinking: bool) -> None:
        """Show a chat's options without reporting them back as changes."""
        switches = (self.mtp_switch, self.draft_spin, self.think_switch)
        for w in switches:
            w.blockSignals(True)
        self.mtp_switch.setChecked(drafting)
        self.draft_spin.setValue(0 if draft_max == AUTO else draft_max)
        self.think_switch.setChecked(thinking)
        for w in switches:
            w.blockSignals(False)
