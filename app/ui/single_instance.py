"""One Tandem window per chat database: a second start brings the running window forward
instead of writing the same chats from two processes.

A QLockFile next to the database says who owns it (Qt removes the lock of a process that
died); a QLocalServer named after the database lets a second start ask the owner to show
its window, then exit.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QLockFile
from PySide6.QtNetwork import QLocalServer, QLocalSocket

SHOW = b"show\n"


class SingleInstance:
    def __init__(self, db_path: Path, on_show: Callable[[], None] | None = None):
        db_path = Path(db_path)
        self.name = "tandem-" + hashlib.sha256(str(db_path.resolve()).encode()).hexdigest()[:16]
        self.lock = QLockFile(str(db_path.with_name(db_path.name + ".lock")))
        self.lock.setStaleLockTime(0)  # stale only when the owning process is gone
        self.on_show = on_show
        self.server: QLocalServer | None = None

    def acquire(self) -> bool:
        """True: this process owns the database (and listens for later starts)."""
        if not self.lock.tryLock(200):
            return False
        QLocalServer.removeServer(self.name)  # left by a crashed owner
        self.server = QLocalServer()
        self.server.newConnection.connect(self._on_connection)
        self.server.listen(self.name)
        return True

    def ask_owner_to_show(self, timeout_ms: int = 2000) -> bool:
        sock = QLocalSocket()
        sock.connectToServer(self.name)
        if not sock.waitForConnected(timeout_ms):
            return False
        sock.write(SHOW)
        ok = sock.waitForBytesWritten(timeout_ms)
        sock.disconnectFromServer()
        return ok

    def _on_connection(self) -> None:
        while self.server.hasPendingConnections():
            sock = self.server.nextPendingConnection()
            sock.readyRead.connect(lambda s=sock: self._on_ready(s))

    def _on_ready(self, sock: QLocalSocket) -> None:
        if bytes(sock.readAll()).startswith(SHOW.strip()) and self.on_show is not None:
            self.on_show()
        sock.disconnectFromServer()

    def release(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        self.lock.unlock()
