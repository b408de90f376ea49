"""The main window: it builds the panels and wires them to the chat session (`ChatSession`),
which owns the conversation, the model and the reply being written. The window shows what
the session says and asks the user where the session needs a choice."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QByteArray, Qt, QTimer
from PySide6.QtWidgets import (QApplication, QLabel, QMainWindow, QMessageBox, QSplitter,
                               QStackedWidget, QVBoxLayout, QWidget)

from engine.models.library import Library

from app.core import help_text
from app.core.help_text import sentence
from .chat_list import ChatList
from app.core.chat_types import LoadRequest
from app.session.chat_session import ChatSession
from .chat_view import ChatView
from .compare import ComparePage
from .composer import Composer
from .drafts import Drafts
from .menus import build_menus
from .shortcuts import install as install_shortcuts
from .model_picker import model_label
from .safe_text import message
from app.core.settings import Settings
from .stats_panel import StatsBar
from app.core.store import Store
from .theme import apply_theme
from .toolbar import ChatToolbar
from .render import origin_legend_html
from .widgets import MessageWidget, Notice, is_dark
from .window_dialogs import WindowDialogs
from .window_tools import WindowTools


class MainWindow(WindowDialogs, WindowTools, QMainWindow):
    SMALL_HEIGHT = 700  # below this the charts would squeeze the chat: they fold away

    def __init__(self, settings: Settings | None = None, store: Store | None = None,
                 library: Library | None = None, worker=None):
        """`worker`: a stand-in for the engine worker (tests of the window's wiring)."""
        super().__init__()
        self.settings = settings if settings is not None else Settings()
        self.store = store if store is not None else Store()
        self.library = library if library is not None else Library()
        self.setWindowTitle("Tandem")
        self.resize(1180, 780)
        self._mtp_limit_said = False
        self.server_panel = None
        self.downloader_args: dict = {}  # where downloads come from (tests: a local hub)

        self._build_ui()
        self.session = ChatSession(self.settings, self.store, worker, self)
        self.chat_view.observe(self.session.model)  # the chat shown is the session's model
        install_shortcuts(self)  # the find bar and Esc
        self.chat_view.tool_decided.connect(self.session.decide_tool)
        self.chat_view.attached_files = self.session.attached_files  # what code blocks are compared with
        self._start_tools()
        self.chat_view.save_code.connect(self._save_code)
        self.chat_view.diff_code.connect(self._diff_code)
        self._wire_session()
        self.restore_geometry()
        self._apply_font_scale()
        try:  # follow the desktop switching between light and dark while running (Qt >= 6.5)
            QApplication.styleHints().colorSchemeChanged.connect(self._system_scheme_changed)
        except AttributeError:
            pass
        convs = self.store.conversations()
        if convs:
            self.open_conversation(convs[0].id)
        else:
            self.new_conversation()
        remote = self.settings["remote"] or {}
        if remote.get("connection"):
            self.load_remote(str(remote["connection"]), str(remote.get("model") or ""))
        elif self.settings["target"]:
            self.load_models(self.settings["target"], self.settings["drafter"])
        else:
            self.picker.refresh(current="", status="")
        for what in (self.store.recovered, self.settings.recovered):
            if what:
                QTimer.singleShot(0, lambda w=what: message(self, QMessageBox.Warning, "Recovered", w))

    # ---- construction ----------------------------------------------------------------
    def _build_ui(self):
        split = QSplitter(Qt.Horizontal, self)
        self.chat_list = ChatList(self.store)
        self.chat_list.new_requested.connect(self.new_conversation)
        self.chat_list.open_requested.connect(self.open_conversation)
        self.chat_list.rename_requested.connect(self.rename_conversation)
        self.chat_list.delete_requested.connect(lambda ids: [self.session.delete_conversation(c) for c in ids])
        self.chat_list.export_requested.connect(lambda kind, cid: self.export(kind, cid))
        self.chat_list.setMinimumWidth(170)  # titles stay readable when the window is narrow
        split.addWidget(self.chat_list)

        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(6, 6, 6, 6)
        self._build_toolbar(rl)
        self._build_pages(rl)
        self._build_bottom(rl)
        split.addWidget(right)
        split.setSizes([240, 940])
        self.setCentralWidget(split)
        build_menus(self)
        self.statusBar().showMessage("Ready")

    def _build_toolbar(self, rl: QVBoxLayout) -> None:
        """The model picker and the chat's switches, the token-origin legend, the MTP banner."""
        self.toolbar = tb = ChatToolbar(self.library, self.settings)
        self.picker, self.mtp_switch, self.draft_spin, self.think_switch = tb.picker, tb.mtp_switch, tb.draft_spin, tb.think_switch
        self.compare_btn = tb.compare_btn
        self.picker.chosen.connect(self.load_models)
        self.picker.manage.connect(self.open_models)
        self.picker.remote_chosen.connect(self.load_remote)
        self.picker.connect_requested.connect(self.open_connections)
        for sig in (self.mtp_switch.toggled, self.draft_spin.valueChanged, self.think_switch.toggled):
            sig.connect(self._chat_options_changed)
        self.compare_btn.clicked.connect(self.compare)
        tb.help_btn.clicked.connect(self.explain_mtp)
        tb.settings_btn.clicked.connect(self.open_settings)
        rl.addWidget(tb)
        self.origin_legend = QLabel(origin_legend_html(is_dark()))
        self.origin_legend.hide()
        rl.addWidget(self.origin_legend)
        # said once per loaded model, where measurements show MTP cannot be faster here
        self.mtp_banner = Notice("mtpBanner")
        rl.addWidget(self.mtp_banner)

    def _build_pages(self, rl: QVBoxLayout) -> None:
        """The chat and the Compare page, one at a time."""
        self.stack = QStackedWidget()
        self.chat_view = ChatView()
        self.chat_view.example_chosen.connect(self._example_chosen)
        self.chat_view.action.connect(self._message_action)
        self.stack.addWidget(self.chat_view)
        self.compare_page = ComparePage()
        self.compare_page.back.connect(lambda: self.stack.setCurrentIndex(0))
        self.stack.addWidget(self.compare_page)
        rl.addWidget(self.stack, 1)

    def _build_bottom(self, rl: QVBoxLayout) -> None:
        """The stats bar, the status bar's meters and the composer."""
        self.stats_bar = StatsBar()
        self.stats_bar.show_charts(bool(self.settings["show_charts"]))
        rl.addWidget(self.stats_bar)
        self.context_label = QLabel("context: –")
        self._counted_by_server = False  # the last count was a server's (it applies the template)
        self.context_label.setToolTip(self.CONTEXT_TIP)
        self.serve_label = QLabel("")
        self.serve_label.setToolTip("The loaded model is served as an OpenAI-compatible API (File → Local API server)")
        self.serve_label.hide()
        self.statusBar().addPermanentWidget(self.serve_label)
        self.statusBar().addPermanentWidget(self.context_label)
        self.composer = c = Composer()
        self.input, self.send_btn, self.attach_btn = c.input, c.send_btn, c.attach_btn
        self.attach_bar, self.edit_banner = c.attach_bar, c.edit_banner
        self.attach_bar.changed.connect(lambda: self._show_context())  # files to send count on the meter
        self.input.send.connect(self.send)
        c.editing_changed.connect(self.chat_view.hide_from)  # the edited message and what follows leave the view
        self.send_btn.clicked.connect(lambda: self.stop() if self.session.busy else self.send())
        c.refused.connect(lambda text: self.statusBar().showMessage(text, 8000))
        c.counter = lambda texts, done: self.session.count_texts(texts, done)
        rl.addWidget(c)

    def _wire_session(self) -> None:
        s = self.session
        s.busy_changed.connect(self._update_controls)
        s.model_changed.connect(self._model_changed)
        s.loading.connect(self._loading)
        s.load_failed.connect(lambda msg: message(self, QMessageBox.Warning, "Could not load the model", sentence(msg)))
        s.status.connect(lambda text, ms: self.statusBar().showMessage(text, ms))
        s.stats_reset.connect(lambda keep: self.stats_bar.reset(keep_chart=keep))
        s.live_stats.connect(lambda stats, t, final: self.stats_bar.update_stats(stats, t, final=final))
        s.context.connect(self._show_context)
        s.overflow.connect(self._overflow)
        s.reply_failed.connect(lambda msg: message(self, QMessageBox.Warning, "Generation failed", sentence(msg)))
        s.mtp_limit.connect(self._show_mtp_limit)
        s.drafting_learned.connect(self._drafting_learned)
        s.conversations_changed.connect(self._conversations_changed)
        s.conversation_opened.connect(self._conversation_opened)
        self.drafts = Drafts(self.composer, self.store)  # each chat its own draft in the input box
        s.conversation_opened.connect(self.drafts.switch)
        s.chat_shown.connect(self.composer.cancel_edit)  # the edited message is no longer on screen
        s.compare_started.connect(self.compare_page.start)
        s.compare_streamed.connect(self.compare_page.stream)
        s.compare_run_done.connect(self.compare_page.show_run)
        s.compare_interrupted.connect(self.compare_page.interrupted)
        s.compare_concluded.connect(self._compare_concluded)

    # ---- models ------------------------------------------------------------------------
    def load_models(self, target: str, drafter: str = "") -> None:
        entry = self.library.find(target)
        # the library knows the projector (in the Hugging Face cache it is not beside the blob);
        # None: the engine thread looks next to the target
        self.session.load_local(target, drafter, entry.projector if entry and entry.projector else None)

    def load_remote(self, connection: str, model: str = "") -> None:
        """Chat through a server connection (its API key comes from the keyring, never settings)."""
        from app.ui.dialogs.connections import find_connection, get_api_key

        conn = find_connection(self.settings, connection)
        if conn is None:
            self.statusBar().showMessage(f"No connection named {connection!r}", 5000)
            self.picker.refresh(current="", status="")
            return
        self.session.load_remote(LoadRequest(server=conn.url, baseline_server=conn.baseline_url,
                                             api_key=get_api_key(conn.name), model=model, connection=conn.name))

    def _loading(self, key: str, words: str) -> None:
        self._mtp_limit_said = False  # a new model: its costs are measured anew
        self.mtp_banner.hide()
        self.picker.refresh(current=key, status=words)

    def _model_changed(self) -> None:
        info = self.session.model_info
        if info is not None:
            if not info.remote:
                if self.library.find(info.target) is None:  # loaded from an older setting: list it
                    self.library.add(Path(info.target).stem, info.target, info.drafter or None, "import")
                self.library.touch(info.target)
            status, tip = model_label(info)
            self.picker.refresh(current=info.picker_key, status=status)
            self.picker.setToolTip(tip)
            if info.placement:  # what was chosen for the user, said once where they look
                self.statusBar().showMessage(info.placement, 15000)
        elif not self.session.loading_model:
            self.picker.refresh(current="", status="")
        self._update_controls()

    def _drafting_learned(self) -> None:
        self.mtp_switch.blockSignals(True)
        self.mtp_switch.setChecked(self.session.model_info.has_mtp)
        self.mtp_switch.blockSignals(False)
        self._update_controls()

    def _show_mtp_limit(self, ceiling: float, costs_ms) -> None:
        """Once per loaded model: where measurements show MTP cannot be faster here."""
        if not self._mtp_limit_said:
            self._mtp_limit_said = True
            self.mtp_banner.say(help_text.mtp_limit(ceiling, costs_ms))

    def _update_controls(self) -> None:
        self.toolbar.show_model(self.session.model_info, self.session.busy)
        self.composer.show_model(self.session.model_info, self.session.busy)
        self._update_tools()

    def restyle(self, scheme=None) -> None:
        """The theme in Settings, or the desktop's light or dark: everything follows, charts too."""
        apply_theme(QApplication.instance(), self.settings["theme"], scheme)
        self.origin_legend.setText(origin_legend_html(is_dark()))
        self.chat_view.refresh()
        self.stats_bar.restyle()

    def _system_scheme_changed(self, scheme):
        if self.settings["theme"] == "system":
            self.restyle(scheme)

    # ---- conversations ---------------------------------------------------------------
    def new_conversation(self) -> None:
        """A new chat (Ctrl+N), or one line why not: never a key press that does nothing."""
        if self.session.busy:
            self.statusBar().showMessage("A reply is being written: stop it (Esc) to start a new chat", 5000)
            return
        before = self.session.conversation_id
        if self.session.new_conversation() == before:
            self.statusBar().showMessage("This chat is new already: type your message", 4000)
        self.input.setFocus()

    def open_conversation(self, cid: int) -> None:
        self.session.open_conversation(cid)

    def _conversation_opened(self, cid: int) -> None:
        conv = self.store.conversation(cid)
        o = conv.options
        self.toolbar.set_chat_options(o.drafting, o.draft_max, o.thinking)
        self._show_last_stats()
        self.stack.setCurrentIndex(0)
        self.setWindowTitle(f"{conv.title} — Tandem")
        self.context_label.setText("context: –")
        self.chat_list.refresh(cid)
        self._update_tools()
        self._update_controls()

    def _chat_options_changed(self, *_):
        self.session.set_chat_options(*self.toolbar.chat_options())
        self._update_controls()

    CONTEXT_TIP = ("How much of the model's context this chat's prompt takes: system prompt, tool declarations, "
                   "files and turns. Past it, the oldest turns have to be left out, tools switched off, or the "
                   "context size raised in Settings.")

    def _show_context(self, used: int | None = None, n_ctx: int | None = None) -> None:
        """The context meter: the chat's prompt as counted, and the files waiting in the input
        box to go with the next message; amber past 80 %. Without numbers: the last count again."""
        c = self.composer
        if used is not None:
            c.context_used, c.n_ctx, self._counted_by_server = max(used, 0), n_ctx, used < 0
        if self._counted_by_server:
            self.context_label.setText(f"context: counted by the server ({c.n_ctx:,} tokens)" if c.n_ctx
                                       else "context: counted by the server")
            self.context_label.setStyleSheet("")
            return
        if not c.n_ctx:
            return  # not counted yet: the meter keeps its dash
        files = c.pending_tokens()
        total = c.context_used + files
        share = total / c.n_ctx
        self.context_label.setText(f"context: {total:,} / {c.n_ctx:,} tokens ({share * 100:.0f} %)")
        self.context_label.setStyleSheet("color: #c77c02" if share > 0.8 else "")
        parts = self.session.context_parts
        lines = (parts.lines() if parts else []) + ([f"files to send: {files:,} tokens"] if files else [])
        self.context_label.setToolTip(self.CONTEXT_TIP + ("\n\n" + "\n".join(lines) if lines else ""))

    def rename_conversation(self, cid, title):
        self.store.rename(cid, title)
        self._conversations_changed()

    def _conversations_changed(self) -> None:
        """The list and the window title follow a chat titled, renamed, added or deleted."""
        cid = self.session.conversation_id
        self.chat_list.refresh(cid)
        conv = self.store.conversation(cid) if cid is not None else None
        self.setWindowTitle(f"{conv.title} — Tandem" if conv else "Tandem")

    def _show_last_stats(self) -> None:
        """The stats bar belongs to the chat on screen: its last reply's numbers, or none."""
        self.stats_bar.reset()
        last = next((w for w in reversed(self.chat_view.widgets()) if w.role == "assistant" and w.stats), None)
        if last is not None and last.stats.get("mode"):
            self.stats_bar.update_stats(last.stats, final=True)

    # ---- messages ----------------------------------------------------------------------
    def _example_chosen(self, prompt: str) -> None:
        self.input.setPlainText(prompt)
        self.send()

    def toggle_origins(self, on: bool) -> None:
        self.origin_legend.setVisible(on)
        self.chat_view.set_origins(on)

    def show_charts(self, on: bool) -> None:
        self.settings["show_charts"] = on
        self._fit_charts()

    def _fit_charts(self) -> None:
        self.stats_bar.show_charts(bool(self.settings["show_charts"]) and self.height() >= self.SMALL_HEIGHT)

    def resizeEvent(self, e):
        super().resizeEvent(e)
        self._fit_charts()

    def _message_action(self, name, w: MessageWidget):
        if self.session.busy:
            return
        if name == "regenerate":
            self.session.regenerate(w.message_id)
        elif name == "edit":
            self.edit_message(w)
        elif name == "continue":
            self.session.continue_reply(w.message_id)
        elif name in ("previous", "next"):
            self.session.switch_version(w.message_id, -1 if name == "previous" else 1)
        elif name == "details" and w.stats:
            QMessageBox.information(self, "Acceptance per draft position", help_text.acceptance_details(w.stats))

    def edit_message(self, w: MessageWidget) -> None:
        if not self.session.busy and w.role == "user":
            self.composer.begin_edit(w)

    def send(self) -> None:
        if ((self.input.toPlainText().strip() or self.attach_bar.items) and not self.session.busy
                and self.session.model_info is not None):
            if self.composer.files_over():  # said before sending, with the numbers; all stays in the input
                self._files_overflow()
                return
            text, attachments, editing = self.composer.take()
            self.session.send(text, attachments, editing.message_id if editing is not None else None)

    def stop(self) -> None:
        self.session.stop()

    def _escape(self) -> None:
        """Esc, wherever the focus is: the find bar when typing in it, else leave editing, else
        stop the reply; with nothing to stop it closes the find bar."""
        if self.find_bar.has_focus():
            self.find_bar.close_bar()
            self.input.setFocus()
        elif self.composer.editing:
            self.composer.cancel_edit()
        elif self.session.busy:
            self.stop()
        else:
            self.find_bar.close_bar()

    def compare(self) -> None:
        text = self.input.toPlainText().strip()
        if not text:
            ws = [m for m in self.session.model.messages if m.role == "user"]
            text = ws[-1].text if ws else ""
        if not text:
            self.statusBar().showMessage("Type a prompt to compare first", 4000)
        elif self.compare_btn.isEnabled() and self.session.start_compare(text):
            self.stack.setCurrentIndex(1)

    def _compare_concluded(self, run) -> None:
        """A measured speed-up outweighs the estimate from step costs: the banner goes."""
        if run.ratio and run.ratio >= 1.05:
            self.mtp_banner.hide()

    # ---- text size, geometry, closing --------------------------------------------------
    def scale_font(self, step: float) -> None:
        """Text size for the whole window: step +/-0.1 of the normal size, 0 back to normal."""
        scale = 1.0 if step == 0 else min(2.5, max(0.6, round(self.settings["font_scale"] + step, 2)))
        self.settings["font_scale"] = scale
        self._apply_font_scale()

    def _apply_font_scale(self) -> None:
        # a style sheet, not setFont: under the app's style sheet a window's font does not reach its children
        size = QApplication.font().pointSizeF() * float(self.settings["font_scale"])
        self.setStyleSheet(f"QWidget {{ font-size: {size:.1f}pt; }}" if self.settings["font_scale"] != 1.0 else "")
        self.chat_view.refresh()

    def restore_geometry(self) -> None:
        data = self.settings["geometry"]
        if data:
            self.restoreGeometry(QByteArray.fromBase64(data.encode("ascii")))

    def closeEvent(self, e):
        self.settings["geometry"] = bytes(self.saveGeometry().toBase64()).decode("ascii")
        self.drafts.close()
        if self.server_panel is not None:
            self.server_panel.stop()  # before the engine goes
        self.session.close()
        if self.tool_runner is not None:
            self.tool_runner.close()  # the MCP servers' processes end with the app
        self.settings.save()
        self.store.close()
        super().closeEvent(e)
