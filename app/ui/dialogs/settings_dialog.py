"""The settings dialog: models, hardware, sampling, system prompt, theme, servers and tools."""

from __future__ import annotations

import os

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFileDialog, QFormLayout,
                               QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit, QPushButton, QSpinBox, QWidget)

from app.core.settings import Settings
from engine.generation import AUTO
from engine.models.draft_head import HEADS

RELOAD_KEYS = ("target", "drafter", "draft_head", "target_gpu_layers", "drafter_gpu_layers", "n_ctx", "threads")


class SettingsDialog(QDialog):
    def __init__(self, settings: Settings, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Tandem settings")
        self.settings = settings
        form = QFormLayout(self)

        def path_row(key, title):
            edit = QLineEdit(settings[key])
            btn = QPushButton("Browse…")
            btn.clicked.connect(lambda: self._browse(edit, title))
            row = QWidget()
            lay = QHBoxLayout(row)
            lay.setContentsMargins(0, 0, 0, 0)
            lay.addWidget(edit, 1)
            lay.addWidget(btn)
            return edit, row

        self.target, row = path_row("target", "Gemma 4 model (GGUF)")
        form.addRow("Model", row)
        self.drafter, row = path_row("drafter", "MTP drafter (GGUF)")
        form.addRow("MTP drafter", row)
        self.draft_head = QComboBox()
        self.draft_head.addItems(list(HEADS))
        self.draft_head.setCurrentText(settings["draft_head"])
        self.draft_head.setToolTip("The drafter's head: clustered scores cluster centroids first and exact logits "
                                   "only for the best clusters' tokens (the E2B and E4B drafters carry them; for a "
                                   "drafter without, Tandem clusters its head once, a minute or two); full scores "
                                   "every token; auto: clustered where the drafter has it")
        form.addRow("Drafter head", self.draft_head)

        self._add_numbers(form, settings)
        self.system = QPlainTextEdit(settings["system_prompt"])
        self.system.setFixedHeight(70)
        form.addRow("System prompt", self.system)
        self.theme = QComboBox()
        self.theme.addItems(["system", "light", "dark"])
        self.theme.setCurrentText(settings["theme"])
        form.addRow("Theme", self.theme)
        conns = QPushButton("Connections…")
        conns.setToolTip("Servers (llama-server, vLLM, …) that run Gemma 4 for you; their models join the picker")
        conns.clicked.connect(self._connections)
        form.addRow("Servers", conns)
        tools = QPushButton("MCP servers…")
        tools.setToolTip("Tools the model may use in a chat, each call only with your yes (Model Context Protocol)")
        tools.clicked.connect(self._tools)
        tools.setEnabled(hasattr(self.parent(), "open_tools"))
        form.addRow("Tools", tools)
        self.error = QLabel()  # why OK did not close the dialog
        self.error.setWordWrap(True)
        self.error.setObjectName("formError")  # red, the theme's (resources/styles)
        self.error.hide()
        form.addRow(self.error)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def _add_numbers(self, form: QFormLayout, settings: Settings) -> None:
        """The spin boxes of `self.fields`, one row each."""
        def spin(key, lo, hi, tip="", auto=False):
            if auto:
                self._auto.add(key)
            return _spin(settings[key], lo, hi, tip, auto)

        def dspin(key, lo, hi, step):
            w = QDoubleSpinBox()
            w.setRange(lo, hi)
            w.setSingleStep(step)
            w.setValue(float(settings[key]))
            return w

        self._auto: set[str] = set()  # the spins whose least value is "auto"
        chosen = " (auto: chosen from the memory this machine has free, each time a model loads)"
        self.fields = {
            "target_gpu_layers": spin("target_gpu_layers", -1, 999, "Model layers on the GPU (-1 = all)" + chosen,
                                      auto=True),
            "drafter_gpu_layers": spin("drafter_gpu_layers", -1, 999, "Drafter layers on the GPU (-1 = all)"
                                       + chosen, auto=True),
            "n_ctx": spin("n_ctx", 256, 262144, "Context size in tokens" + chosen, auto=True),
            "threads": spin("threads", 0, os.cpu_count() or 1, "CPU threads (0 = physical cores)"),
            "temperature": dspin("temperature", 0.0, 2.0, 0.05),
            "top_k": spin("top_k", 0, 1000, "0 = off"),
            "top_p": dspin("top_p", 0.01, 1.0, 0.01),
            "min_p": dspin("min_p", 0.0, 0.99, 0.01),
            "repeat_penalty": dspin("repeat_penalty", 0.5, 2.0, 0.01),
            "max_tokens": spin("max_tokens", 1, 131072, "Longest reply in tokens"),
            "tool_timeout_s": spin("tool_timeout_s", 1, 3600, "How long an allowed tool call may run before it is "
                                                              "given up (the model is told)"),
        }
        labels = {"target_gpu_layers": "GPU layers (model)", "drafter_gpu_layers": "GPU layers (drafter)",
                  "n_ctx": "Context size", "threads": "Threads", "temperature": "Temperature (0 = greedy)",
                  "top_k": "Top-k", "top_p": "Top-p", "min_p": "Min-p", "repeat_penalty": "Repetition penalty",
                  "max_tokens": "Max reply tokens", "tool_timeout_s": "Tool time limit (s)"}
        for key, w in self.fields.items():
            form.addRow(labels[key], w)

    def focus_field(self, key: str) -> None:
        """The field of setting `key` has the keyboard, its value selected to type over."""
        w = self.fields[key]
        w.setFocus(Qt.OtherFocusReason)
        w.selectAll()

    def _connections(self) -> None:
        from .connections import ConnectionsDialog

        ConnectionsDialog(self.settings, self).exec()

    def _tools(self) -> None:
        self.parent().open_tools()  # the window's: it owns the running servers

    def _browse(self, edit: QLineEdit, title: str):
        path, _ = QFileDialog.getOpenFileName(self, title, edit.text(), "GGUF models (*.gguf)")
        if path:
            edit.setText(path)

    def problem(self) -> tuple[str, QLineEdit | None]:
        """What keeps these values from being saved, and the field it is in (("", None): nothing)."""
        for edit, what in ((self.target, "model"), (self.drafter, "MTP drafter")):
            path = os.path.expanduser(edit.text().strip())
            if path and not os.path.isfile(path):
                return f"The {what} file {path!r} does not exist: choose the file with Browse…", edit
        return "", None

    def accept(self) -> None:
        """OK: saved only when the model files exist (a path typed wrong would fail the next start)."""
        message, field = self.problem()
        if field is not None:
            self.error.setText(message)
            self.error.show()
            field.setFocus()
            field.selectAll()
            return
        super().accept()

    def values(self) -> dict:
        v = {"target": os.path.expanduser(self.target.text().strip()),
             "drafter": os.path.expanduser(self.drafter.text().strip()),
             "system_prompt": self.system.toPlainText(), "theme": self.theme.currentText(),
             "draft_head": self.draft_head.currentText()}
        for key, w in self.fields.items():
            v[key] = AUTO if key in self._auto and w.value() == w.minimum() else w.value()
        return v

    def apply(self) -> tuple[bool, bool]:
        """Store the values; returns (models must be reloaded, theme changed)."""
        new = self.values()
        reload = any(new[k] != self.settings[k] for k in RELOAD_KEYS)
        theme = new["theme"] != self.settings["theme"]
        self.settings.update(new)
        self.settings.save()
        return reload, theme


def _spin(value, lo: int, hi: int, tip: str, auto: bool) -> QSpinBox:
    """`auto`: one step below `lo` reads "auto" (the value AUTO: chosen at each load)."""
    w = QSpinBox()
    w.setRange(lo - 1 if auto else lo, hi)
    if auto:
        w.setSpecialValueText("auto")
    w.setValue(w.minimum() if value == AUTO else int(value))
    w.setToolTip(tip)
    return w
