"""Logs rotate, uncaught exceptions are reported with the log path, native crashes are kept
for the next start; the version and packaged resources are found without the source tree."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from app.core import diagnostics


def test_logs_rotate(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_LOG_DIR", str(tmp_path))
    path = diagnostics.setup_logging(max_bytes=2000, backups=2)
    log = logging.getLogger("tandem.test")
    for i in range(200):
        log.info("line %d %s", i, "x" * 40)
    assert path == tmp_path / "tandem.log" and path.exists()
    assert (tmp_path / "tandem.log.1").exists() and (tmp_path / "tandem.log.2").exists()
    assert not (tmp_path / "tandem.log.3").exists()
    assert path.stat().st_size <= 2000


def test_uncaught_exception_is_logged_and_shown(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_LOG_DIR", str(tmp_path))
    diagnostics.setup_logging()
    shown = []
    old = sys.excepthook
    try:
        diagnostics.install_excepthook(lambda msg, path: shown.append((msg, path)))
        try:
            raise RuntimeError("boom in a slot")
        except RuntimeError:
            sys.excepthook(*sys.exc_info())
    finally:
        sys.excepthook = old
    assert shown == [("RuntimeError: boom in a slot", str(tmp_path / "tandem.log"))]
    for h in logging.getLogger().handlers:
        h.flush()
    assert "boom in a slot" in (tmp_path / "tandem.log").read_text()


def test_native_crash_is_offered_at_next_start(tmp_path):
    env = dict(os.environ, TANDEM_LOG_DIR=str(tmp_path))
    crash = ("from app.core import diagnostics; diagnostics.enable_fault_handler(); "
             "import faulthandler; faulthandler._sigsegv()")
    r = subprocess.run([sys.executable, "-c", crash], env=env, capture_output=True, timeout=60)
    assert r.returncode != 0
    check = "from app.core import diagnostics; t = diagnostics.previous_native_crash(); print(t is not None and 'Fatal Python error' in t)"
    r = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "True"
    r = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False"  # shown once, then kept as .previous.log
    assert (tmp_path / "native-crash.previous.log").exists()


def test_about_reports_version_and_llama_build(qtbot, tmp_path, tiny):
    import engine
    from app.core import help_text
    from app.core.settings import Settings
    from app.core.store import Store
    from app.ui.window import MainWindow

    w = MainWindow(Settings(tmp_path / "s.json"), Store(tmp_path / "c.sqlite3"))
    qtbot.addWidget(w)
    text = help_text.about()
    assert f"Tandem {engine.__version__}" in text and "llama-cpp-python 0.3.36" in text
    assert "GPU offload" in text and "CPU" in text
    w.close()


def test_window_icon_and_resources_load_from_the_package():
    from PySide6.QtWidgets import QApplication

    from app.ui.gui import app_icon

    QApplication.instance() or QApplication([])
    assert not app_icon().isNull() and len(app_icon().availableSizes()) >= 6
