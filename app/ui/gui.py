"""Start the desktop app: `tandem [--model T.gguf] [--drafter D.gguf]`."""

from __future__ import annotations

import argparse
import logging
import sys
from importlib import resources


def app_icon():
    from PySide6.QtGui import QIcon

    icon = QIcon()
    icons = resources.files("resources").joinpath("icons")
    for size in (16, 24, 32, 48, 64, 128, 256, 512):
        icon.addFile(str(icons.joinpath(f"tandem-{size}.png")))
    return icon


def show_previous_crash(parent, text: str) -> None:
    from PySide6.QtWidgets import QMessageBox

    from app.core.diagnostics import crash_path

    box = QMessageBox(QMessageBox.Warning, "Tandem closed unexpectedly",
                      "Tandem stopped unexpectedly last time (a crash inside the native engine). "
                      "Your conversations were saved as they streamed.\n\n"
                      f"The crash report was kept in {crash_path().with_suffix('.previous.log')}.",
                      QMessageBox.Ok, parent)
    box.setDetailedText(text)
    box.exec()


def qt_error_dialog(message: str, path: str) -> None:
    from PySide6.QtCore import QThread
    from PySide6.QtWidgets import QApplication, QMessageBox

    app = QApplication.instance()
    if app is None or QThread.currentThread() is not app.thread():
        return  # only the GUI thread may open dialogs; the log still has it
    from .safe_text import message as show

    show(None, QMessageBox.Critical, "Tandem hit a problem",
         f"Something went wrong, but your conversations are saved.\n\n{message}\n\nDetails are in the log:\n{path}")


def run_smoke_test(win, prompt: str, timeout_s: float = 180.0) -> None:
    """For bundle checks: wait for the models, send one prompt, print the reply's numbers, quit."""
    import time

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    t0 = time.monotonic()
    state = {"sent": False}

    def tick():
        app = QApplication.instance()
        if time.monotonic() - t0 > timeout_s:
            print("smoke test: timed out", flush=True)
            app.exit(1)
        elif win.session.model_info is None:
            return
        elif not state["sent"]:
            win.input.setPlainText(prompt)
            win.send()
            state["sent"] = True
        elif not win.session.busy:
            reply = win.chat_view.widgets()[-1]
            print(f"smoke test: reply of {len(reply.text)} characters; {reply.footer.text()}", flush=True)
            win.close()
            app.exit(0 if reply.text and reply.stats else 1)

    timer = QTimer(win)
    timer.timeout.connect(tick)
    timer.start(100)


def cannot_open_window() -> str | None:
    """Why Qt would abort creating the application (and leave a crash report for the next
    start), said first: no display, or X11 libraries missing (named, with their install line)."""
    import os

    from app.core.display_libs import install_hint, missing_xcb_libs

    if sys.platform.startswith("linux") and not any(os.environ.get(v) for v in
                                                    ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")):
        return ("tandem: error: no display to open the window on (DISPLAY and WAYLAND_DISPLAY are "
                "unset); the commands work without one: see tandem --help\n")
    missing = missing_xcb_libs()
    return install_hint(missing) if missing else None


def run_gui(args: argparse.Namespace) -> int:
    """The window, with `tandem`'s top-level options (engine.cli.build_parser)."""
    why_not = cannot_open_window()
    if why_not:
        sys.stderr.write(why_not)
        return 2
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from app.core.diagnostics import enable_fault_handler, install_excepthook, previous_native_crash, setup_logging
    from app.core.settings import Settings
    from .theme import apply_theme
    from .window import MainWindow

    log_file = setup_logging()
    crashed = previous_native_crash()
    install_excepthook(qt_error_dialog)
    logging.getLogger("tandem").info("starting Tandem %s, log at %s", __import__("engine").__version__, log_file)

    app = QApplication.instance() or QApplication(sys.argv[:1])
    # after Qt's start: a platform plugin that cannot load aborts with Qt's own message, and is
    # not reported at the next start as a crash inside the native engine
    enable_fault_handler()
    app.setApplicationName("Tandem")
    app.setOrganizationName("Tandem")
    app.setDesktopFileName("io.github.tandem_chat.Tandem")
    app.setWindowIcon(app_icon())
    from .single_instance import SingleInstance
    from app.core.store import default_db_path

    instance = SingleInstance(default_db_path())
    if not args.smoke_test and not instance.acquire():
        shown = instance.ask_owner_to_show()
        print("Tandem is already running" + ("; its window was brought to the front." if shown else "."))
        return 0
    settings = Settings()
    if args.model:
        settings["target"] = args.model
        settings["drafter"] = args.drafter or ""
        settings["remote"] = None  # the pair asked for, not the server used last
    apply_theme(app, settings["theme"])
    win = MainWindow(settings)

    def bring_forward():
        win.showNormal()
        win.raise_()
        win.activateWindow()

    instance.on_show = bring_forward
    win.show()
    if args.smoke_test:
        run_smoke_test(win, args.smoke_test)
    elif crashed:
        QTimer.singleShot(0, lambda: show_previous_crash(win, crashed))
    if not settings["target"] and not settings["remote"] and not args.smoke_test:
        QTimer.singleShot(0, win.show_welcome)  # first run: nothing to chat with yet
    try:
        return app.exec()
    finally:
        instance.release()
