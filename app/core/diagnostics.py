"""Logs and crash reports.

Logs rotate under the platformdirs user log folder. An uncaught Python exception is logged
and shown in a dialog with the log's path instead of the app vanishing. Native crashes
(a llama.cpp abort, a segfault) are written by faulthandler to a file, and the next start
offers to show it.
"""

from __future__ import annotations

import faulthandler
import logging
import logging.handlers
import os
import sys
import threading
import traceback
from pathlib import Path

log = logging.getLogger("tandem")
_fault_file = None


def log_dir() -> Path:
    from platformdirs import user_log_dir

    d = Path(os.environ.get("TANDEM_LOG_DIR") or user_log_dir("Tandem", appauthor=False))
    d.mkdir(parents=True, exist_ok=True)
    return d


def log_path() -> Path:
    return log_dir() / "tandem.log"


def crash_path() -> Path:
    return log_dir() / "native-crash.log"


def setup_logging(max_bytes: int = 2 * 2**20, backups: int = 3) -> Path:
    path = log_path()
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers = [h for h in root.handlers if not isinstance(h, logging.handlers.RotatingFileHandler)]
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return path


def previous_native_crash() -> str | None:
    """What faulthandler wrote during the last run, if that run crashed; then starts afresh."""
    p = crash_path()
    text = None
    try:
        if p.exists() and p.stat().st_size > 0:
            text = p.read_text("utf-8", "replace")
            p.replace(p.with_suffix(".previous.log"))
    except OSError:
        pass
    return text


def enable_fault_handler() -> Path:
    """Native crashes (SIGSEGV, SIGABRT from a GGML_ASSERT, ...) dump the Python stacks here."""
    global _fault_file
    p = crash_path()
    _fault_file = open(p, "a", encoding="utf-8")  # kept open for the life of the process
    faulthandler.enable(_fault_file, all_threads=True)
    return p


def install_excepthook(show_dialog=None) -> None:
    """Log uncaught exceptions (any thread) and tell the user where the details are."""

    def report(exc_type, exc, tb):
        text = "".join(traceback.format_exception(exc_type, exc, tb))
        log.error("uncaught exception\n%s", text)
        if show_dialog is not None:
            try:
                show_dialog(f"{exc_type.__name__}: {exc}", str(log_path()))
            except Exception:
                pass

    sys.excepthook = report
    threading.excepthook = lambda a: report(a.exc_type, a.exc_value, a.exc_traceback)
