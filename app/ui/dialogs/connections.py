"""Connections: OpenAI-compatible servers (llama-server, vLLM, ...) the user chats through.

A connection is a name, the server's address, an optional baseline server (the same model
served without a drafter, for Compare: servers cannot switch drafting per request) and the
models it served when last checked. The API key is kept in the system keyring (`keyring`),
never in the settings file; where no keyring exists it is kept only until Tandem closes.
Checking a server runs in a background thread: the window never waits on the network.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QFormLayout, QHBoxLayout, QLabel, QLineEdit,
                               QListWidget, QListWidgetItem, QMessageBox, QPushButton, QVBoxLayout)

from app.ui.safe_text import message

KEYRING_SERVICE = "Tandem"
_session_keys: dict[str, str] = {}  # where no keyring exists: kept until Tandem closes


@dataclass
class Connection:
    name: str
    url: str
    baseline_url: str = ""
    models: list[str] = field(default_factory=list)
    engine: str = ""


def load_connections(settings) -> list[Connection]:
    out = []
    for c in settings.get("connections") or []:
        if isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("url"), str):
            models = [m for m in c.get("models", []) if isinstance(m, str)][:256]
            out.append(Connection(c["name"], c["url"], str(c.get("baseline_url") or ""), models,
                                  str(c.get("engine") or "")))
    return out


def save_connections(settings, conns: list[Connection]) -> None:
    settings["connections"] = [asdict(c) for c in conns]
    settings.save()


def find_connection(settings, name: str) -> Connection | None:
    return next((c for c in load_connections(settings) if c.name == name), None)


def keyring_available() -> bool:
    try:
        import keyring
        from keyring.backends import fail

        return not isinstance(keyring.get_keyring(), fail.Keyring)
    except Exception:
        return False


def get_api_key(name: str) -> str:
    if name in _session_keys:
        return _session_keys[name]
    if keyring_available():
        import keyring

        try:
            return keyring.get_password(KEYRING_SERVICE, name) or ""
        except Exception:
            return ""
    return ""


def set_api_key(name: str, key: str) -> bool:
    """Store (or with '' delete) a connection's key; False when it is kept for this session only."""
    if keyring_available():
        import keyring

        try:
            if key:
                keyring.set_password(KEYRING_SERVICE, name, key)
            else:
                try:
                    keyring.delete_password(KEYRING_SERVICE, name)
                except Exception:
                    pass
            _session_keys.pop(name, None)
            return True
        except Exception:
            pass
    if key:
        _session_keys[name] = key
    else:
        _session_keys.pop(name, None)
    return False


class _Probe(QObject):
    """Connects to a server in a background thread; the result arrives as a signal."""

    done = Signal(object, str)  # (ServerInfo or None, error message)

    def start(self, url: str, key: str) -> None:
        def run():
            from engine.backends.remote import RemoteBackend, RemoteError

            try:
                b = RemoteBackend.probe(url, key or None)
                self.done.emit(b, "")
            except RemoteError as e:
                self.done.emit(None, str(e))
            except Exception as e:  # never a silent failure
                self.done.emit(None, f"{type(e).__name__}: {e}")

        threading.Thread(target=run, name="tandem-probe", daemon=True).start()


