"""Pictures in the window: attach by button, paste a screenshot, drop a file; thumbnails in the
input and in the sent message; attachments kept with the chat; off (with the reason) when the
model has no projector. The real engine with the synthetic gemma4v projector answers."""

from __future__ import annotations

import shutil

from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent, QImage
from PySide6.QtWidgets import QFileDialog

from app.core.settings import Settings
from app.core.store import Store
from app.ui.window import MainWindow
from engine.models.library import Library

from ..support.window import TIMEOUT, make_window, send
from ..support.media import png, tone


def _thumbs(w):
    return [w.media_row.itemAt(i).widget() for i in range(w.media_row.count() - 1)]


def test_attach_paste_drop_send_and_reopen(qtbot, tmp_path, tiny, monkeypatch):
    win = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7], max_tokens=24, draft_max=3)
    assert win.session.model_info.vision and win.session.model_info.audio and win.attach_btn.isEnabled()
    assert "sounds" in win.attach_btn.toolTip()
    photo = tmp_path / "photo.png"
    photo.write_bytes(png(seed=4))

    # the button
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(photo)], ""))
    win.composer.attach_files()
    assert [a.name for a in win.attach_bar.items] == ["photo.png"] and win.attach_bar.isVisible()
    reply = send(qtbot, win, "What is in this picture?")
    assert reply.stats["mode"] == "hybrid" and reply.stats["media_s"] > 0 and not win.attach_bar.items
    assert "s reading media" in win.stats_bar.labels["prefill"][0].text()
    user = win.chat_view.widgets()[-2]
    assert len(_thumbs(user)) == 1 and not _thumbs(user)[0].pixmap().isNull()
    stored = win.store.messages(win.session.conversation_id)[-2].media
    assert stored[0]["name"] == "photo.png" and win.store.attachment_path(stored[0]).is_file()

    # a follow-up reuses the encoded picture
    follow = send(qtbot, win, "And the colours?")
    assert follow.stats["media_s"] == 0 and follow.stats["reused_tokens"] > 80

    # paste a screenshot (image data in the clipboard)
    mime = QMimeData()
    mime.setImageData(QImage(40, 30, QImage.Format_RGB32))
    win.input.insertFromMimeData(mime)
    assert [a.name for a in win.attach_bar.items] == ["pasted image.png"]
    win.attach_bar.clear()

    # drop a file on the input box
    drop = QMimeData()
    drop.setUrls([QUrl.fromLocalFile(str(photo))])
    ev = QDropEvent(QPointF(10, 10), Qt.CopyAction, drop, Qt.LeftButton, Qt.NoModifier)
    win.input.dropEvent(ev)
    assert [a.name for a in win.attach_bar.items] == ["photo.png"]

    # a sound: a ♪ tile; sent with the question, the model hears it
    win.attach_bar.clear()
    sound = tmp_path / "tone.wav"
    sound.write_bytes(tone())
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(sound)], ""))
    win.composer.attach_files()
    assert [(a.name, a.kind) for a in win.attach_bar.items] == [("tone.wav", "audio")]
    heard = send(qtbot, win, "What is this sound?")
    assert heard.stats["media_s"] > 0 and "♪" in _thumbs(win.chat_view.widgets()[-2])[0].text()

    # a file that is not a picture: one line, nothing attached
    win.attach_bar.clear()
    bad = tmp_path / "notes.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00 not a picture")  # binary: neither text nor a picture
    shown = []
    monkeypatch.setattr("app.ui.composer.message", lambda p, icon, title, text, *a: shown.append(text))
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(bad)], ""))
    win.composer.attach_files()
    assert not win.attach_bar.items and len(shown) == 1 and "notes.png: a binary file" in shown[0]
    cid = win.session.conversation_id
    win.close()

    # history reopens with its picture
    s = Settings(tmp_path / "settings.json")
    w2 = MainWindow(s, Store(tmp_path / "chats.sqlite3"), Library(tmp_path / "models.json"))
    qtbot.addWidget(w2)
    qtbot.waitUntil(lambda: w2.session.model_info is not None, timeout=TIMEOUT)
    w2.open_conversation(cid)
    first_user = [w for w in w2.chat_view.widgets() if w.role == "user"][0]
    assert len(_thumbs(first_user)) == 1 and not _thumbs(first_user)[0].pixmap().isNull()
    w2.close()


def test_pictures_are_off_without_a_projector(qtbot, tmp_path, tiny):
    alone = tmp_path / "alone"
    alone.mkdir()
    target = shutil.copy(tiny["target"], alone / "gemma-4-test.gguf")
    drafter = shutil.copy(tiny[0.7], alone / "gemma-4-test-assistant.gguf")
    win = make_window(qtbot, tmp_path, target, drafter)
    # text files still attach; pictures are off, and the button says why
    assert not win.session.model_info.vision and win.attach_btn.isEnabled()
    assert "Pictures are off" in win.attach_btn.toolTip() and "no projector" in win.attach_btn.toolTip()
    mime = QMimeData()
    mime.setImageData(QImage(40, 30, QImage.Format_RGB32))
    win.input.insertFromMimeData(mime)
    assert not win.attach_bar.items and "no projector" in win.statusBar().currentMessage()
    win.close()


def test_a_projector_that_does_not_fit_leaves_the_model_usable(qtbot, tmp_path, tiny):
    from engine.testmodels import write_projector

    folder = tmp_path / "wide"
    folder.mkdir()
    target = shutil.copy(tiny["target"], folder / "gemma-4-test.gguf")
    write_projector(folder / "mmproj-other-size.gguf", 96)  # another model width
    win = make_window(qtbot, tmp_path, target)
    assert win.session.model_info is not None and not win.session.model_info.vision
    assert "another Gemma 4 size" in win.attach_btn.toolTip()
    assert send(qtbot, win, "still chats").text
    win.close()
