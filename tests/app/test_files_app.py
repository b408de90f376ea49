"""Text files as context in the real window: attached by button, by drop and by pasting a long
text; shown as chips with name, size and token count; sent to the model as a fenced block with
the file's name and language; kept with the chat (content-addressed) so a reopened chat and Edit
bring them back; binaries and files larger than the context refused with one line and their
numbers; files that do not fit beside the chat said before sending, with nothing lost."""

from __future__ import annotations

from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QFileDialog

from app.core.settings import Settings
from app.core.store import Store
from app.ui.window import MainWindow
from engine.models.library import Library

from ..support.widgets import tree_items
from ..support.window import TIMEOUT, make_window, send

CODE = '''def area(w, h):
    """The area of a w by h rectangle."""
    return w * h
'''


def _chips(w):
    return [w.media_row.itemAt(i).widget().text() for i in range(w.media_row.count() - 1)]


def _spy_prompts(win):
    """The messages the engine is asked to answer (the real engine still answers them)."""
    engine, seen = win.session.worker.engine, []
    real = engine.chat

    def chat(messages, *a, **k):
        seen.append(messages)
        return real(messages, *a, **k)

    engine.chat = chat
    return seen


def _counted(qtbot, win, n):
    qtbot.waitUntil(lambda: len(win.attach_bar.items) == n and all(i.tokens for i in win.attach_bar.items),
                    timeout=TIMEOUT)


def _with_file(qtbot, tmp_path, tiny, monkeypatch):
    """A window on the tiny pair with geometry.py attached and counted: (window, the file)."""
    win = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7], max_tokens=8)
    src = tmp_path / "geometry.py"
    src.write_text(CODE)
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(src)], ""))
    win.composer.attach_files()
    _counted(qtbot, win, 1)
    return win, src


def test_a_source_file_by_button_and_drop_goes_to_the_model_and_comes_back(qtbot, tmp_path, tiny, monkeypatch):
    win = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7], max_tokens=12)
    seen = _spy_prompts(win)
    src = tmp_path / "project" / "geometry.py"
    src.parent.mkdir()
    src.write_text(CODE)
    notes = tmp_path / "NOTES"  # no suffix: text by its content
    notes.write_text("# Notes\nkeep areas positive\n")
    shown = []
    monkeypatch.setattr("app.ui.composer.message", lambda p, icon, title, text, *a: shown.append(text))

    # by button: a chip with name, size and the engine's token count
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(src)], ""))
    before = win.composer.context_used
    win.composer.attach_files()
    _counted(qtbot, win, 1)
    item = win.attach_bar.items[0]
    # the meter counts the file waiting to be sent too, and says so
    assert win.context_label.text().startswith(f"context: {before + item.tokens:,} / ")
    assert f"files to send: {item.tokens:,} tokens" in win.context_label.toolTip()
    assert (item.kind, item.name, item.source) == ("text", "geometry.py", str(src.resolve()))
    exact = len(win.session.worker.engine.tokenize(CODE, add_special=False, parse_special=False))
    assert item.tokens == exact and item.label == f"geometry.py · {len(CODE)} B · {exact:,} tokens"

    # by drop, and a binary refused in one line (a dropped file goes the same way)
    drop = QMimeData()
    drop.setUrls([QUrl.fromLocalFile(str(notes))])
    win.input.dropEvent(QDropEvent(QPointF(10, 10), Qt.CopyAction, drop, Qt.LeftButton, Qt.NoModifier))
    _counted(qtbot, win, 2)
    binary = tmp_path / "blob.txt"
    binary.write_bytes(b"text-looking name\x00\x01\x02")
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(binary)], ""))
    win.composer.attach_files()
    assert len(win.attach_bar.items) == 2 and len(shown) == 1 and shown[0].startswith("blob.txt: a binary file")

    reply = send(qtbot, win, "Add a perimeter function")
    assert reply.text and not win.attach_bar.items
    asked = seen[-1][-1]["content"]
    assert asked.startswith("File: geometry.py\n```python\n" + CODE + "```\n\nFile: NOTES\n```\n# Notes")
    assert asked.endswith("```\n\nAdd a perimeter function")
    prompt = win.session.worker.engine.detokenize(win.session.worker.engine.format_chat(seen[-1]))
    assert CODE in prompt  # the template passes the file through whole
    user = win.chat_view.widgets()[-2]
    assert _chips(user) == ["▤ geometry.py", "▤ NOTES"]
    stored = win.store.messages(win.session.conversation_id)[-2].media
    assert [m["kind"] for m in stored] == ["text", "text"] and stored[0]["source"] == str(src.resolve())
    assert win.store.attachment_path(stored[0]).read_text() == CODE  # kept with the chat, by content
    assert [f.name for f in win.session.attached_files()] == ["geometry.py", "NOTES"]
    cid = win.session.conversation_id
    win.close()

    # the chat reopens with its files; Edit brings them back, and sending again sends them
    w2 = MainWindow(Settings(tmp_path / "settings.json"), Store(tmp_path / "chats.sqlite3"),
                    Library(tmp_path / "models.json"))
    qtbot.addWidget(w2)
    qtbot.waitUntil(lambda: w2.session.model_info is not None, timeout=TIMEOUT)
    w2.open_conversation(cid)
    user = [w for w in w2.chat_view.widgets() if w.role == "user"][0]
    assert _chips(user) == ["▤ geometry.py", "▤ NOTES"]
    w2.edit_message(user)
    _counted(qtbot, w2, 2)
    assert [(i.name, i.source) for i in w2.attach_bar.items] == [("geometry.py", str(src.resolve())),
                                                                 ("NOTES", str(notes.resolve()))]
    seen2 = _spy_prompts(w2)
    w2.input.setPlainText("Add a perimeter function, with a docstring")
    qtbot.keyClick(w2.input, Qt.Key_Return)
    qtbot.waitUntil(lambda: not w2.session.busy, timeout=TIMEOUT)
    assert CODE in seen2[-1][-1]["content"] and user.message_id not in [w.message_id for w in
                                                                        w2.chat_view.widgets()]
    w2.close()


