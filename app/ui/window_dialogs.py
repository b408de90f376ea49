"""The main window's dialogs: each opened from a menu or a button, its outcome applied to the
window (a model loaded, the theme restyled, a chat exported). A part of `MainWindow` (a mixin:
the window holds the panels and the session), kept in its own module."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QFileDialog, QMessageBox

from engine.generation import AUTO

from app.core import help_text
from app.core.settings import SAMPLING_KEYS
from app.core.store import file_name
from app.session.context_parts import files_overflow_help, overflow_help
from .model_picker import target_stem
from .overflow_box import ask_overflow


class WindowDialogs:
    """Dialogs of MainWindow."""

    def open_models(self) -> None:
        """The Models page: local pairs, download, import, remove; Load switches to one."""
        from engine.models.hardware import this_machine

        from app.ui.dialogs.models_dialog import ModelsDialog

        dlg = ModelsDialog(self.library, this_machine(), self.downloader_args,
                           current=self.settings["target"], parent=self)
        dlg.load_requested.connect(self.load_models)
        dlg.exec()
        self.picker.refresh()

    def import_model(self) -> None:
        from app.ui.dialogs.models_dialog import import_pair

        path, _ = QFileDialog.getOpenFileName(self, "Import a Gemma 4 model (GGUF)", "", "GGUF models (*.gguf)")
        if path and (target := import_pair(self, self.library, path)):
            entry = self.library.find(target)
            self.load_models(entry.target, entry.drafter or "")

    def explain_mtp(self):
        QMessageBox.information(self, "How MTP works", help_text.MTP_EXPLAINED)

    def show_about(self):
        QMessageBox.about(self, "About Tandem", help_text.about())

    def show_welcome(self, downloader_args: dict | None = None) -> bool:
        """The first-run flow: recommend, download (or pick local files), then load and chat."""
        from app.ui.dialogs.welcome import WelcomeDialog

        dlg = WelcomeDialog(self, downloader_args or self.downloader_args, library=self.library)
        if dlg.exec() != WelcomeDialog.Accepted or not dlg.chosen:
            return False
        target, drafter = dlg.chosen  # the draft length stays auto: it is measured here
        self.settings["draft_max"], self.settings["use_mtp"] = AUTO, bool(drafter)
        self.toolbar.set_chat_options(bool(drafter), AUTO, self.think_switch.isChecked())
        self.load_models(target, drafter)
        return True

    def open_server(self) -> None:
        """Serve on localhost: the loaded local model as an OpenAI-compatible API for editors."""
        from app.ui.dialogs.server_panel import ServerPanel

        if self.server_panel is None:
            self.server_panel = ServerPanel(self.session.engine, lambda: target_stem(self.session.model_info),
                                            self.settings, self)
            self.server_panel.changed.connect(self._serving)
        self.server_panel.show()
        self.server_panel.raise_()

    def _serving(self, url: str) -> None:
        self.serve_label.setText(f"serving {url}" if url else "")
        self.serve_label.setVisible(bool(url))

    def open_connections(self) -> None:
        from app.ui.dialogs.connections import ConnectionsDialog

        ConnectionsDialog(self.settings, self).exec()
        self.picker.refresh()

    def open_settings(self, focus: str = ""):
        """Settings; `focus`: the setting whose field has the keyboard (the context size, where a
        chat did not fit)."""
        from app.ui.dialogs.settings_dialog import SettingsDialog

        dlg = SettingsDialog(self.settings, self)
        if focus:
            QTimer.singleShot(0, lambda: dlg.focus_field(focus))  # once the dialog is shown
        if dlg.exec() != SettingsDialog.Accepted:
            return
        reload, theme = dlg.apply()
        if theme:
            self.restyle()
        if reload and self.settings["target"]:
            self.load_models(self.settings["target"], self.settings["drafter"])

    def export(self, kind: str, cid: int | None = None):
        cid = cid or self.session.conversation_id
        if cid is None:
            return
        title = self.store.conversation(cid).title
        path, _ = QFileDialog.getSaveFileName(self, "Export chat", f"{file_name(title)}.{kind}",
                                              "Markdown (*.md)" if kind == "md" else "JSON (*.json)")
        if path:
            info = self.session.model_info
            models = {"target": info.target_name if info else "", "drafter": info.drafter_name if info else ""}
            keys = SAMPLING_KEYS + ("max_tokens", "n_ctx", "system_prompt")
            data = (self.store.export_markdown(cid) if kind == "md" else
                    self.store.export_json(cid, models=models, app_settings={k: self.settings[k] for k in keys}))
            Path(path).write_text(data, "utf-8")

    def edit_system_prompt(self) -> None:
        from app.ui.dialogs.system_prompt import SystemPromptDialog

        if self.session.conversation_id is None:
            return
        dlg = SystemPromptDialog(self.session.chat_options().system_prompt, self)
        if dlg.exec() == SystemPromptDialog.Accepted:
            self.session.set_system_prompt(dlg.value())

    def open_tools(self) -> None:
        """Settings → Tools: the MCP servers, each with its switch and the tools it offers."""
        from app.ui.dialogs.tools_dialog import open_tools_dialog

        open_tools_dialog(self.settings, self._tool_runner(), self)
        self._update_tools()

    def _save_code(self, code: str, suggested_name: str) -> None:
        from app.ui.dialogs.diff_dialog import save_code_as

        save_code_as(self, code, suggested_name)

    def _diff_code(self, code: str, attached, cut_off: bool = False) -> None:
        """A reply's new version of an attached file, side by side; saving over asks first, and
        is refused for a block the reply was cut off inside (`cut_off`)."""
        from app.ui.dialogs.diff_dialog import DiffDialog

        DiffDialog(code, attached, self, cut_off=cut_off).exec()

    def _files_overflow(self) -> None:
        """Attached files that do not fit beside the chat: what takes the room, and what helps
        (tools off; a bigger context); nothing is sent or removed."""
        s, c = self.session, self.composer
        help = files_overflow_help(s.context_parts, c.context_used, c.files_over(), c.n_ctx,
                                   tools_on=bool(s.tool_declarations()))
        choice = ask_overflow(self, help)
        if choice == "tools_off_only":
            self.composer.tools_btn.setChecked(False)  # the meter counts the chat again without them
        elif choice == "settings":
            self.open_settings(focus="n_ctx")

    def _overflow(self, msg: str, already_dropped: bool) -> None:
        """Say what takes the room of a chat that does not fit and offer what helps; a message
        left unanswered goes back to the input box (with its attachments), so nothing is lost
        and no turn dangles."""
        s = self.session
        help = overflow_help(msg, s.context_parts, s.model_info.n_ctx if s.model_info else 0,
                             older_turns=not already_dropped and s.has_older_turns(),
                             tools_on=bool(s.tool_declarations()))
        choice = ask_overflow(self, help)
        if choice == "drop":
            s.retry_dropping_oldest()
            return
        if choice == "tools_off":
            self.composer.tools_btn.setChecked(False)  # the switch says so, and the chat is answered without them
            s.answer_again()
            return
        w = s.withdraw_unanswered()
        if w is not None:
            self.composer.restore(w)
        if choice == "settings":
            self.open_settings(focus="n_ctx")
