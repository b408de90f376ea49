"""Serve on localhost: the loaded model as an OpenAI-compatible API for editors (Continue, Zed,
Aider, Cline), from the app. The switch, the port, the URL to copy, and a live request log. The
server (engine.serve) shares the engine with the window: one generation at a time, in turn."""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (QCheckBox, QDialog, QHBoxLayout, QLabel, QListWidget, QPushButton, QSpinBox,
                               QVBoxLayout)


class _LogRelay(QObject):
    """Request log entries from the server's thread, delivered on the GUI thread."""

    entry = Signal(dict)


class ServerPanel(QDialog):
    changed = Signal(str)  # the URL while serving, "" when stopped

    def __init__(self, engine_getter, model_name_getter, settings, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Local API server")
        self.setMinimumSize(560, 380)
        self.engine_getter, self.model_name_getter, self.settings = engine_getter, model_name_getter, settings
        self.server = None
        self.relay = _LogRelay(self)
        self.relay.entry.connect(self._logged)
        lay = QVBoxLayout(self)
        intro = QLabel("Editors and coding agents that speak the OpenAI or Anthropic API can use the loaded "
                       "model, with MTP, offline. Only this computer can connect (127.0.0.1).")
        intro.setWordWrap(True)
        lay.addWidget(intro)
        row = QHBoxLayout()
        self.switch = QCheckBox("Serve on localhost, port")
        self.switch.toggled.connect(self._toggled)
        self.port = QSpinBox()
        self.port.setRange(1024, 65535)
        self.port.setValue(int(settings.get("serve_port", 8080)))
        row.addWidget(self.switch)
        row.addWidget(self.port)
        row.addStretch(1)
        lay.addLayout(row)
        url_row = QHBoxLayout()
        self.url = QLabel("Not serving")
        self.url.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.copy_btn = QPushButton("Copy URL")
        self.copy_btn.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.url.text()))
        self.copy_btn.setEnabled(False)
        url_row.addWidget(self.url, 1)
        url_row.addWidget(self.copy_btn)
        lay.addLayout(url_row)
        self.hint = QLabel("")
        self.hint.setWordWrap(True)
        self.hint.setStyleSheet("color: gray")
        lay.addWidget(self.hint)
        lay.addWidget(QLabel("Requests:"))
        self.log = QListWidget()
        lay.addWidget(self.log, 1)

    def _toggled(self, on: bool) -> None:
        if on:
            self.start()
        else:
            self.stop()

    def start(self) -> bool:
        from engine.errors import TandemError
        from engine.serve import BackgroundServer, ServerState

        if self.server is not None:
            return True
        if self.engine_getter() is None:
            self.hint.setText("Load a local model first: the server serves the model loaded in Tandem.")
            self._set_switch(False)
            return False
        name = self.model_name_getter()
        # the engine and its name are looked up per request: loading another model serves that one
        state = ServerState(self.engine_getter, self.model_name_getter, on_log=self.relay.entry.emit)
        try:
            server = BackgroundServer(state, "127.0.0.1", self.port.value())
            server.start()
        except TandemError as e:
            self.hint.setText(str(e))
            self._set_switch(False)
            return False
        self.server = server
        self.settings["serve_port"] = self.port.value()
        self.url.setText(server.url)
        self.copy_btn.setEnabled(True)
        self.port.setEnabled(False)
        self.hint.setText(f"Base URL {server.url}, model name \"{name}\", any API key. Continue: provider "
                          "\"openai\" with apiBase; Aider: --openai-api-base and --model openai/" + name + ".")
        self._set_switch(True)
        self.changed.emit(server.url)
        return True

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
        self.url.setText("Not serving")
        self.copy_btn.setEnabled(False)
        self.port.setEnabled(True)
        self._set_switch(False)
        self.changed.emit("")

    def _set_switch(self, on: bool) -> None:
        self.switch.blockSignals(True)
        self.switch.setChecked(on)
        self.switch.blockSignals(False)

    def _logged(self, e: dict) -> None:
        from engine.serve.admission import log_line

        self.log.insertItem(0, f"{time.strftime('%H:%M:%S')}  {log_line(e)}")
        while self.log.count() > 500:
            self.log.takeItem(self.log.count() - 1)
