"""The drafter's head in the window: a reply's Details say which head drafted it, and the
Settings choice (Drafter head) is saved, survives a restart and reloads the pair with it."""

from __future__ import annotations

from app.core import help_text
from app.core.settings import Settings
from app.ui.dialogs.settings_dialog import SettingsDialog

from ..support.window import TIMEOUT, make_window, send


def test_the_details_name_the_head_and_the_setting_reloads_with_another(qtbot, tmp_path, clustered):
    w = make_window(qtbot, tmp_path, clustered["target"], clustered["ordered"], max_tokens=16, threads=1)
    try:
        reply = send(qtbot, w, "Write a Python function that reverses a list.")
        details = help_text.acceptance_details(reply.stats)
        assert "The drafter's head: clustered: 32 of 2,048 clusters (4,096 of 262,144 tokens)." in details
        dlg = SettingsDialog(w.settings, w)
        qtbot.addWidget(dlg)
        assert dlg.draft_head.currentText() == "auto"
        dlg.draft_head.setCurrentText("full")
        reload, _ = dlg.apply()
        assert reload  # a head is chosen when the drafter loads
        saved = Settings(w.settings.path)  # as the next start reads it
        assert saved["draft_head"] == "full"
        w.load_models(saved["target"], saved["drafter"])
        qtbot.waitUntil(lambda: w.session.model_info is not None and not w.session.busy, timeout=TIMEOUT)
        w.new_conversation()
        reply = send(qtbot, w, "Write a Python function that reverses a list.")
        assert "The drafter's head: full (262,144 tokens)." in help_text.acceptance_details(reply.stats)
    finally:
        w.close()