def test_too_large_files_are_refused_or_held_back_with_their_numbers(qtbot, tmp_path, tiny, monkeypatch):
    win = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7], max_tokens=8, n_ctx=2048)
    shown = []
    monkeypatch.setattr("app.ui.window_dialogs.ask_overflow",
                        lambda parent, help: shown.append((help.title, help.text, help.choices)) or "")
    words = " ".join(f"w{i}" for i in range(3000))
    big = tmp_path / "big.log"
    big.write_text(words)
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(big)], ""))
    win.composer.attach_files()
    qtbot.waitUntil(lambda: "big.log" in win.statusBar().currentMessage(), timeout=TIMEOUT)
    status = win.statusBar().currentMessage()
    assert not win.attach_bar.items and "more than the whole 2,048-token context" in status
    n = int(status.split(": ")[1].split(" tokens")[0].replace(",", ""))
    assert n == len(win.session.worker.engine.tokenize(words, add_special=False, parse_special=False))

    # each fits alone, not both beside the chat: said before sending, and nothing is lost
    half = " ".join(f"v{i}" for i in range(230))  # about 1,100 tokens: one fits, two do not
    files = []
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(half + name)
        files.append(str(tmp_path / name))
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: (files, ""))
    win.composer.attach_files()
    _counted(qtbot, win, 2)
    n_messages = len(win.chat_view.widgets())
    win.input.setPlainText("Summarise both")
    win.send()
    assert len(shown) == 1
    title, text, choices = shown[0]
    assert title == "The attached files do not fit" and choices == ("settings",)  # no tools to turn off
    assert "2,048-token context" in text and "tokens too many" in text
    assert f"a.txt ({win.attach_bar.items[0].tokens:,})" in text
    # the same breakdown as a chat that does not fit
    files = sum(i.tokens for i in win.attach_bar.items)
    assert f"What takes the room:\n• attached files: {files:,} tokens" in text
    assert len(win.chat_view.widgets()) == n_messages and len(win.attach_bar.items) == 2
    assert win.input.toPlainText() == "Summarise both"
    win.close()


