"""The app's Connections flow against a real llama-server running the synthetic Gemma 4 pair
with MTP: add a server, pick its model in the picker, chat with live acceptance, and Compare
against a second server that serves the same model without a drafter."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.ui.dialogs.connections import ConnectionEditor, load_connections, save_connections

from ..support.llamaserver import LlamaServer
from ..support.window import TIMEOUT, compare, make_window, send


def test_chat_and_compare_through_servers(qtbot, tmp_path, tiny, mtp_server, llama_server_bin):
    win = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7])
    # Settings → Connections → Add: check lists the server's model, the key stays out of settings
    ed = ConnectionEditor(None, set(), win)
    qtbot.addWidget(ed)
    ed.name.setText("lab server")
    ed.url.setText(mtp_server.url.replace("http://", "").replace("/v1", ""))  # the user types host:port
    ed.key.setText("k-123")
    qtbot.mouseClick(ed.check_btn, Qt.LeftButton)
    qtbot.waitUntil(lambda: not ed.checking, timeout=TIMEOUT)
    assert ed.conn.engine == "llama-server" and len(ed.conn.models) == 1, ed.status.text()
    ed.save()
    save_connections(win.settings, [ed.conn])
    assert "k-123" not in (tmp_path / "settings.json").read_text()
    assert load_connections(win.settings)[0].url == mtp_server.url

    # the picker lists the server's model beside the local pair; one click connects
    win.picker.refresh()
    i = next(i for i in range(win.picker.count()) if win.picker.itemText(i).endswith("— lab server"))
    win.picker.activated.emit(i)
    qtbot.waitUntil(lambda: win.session.model_info is not None and bool(win.session.model_info.remote), timeout=TIMEOUT)
    assert win.session.model_info.engine == "llama-server"
    assert not win.mtp_switch.isEnabled() and not win.compare_btn.isEnabled()  # no baseline server yet
    assert "baseline server" in win.compare_btn.toolTip()

    reply = send(qtbot, win, "Hello world, this is a test")
    s = reply.stats
    assert reply.text and s["engine"] == "llama-server" and s["mode"] == "mtp" and s["draft_tokens"] > 0
    assert win.stats_bar.labels["accept"][0].text().endswith("%")
    assert "on llama-server" in reply.footer.text() and win.mtp_switch.isChecked()
    assert win.settings["remote"] == {"connection": "lab server", "model": win.session.model_info.target_name}

    # Compare: the baseline runs on a second server with the same model and no drafter
    base = LlamaServer(llama_server_bin, tiny["target"], log=tmp_path / "base.log")
    try:
        conn = load_connections(win.settings)[0]
        conn.baseline_url = base.url
        save_connections(win.settings, [conn])
        win.load_remote("lab server", win.session.model_info.target_name)
        qtbot.waitUntil(lambda: win.session.model_info is not None, timeout=TIMEOUT)
        assert win.session.model_info.has_baseline and win.compare_btn.isEnabled()
        page = compare(qtbot, win, "a b c d e f g")
        assert page.base.result.stats["mode"] == "baseline" and page.mtp.result.stats["mode"] == "mtp"
        assert page.base.result.answer and "tok/s" in page.verdict.text()
        assert base.url in page.base.title.text() and mtp_server.url in page.mtp.title.text()
    finally:
        win.close()
        base.stop()
