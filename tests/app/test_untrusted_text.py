"""Model output, chat titles and prompts are untrusted: showing them loads nothing.

Before: `![x](/some/local.png)` in a reply displayed that file, `![x](/dev/zero)` aborted the
app (std::bad_alloc), and thinking text was rendered as HTML.
"""

from __future__ import annotations

from PySide6.QtCore import QUrl, Qt
from PySide6.QtGui import QImage, QTextDocument

from app.core.store import Store
from app.ui.widgets import MessageWidget


def _png(path, w=300, h=400):
    img = QImage(w, h, QImage.Format_RGB32)
    img.fill(Qt.red)
    assert img.save(str(path))
    return path


def _image_fragments(doc) -> int:
    n, block = 0, doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            n += it.fragment().charFormat().isImageFormat()
            it += 1
        block = block.next()
    return n


def test_markdown_images_are_links_and_nothing_is_read(qtbot, tmp_path):
    png = _png(tmp_path / "secret.png")
    w = MessageWidget("assistant")
    qtbot.addWidget(w)
    w.resize(600, 400)
    w.show()
    w.set_content(f"Look: ![a secret]({png}) and ![zero](/dev/zero) and ![web](https://example.com/x.png)\n\n"
                  f"<img src=\"{png}\">")
    doc = w.body.document()
    doc.setTextWidth(500)
    height = doc.size().height()
    assert height < 150, "the 400 px local image was loaded and laid out"
    assert _image_fragments(doc) == 0
    text = doc.toPlainText()
    assert "[image: a secret]" in text and "[image: zero]" in text and "[image: web]" in text
    # asked directly, the document still refuses to read the file
    res = doc.resource(QTextDocument.ImageResource, QUrl.fromLocalFile(str(png)))
    assert not isinstance(res, QImage) or res.width() <= 1


def test_thinking_is_plain_text(qtbot, tmp_path):
    png = _png(tmp_path / "think.png")
    w = MessageWidget("assistant")
    qtbot.addWidget(w)
    w.set_content("answer", thinking=f'<img src="{png}"><b>bold</b>')
    assert w.think_view.textFormat() == Qt.PlainText
    assert w.think_view.text().startswith("<img")


def test_copy_links_with_bad_data_do_nothing(qtbot):
    w = MessageWidget("assistant")
    qtbot.addWidget(w)
    w.set_content("```python\nprint(1)\n```\n[evil](copy:abc) [far](copy:99) [file](file:///etc/passwd)")
    copied = []
    w.copy_requested.connect(copied.append)
    for url in ("copy:abc", "copy:99", "copy:", "file:///etc/passwd", "copy:0"):
        w.follow_link(QUrl(url))  # what a click on each link does
    assert copied == ["print(1)"]


def test_window_starts_with_a_hostile_chat_as_the_newest(qtbot, tmp_path, tiny):
    from ..support.window import make_window

    png = _png(tmp_path / "local.png")
    store = Store(tmp_path / "chats.sqlite3")
    cid = store.create_conversation('<img src="/dev/zero">')
    store.add_message(cid, "user", f"![u]({png})")
    store.add_message(cid, "assistant", f"![x](/dev/zero) ![y]({png})", thinking='<img src="/dev/zero">')
    store.close()
    w = make_window(qtbot, tmp_path, tiny["target"], tiny[1.0])
    try:
        reply = w.chat_view.widgets()[-1]
        assert "[image: x]" in reply.body.document().toPlainText()
        assert reply.body.document().size().height() < 150
    finally:
        w.close()


def test_code_block_label_starts_its_own_line(qtbot):
    from app.ui.render import render_markdown

    doc = QTextDocument()
    render_markdown(doc, "See [the docs](https://example.com).\n\n```python\nprint(1)\n```\n")
    assert doc.toPlainText().startswith("See the docs.\npython")
