"""The window's layout at small and usual sizes: the stats strip, the file chips and the diff
dialog show whole, inside the window, without the user resizing anything. Offscreen Qt lays
widgets out for real, so these are geometry checks, not guesses."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtWidgets import QLabel

from ..support.window import make_window

LONGEST_STATS = {  # the numbers that make every label of the strip its longest
    "decode_tps": 1234.5, "ttft_s": 12.34, "prefill_tps": 2109.0, "media_s": 12.34, "acceptance_rate": None,
    "drafts_reported": False, "mode": "remote", "mean_accepted_length": 3.45,
}
PAUSED = {"decode_tps": 1234.5, "ttft_s": 12.34, "prefill_tps": 2109.0, "media_s": 12.34, "acceptance_rate": 0.123,
          "mode": "mtp", "draft_max": 0, "engine": "llama.cpp", "paused": True, "mean_accepted_length": 3.45}


def inside(win, w) -> bool:
    """`w`'s whole rectangle lies in the window's."""
    top_left = w.mapTo(win, QPoint(0, 0))
    return QRect(QPoint(0, 0), win.size()).contains(QRect(top_left, w.size()))


def whole(lab) -> bool:
    """A label shows all its text: it is at least as wide as the text, and inside the window."""
    return lab.isVisible() and lab.contentsRect().width() >= lab.fontMetrics().horizontalAdvance(lab.text())


@pytest.mark.parametrize("stats", [LONGEST_STATS, PAUSED], ids=["not-reported", "mtp-paused"])
def test_the_stats_strip_shows_every_label_whole_at_800_by_600(qtbot, win, stats):
    win.resize(800, 600)
    qtbot.waitUntil(lambda: win.size().width() == 800 and win.size().height() == 600, timeout=5000)
    qtbot.wait(50)  # the resize's layout passes are over: the texts change after them, as in use
    win.session.live_stats.emit(stats, None, True)
    labels = [lab for lab, _ in win.stats_bar.labels.values()]
    assert "2109 tok/s + 12.34 s reading media" in labels[2].text()

    def laid_out():
        for lab in labels:
            assert whole(lab) and inside(win, lab), (lab.text(), lab.geometry())

    qtbot.waitUntil(laid_out, timeout=3000)
    assert win.width() == 800  # the strip made room by itself, not by widening the window


@pytest.mark.parametrize("width", [None, 800], ids=["as-opened", "800"])
def test_file_chips_never_widen_the_window(qtbot, win, tmp_path, width):
    """Three chips with long names, in the window as it opens (1180 px, under a 1400 px screen;
    no resize after the chips come) and at 800 px."""
    from app.ui.attachments import read_file

    if width is None:
        width = win.width()
        assert width <= 1400
    else:
        win.resize(width, 700)
        qtbot.waitUntil(lambda: win.width() == width, timeout=5000)
    paths = []
    for i in range(3):
        p = tmp_path / f"a_rather_long_file_name_for_the_module_number_{i}_of_the_project_in_question.py"
        p.write_text(f"def f{i}():\n    return {i}\n" * 40)
        paths.append(p)
    win.composer.add_attachments([read_file(p) for p in paths])
    qtbot.waitUntil(lambda: all(i.tokens for i in win.attach_bar.items), timeout=10000)  # the chips relabelled
    qtbot.wait(100)  # any layout pass the chips start is over
    assert win.width() == width
    for w in (win.send_btn, win.attach_btn, win.input, win.context_label, win.attach_bar):
        assert w.isVisible() and inside(win, w), w
    chips = win.attach_bar.findChildren(QLabel, "attachmentTile")
    assert len(chips) == 3
    view = win.attach_bar.scroll.viewport()
    for chip, path in zip(chips, paths):
        assert whole(chip)  # an elided name, shown whole, not cut by the chip's edge
        assert chip.mapTo(view, QPoint(0, chip.height())).y() <= view.height()  # nor cut at the bottom
        assert path.name in chip.toolTip()  # the whole name is a hover away


LONG_LINE = "total = " + " + ".join(f"a_rather_long_name_{i}" for i in range(12))


@pytest.mark.parametrize("old, new", [(LONG_LINE + "\nx = 1\n", "x = 2\n"), ("x = 1\n", LONG_LINE + "\nx = 2\n")],
                         ids=["long-original", "long-reply"])
def test_the_diff_dialog_shares_its_width_fairly(qtbot, old, new):
    from PySide6.QtGui import QGuiApplication

    from app.core.text_files import AttachedFile
    from app.ui.dialogs.diff_dialog import DiffDialog

    d = DiffDialog(new, AttachedFile("calc.py", old))
    qtbot.addWidget(d)
    d.show()
    qtbot.waitExposed(d)
    screen = QGuiApplication.primaryScreen().availableGeometry()
    assert d.width() <= screen.width() and d.height() <= screen.height()  # opens on the screen
    table = d.view.document().rootFrame().childFrames()[0]
    x = [d.view.cursorRect(table.cellAt(1, col).firstCursorPosition()).x() for col in range(4)]
    width = d.view.viewport().width()
    assert d.view.document().size().width() <= width  # no side pushes the other out of sight
    assert width - x[2] >= 0.4 * width and x[2] >= 0.4 * width, x  # the reply (right) and the original


@pytest.mark.parametrize("title, text", [("Could not load the model", "No such file."),
                                         ("Could not load the model", "x" * 400)], ids=["short-text", "long-text"])
def test_a_message_box_is_wide_enough_for_its_title(qtbot, title, text):
    from PySide6.QtWidgets import QMessageBox

    from app.ui.safe_text import TITLE_MARGIN, message_box

    box = message_box(None, QMessageBox.Warning, title, text)
    qtbot.addWidget(box)
    box.show()
    qtbot.waitExposed(box)
    assert box.width() >= box.fontMetrics().horizontalAdvance(title) + TITLE_MARGIN  # "Could … model" no more
    assert box.textFormat() == Qt.PlainText


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_a_gemma_4_window_fits_800_px(qtbot, tmp_path, gemma4_tools, theme):
    """With Gemma 4's template the toolbar has its Thinking switch too, and with the theme's
    style sheet its switches are wider: the window still goes down to 800 px (a 14-character
    model picker made it 807)."""
    from PySide6.QtWidgets import QApplication

    from app.ui.theme import apply_theme

    app = QApplication.instance()
    sheet, palette = app.styleSheet(), app.palette()
    w = make_window(qtbot, tmp_path, gemma4_tools["target"], gemma4_tools[0.7])
    try:
        apply_theme(app, theme)
        assert w.think_switch.isVisible()
        assert w.minimumSizeHint().width() <= 790, w.minimumSizeHint()
    finally:
        w.close()
        app.setStyleSheet(sheet)
        app.setPalette(palette)


def test_a_tool_card_wraps_a_long_argument_instead_of_widening_the_chat(qtbot, win):
    """A model's run of symbols as an argument (seen with the test models and real MCP servers)
    made the chat scroll sideways and cut the reply's buttons."""
    arg = "".join(map(chr, range(5, 127))).replace(" ", "") * 3  # control characters and symbols, no space
    s = win.store
    cid = s.create_conversation("A long argument")
    s.add_message(cid, "user", "What time is it?")
    s.add_message(cid, "assistant", "", tool={"calls": [{"id": "c1", "name": "get_current_time",
                                                          "arguments": {"timezone": arg}}]})
    s.add_message(cid, "tool", "Invalid timezone: " + arg.replace("\\", "\\\\"),
                  tool={"call_id": "c1", "name": "get_current_time", "kind": "error"})
    s.add_message(cid, "assistant", "~" + "\ufffd" * 300)  # and a reply's own run of symbols
    win.open_conversation(cid)
    win.resize(900, 700)
    bar = win.chat_view.scroll.horizontalScrollBar()
    qtbot.waitUntil(lambda: bool(win.chat_view.widgets()), timeout=5000)
    qtbot.wait(50)  # a layout pass: an absence (of a scroll bar) has no event to wait on
    assert bar.maximum() == 0, bar.maximum()
