"""Screenshots of the real app with the synthetic models, for the README and for review.

    xvfb-run -a -s "-screen 0 1280x860x24" .venv/bin/python scripts/screenshots.py resources/screenshots [dark]

Writes chat.png, compare.png, origins.png, vision.png (a chat with a picture), models.png,
small.png (the window at 800x600) and welcome.png; with "dark", the same with a -dark suffix. Uses a temporary settings file, chat
database and model library, so your own are not touched.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path


def main(out: Path, theme: str = "light") -> int:
    from PySide6.QtWidgets import QApplication

    from app.theme import apply_theme
    from app.settings import Settings
    from app.store import Store
    from app.window import MainWindow
    from engine.models.hardware import this_machine
    from engine.models.library import Library
    from engine.testmodels import make_test_models

    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="tandem-shots-"))
    target, drafter = make_test_models(tmp / "models", "tiny", 0.8)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    settings = Settings(tmp / "settings.json")
    settings.update(target=str(target), drafter=str(drafter), max_tokens=160, theme=theme)
    apply_theme(app, theme)
    suffix = "" if theme == "light" else f"-{theme}"
    win = MainWindow(settings, Store(tmp / "chats.sqlite3"), Library(tmp / "models.json"))
    win.resize(1280, 820)
    win.show()

    def wait(cond, timeout=30.0):
        t = time.time()
        while not cond() and time.time() - t < timeout:
            app.processEvents()
            time.sleep(0.01)
        for _ in range(20):  # let layouts and repaints settle
            app.processEvents()
            time.sleep(0.01)

    def shot(name, w=None):
        w = w or win
        w.raise_()
        wait(lambda: True)
        pix = w.screen().grabWindow(w.winId())
        if pix.isNull() or pix.width() < 10:
            pix = w.grab()
        name = name.replace(".png", f"{suffix}.png")
        pix.save(str(out / name))
        print(out / name)

    wait(lambda: win.session.model_info is not None)
    for prompt in ("Hello! Who are you?", "Write a Python function that adds two numbers."):
        win.input.setPlainText(prompt)
        win.send()
        wait(lambda: not win.session.busy)
    shot("chat.png")

    win.origin_switch.setChecked(True)
    shot("origins.png")
    win.origin_switch.setChecked(False)

    # a chat with a picture (the synthetic projector reads it; the tiny model's answer is noise)
    win.new_conversation()
    from app.attachments import Attachment
    from PySide6.QtGui import QColor, QImage, QPainter

    img = QImage(320, 200, QImage.Format_RGB32)
    img.fill(QColor("#2b6cb0"))
    p = QPainter(img)
    p.fillRect(40, 40, 120, 120, QColor("#f6ad55"))
    p.fillRect(190, 70, 90, 90, QColor("#68d391"))
    p.end()
    from app.attachments import png_bytes

    win.attach_bar.add(Attachment(png_bytes(img), "shapes.png", "image"))
    win.input.setPlainText("What shapes are in this picture?")
    win.send()
    wait(lambda: not win.session.busy)
    shot("vision.png")

    win.input.setPlainText("Count from one to twenty.")
    win.compare()
    page = win.compare_page
    wait(lambda: page.concluded)
    shot("compare.png")
    win.stack.setCurrentIndex(0)

    from app.models_dialog import ModelsDialog

    models = ModelsDialog(win.library, this_machine(), current=str(target), parent=win)
    models.show()
    shot("models.png", models)
    models.close()

    from app.welcome import WelcomeDialog

    welcome = WelcomeDialog(win, library=win.library)
    welcome.show()
    shot("welcome.png", welcome)
    welcome.close()

    win.resize(800, 600)
    shot("small.png")
    win.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "resources/screenshots"),
                  sys.argv[2] if len(sys.argv) > 2 else "light"))