def test_a_long_paste_can_become_a_file_chip(qtbot, tmp_path, tiny):
    win = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7], max_tokens=8)
    win.input.setPlainText("Why does this fail? ")
    cur = win.input.textCursor()
    cur.movePosition(cur.MoveOperation.End)
    win.input.setTextCursor(cur)
    log = "\n".join(f"line {i}: ERROR something failed" for i in range(60))
    mime = QMimeData()
    mime.setText(log)
    win.input.insertFromMimeData(mime)
    assert win.composer.paste_offer.isVisible() and "60 lines" in win.composer.paste_offer.label.text()
    win.composer.paste_offer.make_btn.click()
    assert win.input.toPlainText() == "Why does this fail? "
    _counted(qtbot, win, 1)
    assert win.attach_bar.items[0].name == "pasted.txt" and win.attach_bar.items[0].text == log
    # a short paste is just text
    mime.setText("short")
    win.input.insertFromMimeData(mime)
    assert win.input.toPlainText().endswith("short") and not win.composer.paste_offer.isVisible()
    win.close()


def test_a_folder_honours_gitignore_and_the_ticked_files_are_sent(qtbot, tmp_path, tiny, monkeypatch):
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from app.ui.dialogs.folder_dialog import FolderDialog

    win = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7], max_tokens=8)
    seen = _spy_prompts(win)
    root = tmp_path / "shop"
    (root / "src").mkdir(parents=True)
    (root / "node_modules" / "left").mkdir(parents=True)
    (root / ".gitignore").write_text("*.secret\nbuild/\n")
    (root / "src" / "cart.py").write_text(CODE)
    (root / "src" / "keys.secret").write_text("TOKEN=1")
    (root / "build").mkdir()
    (root / "build" / "out.py").write_text("x = 1\n")
    (root / "node_modules" / "left" / "index.js").write_text("module.exports = 1\n")
    (root / "README.md").write_text("# Shop\n")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    ticked = {}

    def drive():
        dlg = QApplication.activeModalWidget()
        assert isinstance(dlg, FolderDialog)
        files = {path: item for path, item in tree_items(dlg.tree).items() if not path.endswith("/")}
        ticked["listed"] = sorted(files)
        ticked["skipped"] = dlg.skipped_label.text()
        qtbot.waitUntil(lambda: files["src/cart.py"].text(2) != "…", timeout=TIMEOUT)  # its tokens counted
        files["src/cart.py"].setCheckState(0, Qt.Checked)
        ticked["total"] = dlg.total_label.text()
        dlg.attach_btn.click()

    QTimer.singleShot(0, drive)
    drop = QMimeData()  # a folder dropped on the input opens its tree
    drop.setUrls([QUrl.fromLocalFile(str(root))])
    win.input.dropEvent(QDropEvent(QPointF(10, 10), Qt.CopyAction, drop, Qt.LeftButton, Qt.NoModifier))
    assert ticked["listed"] == [".gitignore", "README.md", "src/cart.py"]
    assert "ignored by .gitignore" in ticked["skipped"] and "node_modules" in ticked["skipped"]
    assert "binary" in ticked["skipped"] and "Ticked 1 file:" in ticked["total"]
    _counted(qtbot, win, 1)
    assert [(i.name, i.source) for i in win.attach_bar.items] == [("shop/src/cart.py",
                                                                   str((root / "src" / "cart.py").resolve()))]
    send(qtbot, win, "Review the cart")
    assert seen[-1][-1]["content"].startswith("File: shop/src/cart.py\n```python\n" + CODE)
    win.close()


def test_a_reply_that_edits_an_attached_file_shows_the_diff_and_saves_over_only_when_confirmed(
        qtbot, tmp_path, tiny, monkeypatch):
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    from app.ui.dialogs.diff_dialog import DiffDialog

    from ..support.widgets import click_link

    win, src = _with_file(qtbot, tmp_path, tiny, monkeypatch)
    send(qtbot, win, "Add a perimeter function")
    # the reply as a real model would write it (the synthetic one writes no code): a new version
    edited = CODE + '\n\ndef perimeter(w, h):\n    """Twice the sum of the sides."""\n    return 2 * (w + h)\n'
    cid = win.session.conversation_id
    win.store.add_message(cid, "assistant", f"Here is geometry.py with a perimeter:\n\n```python\n{edited}```\n")
    win.session.show_chat()
    reply = win.chat_view.widgets()[-1]
    assert "Diff with geometry.py" in reply.body.toPlainText()

    answers, seen = [QMessageBox.No, QMessageBox.Yes], {}
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: answers.pop(0))

    def drive():
        dlg = QApplication.activeModalWidget()
        assert isinstance(dlg, DiffDialog)
        seen["summary"] = dlg.summary.text()
        dlg.save_over_btn.click()  # the user says No: nothing is written
        seen["after_no"] = src.read_text()
        dlg.save_over_btn.click()  # then Yes
        seen["status"] = dlg.status.text()
        dlg.reject()

    QTimer.singleShot(0, drive)
    click_link(qtbot, reply, "diff:0")
    qtbot.waitUntil(lambda: "status" in seen, timeout=TIMEOUT)
    assert seen["summary"] == "+5 −0 lines" and seen["after_no"] == CODE
    assert seen["status"] == f"Saved over {src.resolve()}" and src.read_text() == edited.rstrip("\n") + "\n"
    win.close()


