"""The real main window, offscreen, on the given models, and the steps tests take in it."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.core.settings import Settings
from app.core.store import Store
from app.ui.window import MainWindow
from engine.models.library import Library

TIMEOUT = 120000  # generous: a busy CI machine must not fail a test by slowness
# the big shaped pairs (tests/support/shaped.py) beside another worker's: Compare on the E4B shape
# took 6 s alone and 20 s beside the other size tests here, and passed 120 s once in CI
BIG_TIMEOUT = 480000


def make_window(qtbot, tmp_path, target, drafter="", timeout=TIMEOUT, **settings):
    s = Settings(tmp_path / "settings.json")
    s.update({"target": str(target), "drafter": str(drafter), "max_tokens": 120, **settings})
    w = MainWindow(s, Store(tmp_path / "chats.sqlite3"), Library(tmp_path / "models.json"))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.session.model_info is not None, timeout=timeout)
    return w


def send(qtbot, w, text):
    w.input.setPlainText(text)
    qtbot.keyClick(w.input, Qt.Key_Return)
    qtbot.waitUntil(lambda: not w.session.busy, timeout=TIMEOUT)
    return w.chat_view.widgets()[-1]


def compare(qtbot, w, text, timeout=TIMEOUT):
    """Run Compare on `text` and wait for its verdict; the page."""
    w.input.setPlainText(text)
    w.compare()
    qtbot.waitUntil(lambda: w.compare_page.concluded, timeout=timeout)
    return w.compare_page