class ConnectionEditor(QDialog):
    """Add or edit one connection; Check lists the server's models."""

    def __init__(self, conn: Connection | None, taken: set[str], parent=None):
        super().__init__(parent)
        self.setWindowTitle("Server connection")
        self.setMinimumWidth(520)
        self.taken = taken
        self.conn = conn or Connection("", "")
        form = QFormLayout()
        self.name = QLineEdit(self.conn.name)
        self.name.setPlaceholderText("e.g. GPU server")
        self.url = QLineEdit(self.conn.url)
        self.url.setPlaceholderText("http://192.168.1.20:8080/v1")
        self.key = QLineEdit(get_api_key(self.conn.name) if self.conn.name else "")
        self.key.setEchoMode(QLineEdit.Password)
        self.key.setPlaceholderText("optional")
        self.baseline = QLineEdit(self.conn.baseline_url)
        self.baseline.setPlaceholderText("optional: the same model without a drafter, for Compare")
        self.baseline.setToolTip("Servers choose speculative decoding when they start, not per request. To "
                                 "Compare, run a second server with the same model and no drafter, and give "
                                 "its address here.")
        form.addRow("Name", self.name)
        form.addRow("Address", self.url)
        form.addRow("API key", self.key)
        form.addRow("Baseline server", self.baseline)
        lay = QVBoxLayout(self)
        lay.addLayout(form)
        note = QLabel("The key is kept in your system keyring." if keyring_available() else
                      "No system keyring here: the key is kept only until Tandem closes.")
        note.setStyleSheet("color: gray")
        lay.addWidget(note)
        row = QHBoxLayout()
        self.check_btn = QPushButton("Check and list models")
        self.check_btn.clicked.connect(self.check)
        row.addWidget(self.check_btn)
        row.addStretch(1)
        lay.addLayout(row)
        self.status = QLabel(", ".join(self.conn.models) if self.conn.models else "Not checked yet.")
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.PlainText)  # server text: never HTML
        lay.addWidget(self.status)
        buttons = QDialogButtonBox(QDialogButtonBox.Save | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.save)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.probe = _Probe(self)
        self.probe.done.connect(self._checked)
        self.checking = False

    def check(self) -> None:
        self.checking = True
        self.check_btn.setEnabled(False)
        self.status.setText("Connecting…")
        self.probe.start(self.url.text(), self.key.text().strip())

    def _checked(self, info, error: str) -> None:
        self.checking = False
        self.check_btn.setEnabled(True)
        if info is None:
            self.status.setText(error)
            return
        self.conn.models, self.conn.engine = list(info.models), info.engine
        self.conn.url = info.base_url
        self.status.setText(f"{info.engine}: {len(info.models)} model(s): {', '.join(info.models[:20])}")

    def save(self) -> None:
        name, url = self.name.text().strip(), self.url.text().strip()
        if not name or not url:
            message(self, QMessageBox.Warning, "Connection", "A connection needs a name and an address.")
            return
        if ":" in name:
            message(self, QMessageBox.Warning, "Connection", "A connection name cannot contain ':'.")
            return
        if name in self.taken:
            message(self, QMessageBox.Warning, "Connection", f"There is already a connection named {name!r}.")
            return
        from engine.backends.remote import RemoteError, normalize_url

        try:
            url = normalize_url(url)
            base = normalize_url(self.baseline.text()) if self.baseline.text().strip() else ""
        except RemoteError as e:
            message(self, QMessageBox.Warning, "Connection", str(e))
            return
        if self.conn.url and normalize_url(self.conn.url) != url:
            self.conn.models = []  # another server: its models are not known yet
        self.conn.name, self.conn.url, self.conn.baseline_url = name, url, base
        set_api_key(name, self.key.text().strip())  # without a keyring: kept until Tandem closes
        self.accept()


class ConnectionsDialog(QDialog):
    """Settings → Connections: the servers, with Add, Edit and Remove."""

    def __init__(self, settings, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Connections")
        self.setMinimumSize(560, 320)
        self.settings = settings
        lay = QVBoxLayout(self)
        lay.addWidget(QLabel("Servers that run Gemma 4 for you (llama-server, vLLM, SGLang, Ollama). Their "
                             "models appear in the model picker."))
        self.list = QListWidget()
        self.list.itemDoubleClicked.connect(lambda _: self.edit())
        lay.addWidget(self.list, 1)
        row = QHBoxLayout()
        for text, slot in (("Add…", self.add), ("Edit…", self.edit), ("Remove", self.remove)):
            b = QPushButton(text)
            b.clicked.connect(slot)
            row.addWidget(b)
        row.addStretch(1)
        close = QPushButton("Close")
        close.clicked.connect(self.accept)
        row.addWidget(close)
        lay.addLayout(row)
        self.refresh()

    def refresh(self) -> None:
        self.list.clear()
        for c in load_connections(self.settings):
            models = f"{len(c.models)} model(s)" if c.models else "not checked"
            item = QListWidgetItem(f"{c.name} — {c.url}  ({c.engine or 'server'}, {models})"
                                   + ("  · baseline: " + c.baseline_url if c.baseline_url else ""))
            item.setData(Qt.UserRole, c.name)
            self.list.addItem(item)

    def _selected(self) -> Connection | None:
        item = self.list.currentItem()
        return find_connection(self.settings, item.data(Qt.UserRole)) if item else None

    def add(self) -> None:
        self._edit(None)

    def edit(self) -> None:
        c = self._selected()
        if c is not None:
            self._edit(c)

    def _edit(self, conn: Connection | None) -> None:
        conns = load_connections(self.settings)
        taken = {c.name for c in conns} - ({conn.name} if conn else set())
        dlg = ConnectionEditor(conn, taken, self)
        if dlg.exec() != QDialog.Accepted:
            return
        if conn is not None and conn.name != dlg.conn.name:
            set_api_key(conn.name, "")
        conns = [c for c in conns if conn is None or c.name != conn.name] + [dlg.conn]
        save_connections(self.settings, conns)
        self.refresh()

    def remove(self) -> None:
        c = self._selected()
        if c is None:
            return
        set_api_key(c.name, "")
        save_connections(self.settings, [x for x in load_connections(self.settings) if x.name != c.name])
        self.refresh()