def test_a_reply_cut_off_inside_its_code_block_never_saves_over_the_file(qtbot, tmp_path, tiny, monkeypatch):
    """A reply stopped at max tokens inside its code block is part of a file: Save over original
    wrote such a block over the whole file (64 lines became 46, with no undo). The diff still
    shows, Save over original is off and the dialog says why; Save as… stays."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    from app.ui.dialogs.diff_dialog import DiffDialog

    from ..support.widgets import click_link

    win = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7], max_tokens=8)
    src = tmp_path / "text.py"
    original = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(16))  # 64 lines
    src.write_text(original)
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(src)], ""))
    win.composer.attach_files()
    _counted(qtbot, win, 1)
    send(qtbot, win, "Make f0 add one more")
    # the reply a real model writes when max tokens stops it mid-block: the fence never closes
    cut = "".join(original.splitlines(keepends=True)[:46]).replace("return x + 0", "return x + 1")
    cid = win.session.conversation_id
    mid = win.store.add_message(cid, "assistant", f"Here is text.py with the change:\n\n```python\n{cut}")
    win.store.update_message(mid, f"Here is text.py with the change:\n\n```python\n{cut}",
                             stats={"footer": "8 tokens", "finish_reason": "length"})
    win.session.show_chat()
    reply = win.chat_view.widgets()[-1]
    assert "Diff with text.py" in reply.body.toPlainText()  # the diff is still worth seeing

    asked, seen = [], {}
    monkeypatch.setattr(QMessageBox, "question", lambda parent, title, text, *a: asked.append(text) or QMessageBox.Yes)

    def drive():
        dlg = QApplication.activeModalWidget()
        try:
            assert isinstance(dlg, DiffDialog)
            seen["save_over"] = dlg.save_over_btn.isEnabled()
            seen["save_as"] = dlg.save_as_btn.isEnabled()
            dlg.save_over_btn.click()  # a disabled button does nothing; on the old code this wrote the file
            seen["note"] = dlg.cut_off_note.text() if dlg.cut_off_note.isVisible() else ""
        finally:
            seen["done"] = True
            dlg.reject()

    QTimer.singleShot(0, drive)
    click_link(qtbot, reply, "diff:0")
    qtbot.waitUntil(lambda: "done" in seen, timeout=TIMEOUT)
    assert src.read_text() == original and not asked  # never written, never even asked
    assert seen["save_over"] is False and seen["save_as"] is True
    assert "This reply was cut off before its code block ended: saving it would truncate the file" in seen["note"]
    win.close()


def test_a_model_switch_counts_the_waiting_files_again(qtbot, tmp_path, tiny, real_vocab, monkeypatch):
    """A file waits in the input while another model loads: its chip's tokens become the new
    model's count (its tokenizer differs), not the previous model's."""
    win, _ = _with_file(qtbot, tmp_path, tiny, monkeypatch)
    before = win.attach_bar.items[0].tokens
    win.load_models(str(real_vocab["target"]), str(real_vocab[0.7]))
    qtbot.waitUntil(lambda: win.session.model_info is not None
                    and win.session.model_info.target == str(real_vocab["target"]), timeout=TIMEOUT)
    want = len(win.session.worker.engine.tokenize(CODE, add_special=False, parse_special=False))
    assert want != before
    qtbot.waitUntil(lambda: win.attach_bar.items[0].tokens == want, timeout=TIMEOUT)
    assert win.attach_bar.items[0].label.endswith(f"{want:,} tokens")
    win.close()
