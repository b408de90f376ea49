"""Screenshots of the real app with the synthetic models, for the README and for review.

    xvfb-run -a -s "-screen 0 1280x860x24" .venv/bin/python scripts/screenshots.py resources/screenshots [dark] [coding]

Writes chat.png, find.png (Ctrl+F in the chat), shortcuts.png (Help → Keyboard shortcuts),
compare.png, origins.png, vision.png (a chat with a picture), models.png, small.png (the window
at 800x600) and welcome.png; with "coding" instead: files.png (an attached
file, a reply's code block and its diff), folder.png, tools.png (calls to the tests' MCP server)
and tools-settings.png. With "dark", each with a -dark suffix. Uses a temporary settings file,
chat database and model library, so your own are not touched.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path


def main(out: Path, theme: str = "light", which: str = "") -> int:
    from PySide6.QtWidgets import QApplication

    from app.ui.theme import apply_theme
    from app.core.settings import Settings
    from app.core.store import Store
    from app.ui.window import MainWindow
    from engine.models.hardware import this_machine
    from engine.models.library import Library
    from engine.testmodels import make_test_models

    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="tandem-shots-"))
    # the coding shots need Gemma 4's own template (tool calls); the rest keep the plain one
    target, drafter = make_test_models(tmp / "models", "tiny", 0.8, **({"template": "gemma4"} if which else {}))
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
    if which == "coding":
        coding_shots(win, tmp, wait, shot)
        win.close()
        return 0
    for prompt in ("Hello! Who are you?", "Write a Python function that adds two numbers."):
        win.input.setPlainText(prompt)
        win.send()
        wait(lambda: not win.session.busy)
    shot("chat.png")

    find_shots(win, shot)

    win.origin_switch.setChecked(True)
    shot("origins.png")
    win.origin_switch.setChecked(False)

    # a chat with a picture (the synthetic projector reads it; the tiny model's answer is noise)
    win.new_conversation()
    from app.ui.attachments import Attachment
    from PySide6.QtGui import QColor, QImage, QPainter

    img = QImage(320, 200, QImage.Format_RGB32)
    img.fill(QColor("#2b6cb0"))
    p = QPainter(img)
    p.fillRect(40, 40, 120, 120, QColor("#f6ad55"))
    p.fillRect(190, 70, 90, 90, QColor("#68d391"))
    p.end()
    from app.ui.attachments import png_bytes

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

    from app.ui.dialogs.models_dialog import ModelsDialog

    models = ModelsDialog(win.library, this_machine(), current=str(target), parent=win)
    models.show()
    shot("models.png", models)
    models.close()

    from app.ui.dialogs.welcome import WelcomeDialog

    welcome = WelcomeDialog(win, library=win.library)
    welcome.show()
    shot("welcome.png", welcome)
    welcome.close()

    win.resize(800, 600)
    shot("small.png")
    win.close()
    return 0


def find_shots(win, shot) -> None:
    """Find in the chat (Ctrl+F) and Help → Keyboard shortcuts."""
    from app.ui.shortcuts import show_shortcuts

    win.find_bar.open()
    win.find_bar.edit.setText("w00010")  # in both replies: the current match and the others
    shot("find.png")
    win.find_bar.close_bar()
    show_shortcuts(win)
    shot("shortcuts.png", win.shortcuts_dialog)
    win.shortcuts_dialog.close()


def coding_shots(win, tmp: Path, wait, shot) -> None:
    """Files, a folder, a diff and MCP tool calls (the tests' own MCP server answers)."""
    from app.ui.attachments import check
    from app.ui.dialogs.diff_dialog import DiffDialog
    from app.ui.dialogs.folder_dialog import FolderDialog
    from app.tools.config import load_servers
    from app.core.text_files import AttachedFile
    from app.ui.dialogs.tools_dialog import ToolsDialog

    code = 'def area(w, h):\n    """The area of a w by h rectangle."""\n    return w * h\n'
    src = tmp / "project" / "geometry.py"
    src.parent.mkdir(parents=True)
    src.write_text(code)
    (src.parent / "README.md").write_text("# Geometry\nSmall helpers.\n")
    (src.parent / ".gitignore").write_text("*.log\n")
    (src.parent / "debug.log").write_text("noise\n")
    win.settings["max_tokens"] = 24
    win.composer.add_attachments([check(code.encode(), "geometry.py", str(src))])
    wait(lambda: all(i.tokens for i in win.attach_bar.items))
    win.input.setPlainText("Add a perimeter function")
    win.send()
    wait(lambda: not win.session.busy)
    edited = code + '\n\ndef perimeter(w, h):\n    """Twice the sum of the sides."""\n    return 2 * (w + h)\n'
    win.store.add_message(win.session.conversation_id, "assistant",
                          f"Here is geometry.py with a perimeter:\n\n```python\n{edited}```\n")
    win.session.show_chat()
    win.input.setPlainText("Now write tests for both")
    shot("files.png")
    dlg = DiffDialog(edited, AttachedFile("geometry.py", code, str(src)), win)
    dlg.resize(900, 420)
    dlg.show()
    shot("diff.png", dlg)
    dlg.close()
    folder = FolderDialog(str(src.parent), win.composer.count_texts, 3000, win)
    folder.show()
    wait(lambda: folder._tokens is not None)
    folder._tick_all(True)
    shot("folder.png", folder)
    folder.close()

    server = Path(__file__).resolve().parent.parent / "tests" / "support" / "mcp_test_server.py"
    win.settings["mcp_servers"] = [{"name": "notes", "transport": "stdio", "command": sys.executable,
                                    "args": [str(server)], "env": {}, "enabled": True}]
    win._tool_runner().refresh(load_servers(win.settings)[0])
    wait(lambda: win.composer.tools_btn.isEnabled())
    tools = ToolsDialog(win.settings, win.tool_runner, win)
    tools.show()
    wait(lambda: True, 3)
    shot("tools-settings.png", tools)
    tools.reject()
    win.new_conversation()
    win.charts_act.setChecked(False)  # room for the calls
    win.mtp_banner.hide()
    win._force_tool("today")
    win.input.setPlainText("What is the date today?")
    win.send()
    wait(lambda: win.session.tool_turn is not None)
    card = next(iter(win.chat_view.widget_for(win.session.tool_turn.mid).tool_cards.values()))
    card.buttons["once"].click()
    wait(lambda: not win.session.busy)
    card.fold.click()
    win._force_tool("big_page")
    win.input.setPlainText("And the long page?")
    win.send()
    wait(lambda: win.session.tool_turn is not None)
    shot("tools.png")
    win.stop()
    win.charts_act.setChecked(True)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "resources/screenshots"),
                  sys.argv[2] if len(sys.argv) > 2 else "light", sys.argv[3] if len(sys.argv) > 3 else ""))
