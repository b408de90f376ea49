"""The window's menu bar: File, Chat, View, Help. Each entry calls one of the window's slots."""

from __future__ import annotations

from PySide6.QtGui import QAction, QKeySequence

from .shortcuts import show_shortcuts


def _action(win, text: str, slot, key=None, checkable: bool = False) -> QAction:
    act = QAction(text, win, checkable=checkable)
    if key is not None:
        act.setShortcut(key)
    (act.toggled if checkable else act.triggered).connect(slot)  # toggled: also when set from code
    return act


def build_menus(win) -> None:
    """Menus for `win` (a MainWindow); the checkable View entries become its attributes."""
    bar = win.menuBar()
    file_menu = bar.addMenu("&File")
    for text, slot, key in (("New chat", win.new_conversation, QKeySequence.New),
                            ("Models…", win.open_models, QKeySequence.Open),
                            ("Import GGUF…", win.import_model, None),
                            ("Connections…", win.open_connections, None),
                            ("Local API server…", win.open_server, None),
                            ("Export chat as Markdown…", lambda: win.export("md"), None),
                            ("Export chat as JSON…", lambda: win.export("json"), None),
                            # Ctrl+, as in VS Code and LM Studio (Qt's Preferences key is none on most desktops)
                            ("Settings…", win.open_settings, QKeySequence("Ctrl+,")),
                            ("Tools (MCP servers)…", win.open_tools, QKeySequence("Ctrl+T")),
                            ("Quit", win.close, QKeySequence.Quit)):
        file_menu.addAction(_action(win, text, slot, key))
    chat = bar.addMenu("&Chat")
    chat.addAction(_action(win, "System prompt for this chat…", win.edit_system_prompt))
    chat.addAction(_action(win, "Attach files…", win.composer.attach_files))
    chat.addAction(_action(win, "Attach folder…", lambda: win.composer.attach_folder()))
    chat.addSeparator()
    # the find bar is made after the menus (it needs the session): looked up when used
    chat.addAction(_action(win, "Find in chat…", lambda: win.find_bar.open(), QKeySequence.Find))
    chat.addAction(_action(win, "Find next", lambda: win.find_bar.step(1), QKeySequence("F3")))
    chat.addAction(_action(win, "Find previous", lambda: win.find_bar.step(-1), QKeySequence("Shift+F3")))
    view = bar.addMenu("&View")
    for text, key, step in (("Larger text", QKeySequence.ZoomIn, 0.1), ("Smaller text", QKeySequence.ZoomOut, -0.1),
                            ("Normal text size", QKeySequence("Ctrl+0"), 0.0)):
        view.addAction(_action(win, text, lambda _=False, d=step: win.scale_font(d), key))
    view.addSeparator()
    win.origin_switch = _action(win, "Token origins", win.toggle_origins, checkable=True)
    win.origin_switch.setToolTip("Tint each token: green = drafted and accepted, orange = produced by the "
                                 "model itself")
    view.addAction(win.origin_switch)
    win.charts_act = _action(win, "Speed charts", win.show_charts, checkable=True)
    win.charts_act.setChecked(bool(win.settings["show_charts"]))
    view.addAction(win.charts_act)
    help_menu = bar.addMenu("&Help")
    help_menu.addAction(_action(win, "How MTP works", win.explain_mtp))
    help_menu.addAction(_action(win, "Keyboard shortcuts", lambda: show_shortcuts(win)))
    help_menu.addAction(_action(win, "About Tandem", win.show_about))
