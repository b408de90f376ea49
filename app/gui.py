"""Start the desktop app: `tandem [--model T.gguf] [--drafter D.gguf]`."""

from __future__ import annotations

import argparse
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
                            (QPalette.ToolTipText, "#e8eaed"), (QPalette.Link, "#8ab4f8")):
            pal.setColor(role, QColor(color))
    app.setPalette(pal)
    qss = resources.files("resources").joinpath("styles/tandem.qss").read_text("utf-8")
    app.setStyleSheet(qss.replace("@BUBBLE_USER@", "#2d3a4f" if dark else "#e8f0fe")
                         .replace("@BUBBLE_MODEL@", "#26272a" if dark else "#ffffff"))


def run_gui(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="tandem", description="Tandem desktop app")
    ap.add_argument("--model", "-m", help="Gemma 4 target GGUF to load")
    ap.add_argument("--drafter", "-d", help="its MTP drafter GGUF")
    args = ap.parse_args(argv)

    from PySide6.QtWidgets import QApplication

    from .settings import Settings
    from .window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Tandem")
    app.setOrganizationName("Tandem")
    settings = Settings()
    if args.model:
        settings["target"] = args.model
        settings["drafter"] = args.drafter or ""
    apply_theme(app, settings["theme"])
    win = MainWindow(settings)
    win.show()
    return app.exec()
