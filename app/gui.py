"""Start the desktop app: `tandem [--model T.gguf] [--drafter D.gguf]`."""

from __future__ import annotations

import argparse
import logging
import sys
from importlib import resources


def apply_theme(app, theme: str = "system") -> None:
    """Fusion style with a light or dark palette; 'system' follows the desktop's scheme."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QColor, QPalette

    app.setStyle("Fusion")
    dark = theme == "dark"
    if theme == "system":
        try:
            dark = app.styleHints().colorScheme() == Qt.ColorScheme.Dark
        except AttributeError:  # Qt < 6.5
            dark = False
    pal = QPalette()
    if dark:
        for role, color in ((QPalette.Window, "#202124"), (QPalette.WindowText, "#e8eaed"),
                            (QPalette.Base, "#18191b"), (QPalette.AlternateBase, "#26272a"),
                            (QPalette.Text, "#e8eaed"), (QPalette.Button, "#2b2c2f"),
                            (QPalette.ButtonText, "#e8eaed"), (QPalette.Highlight, "#3d7be0"),
                            (QPalette.HighlightedText, "#ffffff"), (QPalette.ToolTipBase, "#2b2c2f"),
                            (QPalette.ToolTipText, "#e8eaed"), (QPalette.Link, "#8ab4f8"),
                            (QPalette.PlaceholderText, "#8e9297"),
                            # Fusion draws frames and check box outlines from these
                            (QPalette.Light, "#5f6368"), (QPalette.Midlight, "#4a4d51"),
                            (QPalette.Mid, "#3c4043"), (QPalette.Dark, "#17181a"), (QPalette.Shadow, "#000000")):
            pal.setColor(role, QColor(color))
        # disabled controls must look disabled (the palette above sets every group alike)
        for role, color in ((QPalette.WindowText, "#6f7378"), (QPalette.Text, "#6f7378"),
                            (QPalette.ButtonText, "#6f7378"), (QPalette.Button, "#242528"),
                            (QPalette.Base, "#1d1e20"), (QPalette.PlaceholderText, "#5f6368")):
            pal.setColor(QPalette.Disabled, role, QColor(color))
    app.setPalette(pal)
    styles = resources.files("resources").joinpath("styles")
    qss = styles.joinpath("tandem.qss").read_text("utf-8")
    if dark:
        qss += styles.joinpath("tandem-dark.qss").read_text("utf-8")
    app.setStyleSheet(qss.replace("@BUBBLE_USER@", "#2d3a4f" if dark else "#e8f0fe")
                         .replace("@BUBBLE_MODEL@", "#26272a" if dark else "#ffffff"))


def app_icon():
    from PySide6.QtGui import QIcon

    icon = QIcon()
    icons = resources.files("resources").joinpath("icons")
    for size in (16, 24, 32, 48, 64, 128, 256, 512):
        icon.addFile(str(icons.joinpath(f"tandem-{size}.png")))
    return icon


def show_previous_crash(parent, text: str) -> None:
    from PySide6.QtWidgets import QMessageBox

    from .diagnostics import crash_path

    box = QMessageBox(QMessageBox.Warning, "Tandem closed unexpectedly",
                      "Tandem stopped unexpectedly last time (a crash inside the native engine). "
                      "Your conversations were saved as they streamed.\n\n"
                      f"The crash report was kept in {crash_path().with_suffix('.previous.log')}.",
                      QMessageBox.Ok, parent)
    box.setDetailedText(text)
    box.exec()


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
        elif win.model_info is None:
            return
        elif not state["sent"]:
            win.input.setPlainText(prompt)
            win.send()
            state["sent"] = True
        elif win._active is None:
            reply = win._message_widgets()[-1]
            print(f"smoke test: reply of {len(reply.text)} characters; {reply.footer.text()}", flush=True)
            win.close()
            app.exit(0 if reply.text and reply.stats else 1)

    timer = QTimer(win)
    timer.timeout.connect(tick)
    timer.start(100)


def run_gui(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="tandem", description="Tandem desktop app")
    ap.add_argument("--model", "-m", help="Gemma 4 target GGUF to load")
    ap.add_argument("--drafter", "-d", help="its MTP drafter GGUF")
    ap.add_argument("--smoke-test", metavar="PROMPT", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from .diagnostics import (enable_fault_handler, install_excepthook, previous_native_crash, qt_error_dialog,
                              setup_logging)
    from .settings import Settings
    from .window import MainWindow

    log_file = setup_logging()
    crashed = previous_native_crash()
    enable_fault_handler()
    install_excepthook(qt_error_dialog)
    logging.getLogger("tandem").info("starting Tandem %s, log at %s", __import__("engine").__version__, log_file)

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Tandem")
    app.setOrganizationName("Tandem")
    app.setDesktopFileName("io.github.tandem_chat.Tandem")
    app.setWindowIcon(app_icon())
    from .single_instance import SingleInstance
    from .store import default_db_path

    instance = SingleInstance(default_db_path())
    if not args.smoke_test and not instance.acquire():
        shown = instance.ask_owner_to_show()
        print("Tandem is already running" + ("; its window was brought to the front." if shown else "."))
        return 0
    settings = Settings()
    if args.model:
        settings["target"] = args.model
        settings["drafter"] = args.drafter or ""
    apply_theme(app, settings["theme"])
    win = MainWindow(settings)

    def bring_forward():
        win.showNormal()
        win.raise_()
        win.activateWindow()

    instance.on_show = bring_forward
    try:  # follow the desktop switching between light and dark while running (Qt >= 6.5)
        app.styleHints().colorSchemeChanged.connect(lambda *_: win.settings["theme"] == "system" and (
            apply_theme(app, "system"), [w.refresh() for w in win._message_widgets()]))
    except AttributeError:
        pass
    win.show()
    if args.smoke_test:
        run_smoke_test(win, args.smoke_test)
    elif crashed:
        QTimer.singleShot(0, lambda: show_previous_crash(win, crashed))
    if not settings["target"] and not args.smoke_test:
        QTimer.singleShot(0, win.show_welcome)  # first run: nothing to chat with yet
    try:
        return app.exec()
    finally:
        instance.release()
