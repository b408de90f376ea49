"""The main window: conversations, chat, live speed, MTP switch, compare mode."""

from __future__ import annotations

import html
import time
from pathlib import Path

from PySide6.QtCore import QByteArray, QEventLoop, QThread, QTimer, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QApplication, QFileDialog, QLabel, QMainWindow, QMessageBox, QSplitter,
                               QStackedWidget, QVBoxLayout, QWidget)

from engine.models.library import Library

from . import help_text
from .chat_list import ChatList
from .attachments import Attachment
from .chat_view import ChatView
from .composer import Composer
from .compare import ComparePage
from .safe_text import message
from .settings import Settings
from .store import Store, chat_title, file_name
from .stats_panel import StatsBar
from .toolbar import ChatToolbar
from .widgets import MessageWidget
from .worker import EngineWorker

SAVE_INTERVAL_S = 1.0  # a streaming reply is written to disk at least this often


class MainWindow(QMainWindow):
    # GUI -> engine thread, queued
    _load = Signal(dict)
    _generate = Signal(int, list, dict)
    _count = Signal(int, list, bool)
    _shutdown = Signal()

    def __init__(self, settings: Settings | None = None, store: Store | None = None,
                 library: Library | None = None):
        super().__init__()
        self.settings = settings if settings is not None else Settings()
        self.store = store if store is not None else Store()
        self.library = library if library is not None else Library()
        self.setWindowTitle("Tandem")
        self.resize(1180, 780)
        self._base_font_size = self.font().pointSizeF()
        self.model_info: dict | None = None
        self.conversation_id: int | None = None
        self._rid = 0
        self._active: dict | None = None  # the request being streamed
        self._closing = False
        self._mtp_limit_said = False
        self._editing: MessageWidget | None = None  # the message whose new version is in the input box
        self.downloader_args: dict = {}  # where downloads come from (tests: a local hub)

        self._build_ui()
        self.restore_geometry()
        if self.settings.get("font_scale", 1.0) != 1.0:
            self._apply_font_scale()
        self._start_worker()
        self._refresh_conversations()
        convs = self.store.conversations()
        if convs:
            self.open_conversation(convs[0].id)
        else:
            self.new_conversation()
        remote = self.settings.get("remote") or {}
        if isinstance(remote, dict) and remote.get("connection"):
            self.load_remote(str(remote["connection"]), str(remote.get("model") or ""))
        elif self.settings.get("target"):
            self.load_models(self.settings["target"], self.settings.get("drafter") or "")
        else:
            self._set_model_label(None)
        if self.store.recovered:
            QTimer.singleShot(0, lambda: message(self, QMessageBox.Warning, "Chat history recovered",
                                                 self.store.recovered))

    # ---- construction ----------------------------------------------------------------
    def _build_ui(self):
        split = QSplitter(Qt.Horizontal, self)
        self.chat_list = ChatList(self.store)
        self.chat_list.new_requested.connect(self.new_conversation)
        self.chat_list.open_requested.connect(self.open_conversation)
        self.chat_list.rename_requested.connect(self.rename_conversation)
        self.chat_list.delete_requested.connect(lambda ids: [self.delete_conversation(c) for c in ids])
        self.chat_list.export_requested.connect(lambda kind, cid: self.export(kind, cid))
        self.chat_list.setMinimumWidth(170)  # titles stay readable when the window is narrow
        left = self.chat_list
        split.addWidget(left)

        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(6, 6, 6, 6)
        self.toolbar = ChatToolbar(self.library, self.settings)
        tb = self.toolbar
        self.picker, self.mtp_switch, self.draft_spin, self.think_switch = tb.picker, tb.mtp_switch, tb.draft_spin, tb.think_switch
        self.compare_btn, self.help_btn, self.settings_btn = tb.compare_btn, tb.help_btn, tb.settings_btn
        self.picker.chosen.connect(self.load_models)
        self.picker.manage.connect(self.open_models)
        self.picker.remote_chosen.connect(self.load_remote)
        self.picker.connect_requested.connect(self.open_connections)
        self.mtp_switch.toggled.connect(self._chat_settings_changed)
        self.draft_spin.valueChanged.connect(self._chat_settings_changed)
        self.think_switch.toggled.connect(self._chat_settings_changed)
        self.compare_btn.clicked.connect(self.compare)
        self.help_btn.clicked.connect(self.explain_mtp)
        self.settings_btn.clicked.connect(self.open_settings)
        rl.addWidget(self.toolbar)
        self.origin_switch = QAction("Token origins", self, checkable=True)
        self.origin_switch.setToolTip("Tint each token: green = drafted and accepted, orange = produced by the model itself")
        self.origin_switch.toggled.connect(self._toggle_origins)
        self.origin_legend = QLabel("Token origins: <span style='background:#b7ebc0; color:#1a1a1a'>&nbsp;drafted, "
                                    "accepted&nbsp;</span> <span style='background:#ffe2b8; color:#1a1a1a'>&nbsp;model's "
                                    "own&nbsp;</span>")
        self.origin_legend.hide()
        rl.addWidget(self.origin_legend)
        # said once per loaded model, where measurements show MTP cannot be faster here
        self.mtp_banner = QLabel()
        self.mtp_banner.setObjectName("mtpBanner")
        self.mtp_banner.setWordWrap(True)
        self.mtp_banner.setTextFormat(Qt.PlainText)
        self.mtp_banner.hide()
        rl.addWidget(self.mtp_banner)

        self.stack = QStackedWidget()
        self.chat_view = ChatView()
        self.chat_view.example_chosen.connect(self._example_chosen)
        self.chat_view.action.connect(self._message_action)
        self.chat_view.attachment_path = self.store.attachment_path
        self.stack.addWidget(self.chat_view)
        self.compare_page = ComparePage()
        self.compare_page.back.connect(lambda: self.stack.setCurrentIndex(0))
        self.stack.addWidget(self.compare_page)
        rl.addWidget(self.stack, 1)

        self.stats_bar = StatsBar()
        self.stats_bar.show_charts(bool(self.settings.get("show_charts", True)))
        rl.addWidget(self.stats_bar)
        self.context_label = QLabel("context: –")
        self.serve_label = QLabel("")
        self.serve_label.setToolTip("The loaded model is served as an OpenAI-compatible API (File → Local API server)")
        self.serve_label.hide()
        self.statusBar().addPermanentWidget(self.serve_label)
        self.statusBar().addPermanentWidget(self.context_label)
        self.composer = Composer(self._media_refusal)
        c = self.composer
        self.input, self.send_btn, self.attach_btn = c.input, c.send_btn, c.attach_btn
        self.attach_bar, self.edit_banner = c.attach_bar, c.edit_banner
        self.input.send.connect(self.send)
        self.input.stop.connect(lambda: self.cancel_edit() if self._editing else self.stop())
        self.send_btn.clicked.connect(self._send_or_stop)
        c.refused.connect(lambda text: self.statusBar().showMessage(text, 8000))
        rl.addWidget(c)
        split.addWidget(right)
        split.setSizes([240, 940])
        self.setCentralWidget(split)

        menu = self.menuBar().addMenu("&File")
        for text, slot, key in (("New chat", self.new_conversation, QKeySequence.New),
                                ("Models…", self.open_models, QKeySequence.Open),
                                ("Import GGUF…", self.import_model, None),
                                ("Connections…", self.open_connections, None),
                                ("Local API server…", self.open_server, None),
                                ("Export chat as Markdown…", lambda: self.export("md"), None),
                                ("Export chat as JSON…", lambda: self.export("json"), None),
                                ("Settings…", self.open_settings, QKeySequence.Preferences),
                                ("Quit", self.close, QKeySequence.Quit)):
            act = QAction(text, self)
            if key is not None:
                act.setShortcut(key)
            act.triggered.connect(slot)
            menu.addAction(act)
        chat_menu = self.menuBar().addMenu("&Chat")
        sys_act = QAction("System prompt for this chat…", self)
        sys_act.triggered.connect(self.edit_system_prompt)
        chat_menu.addAction(sys_act)
        view = self.menuBar().addMenu("&View")
        for text, key, step in (("Larger text", QKeySequence.ZoomIn, 0.1), ("Smaller text", QKeySequence.ZoomOut, -0.1),
                                ("Normal text size", QKeySequence("Ctrl+0"), 0.0)):
            act = QAction(text, self)
            act.setShortcut(key)
            act.triggered.connect(lambda _=False, d=step: self.scale_font(d))
            view.addAction(act)
        view.addSeparator()
        view.addAction(self.origin_switch)
        self.charts_act = QAction("Speed charts", self, checkable=True)
        self.charts_act.setChecked(bool(self.settings.get("show_charts", True)))
        self.charts_act.toggled.connect(self._show_charts)
        view.addAction(self.charts_act)
        help_menu = self.menuBar().addMenu("&Help")
        how = QAction("How MTP works", self)
        how.triggered.connect(self.explain_mtp)
        help_menu.addAction(how)
        about = QAction("About Tandem", self)
        about.triggered.connect(self.show_about)
        help_menu.addAction(about)
        self.statusBar().showMessage("Ready")

    SMALL_HEIGHT = 700  # below this the charts would squeeze the chat: they fold away

    def _show_charts(self, on: bool) -> None:
        self.settings["show_charts"] = on
        self._fit_charts()

    def _fit_charts(self) -> None:
        self.stats_bar.show_charts(bool(self.settings.get("show_charts", True)) and self.height() >= self.SMALL_HEIGHT)

    def resizeEvent(self, e):
        super().resizeEvent(e)
        self._fit_charts()

    def _start_worker(self):
        self.thread = QThread(self)
        self.thread.setObjectName("tandem-engine")
        self.worker = EngineWorker()
        self.worker.moveToThread(self.thread)
        self._load.connect(self.worker.load)
        self._generate.connect(self.worker.generate)
        self._count.connect(self.worker.count_tokens)
        self.worker.counted.connect(self._on_counted)
        self._shutdown.connect(self.worker.shutdown)
        self.worker.loaded.connect(self._on_loaded)
        self.worker.load_failed.connect(self._on_load_failed)
        self.worker.load_progress.connect(self._on_load_progress)
        self.worker.stream.connect(self._on_stream)
        self.worker.finished.connect(self._on_finished)
        self.worker.failed.connect(self._on_failed)
        self.thread.start()

    # ---- models ------------------------------------------------------------------------
    def open_models(self) -> None:
        """The Models page: local pairs, download, import, remove; Load switches to one."""
        from engine.models.hardware import this_machine

        from .models_dialog import ModelsDialog

        dlg = ModelsDialog(self.library, this_machine(), self.downloader_args,
                           current=self.settings.get("target") or "", parent=self)
        dlg.load_requested.connect(self.load_models)
        dlg.exec()
        self.picker.refresh()

    def import_model(self) -> None:
        from .models_dialog import import_pair

        path, _ = QFileDialog.getOpenFileName(self, "Import a Gemma 4 model (GGUF)", "", "GGUF models (*.gguf)")
        if path and (target := import_pair(self, self.library, path)):
            entry = self.library.find(target)
            self.load_models(entry.target, entry.drafter or "")

    def about_text(self) -> str:
        return help_text.about()

    def explain_mtp(self):
        QMessageBox.information(self, "How MTP works", help_text.MTP_EXPLAINED)

    def show_about(self):
        QMessageBox.about(self, "About Tandem", self.about_text())

    def show_welcome(self, downloader_args: dict | None = None) -> bool:
        """The first-run flow: recommend, download (or pick local files), then load and chat."""
        from .welcome import WelcomeDialog

        dlg = WelcomeDialog(self, downloader_args or self.downloader_args, library=self.library)
        if dlg.exec() != WelcomeDialog.Accepted or not dlg.chosen:
            return False
        target, drafter, _guidance = dlg.chosen  # the catalog's k is only guidance: auto by default
        draft_max = 0  # auto
        self.settings["draft_max"] = draft_max
        self.settings["use_mtp"] = bool(drafter)
        self.draft_spin.setValue(draft_max)
        self.mtp_switch.setChecked(bool(drafter))
        self.load_models(target, drafter)
        return True

    def load_models(self, target: str, drafter: str = ""):
        self._begin_load(target, "loading…")
        spec = {k: self.settings[k] for k in ("n_ctx", "threads", "target_gpu_layers", "drafter_gpu_layers")}
        entry = self.library.find(target)
        # the library knows the projector (in the Hugging Face cache it is not beside the blob);
        # None: the engine thread looks next to the target
        spec.update(target=target, drafter=drafter, mmproj=entry.projector if entry and entry.projector else None)
        self._load.emit(spec)

    def load_remote(self, connection: str, model: str = "") -> None:
        """Chat through a server connection (its API key comes from the keyring, never settings)."""
        from .connections import find_connection, get_api_key

        conn = find_connection(self.settings, connection)
        if conn is None:
            self.statusBar().showMessage(f"No connection named {connection!r}", 5000)
            self._set_model_label(None)
            return
        self._begin_load(f"remote:{conn.name}:{model}", "connecting…")
        self._load.emit({"server": conn.url, "baseline_server": conn.baseline_url, "api_key": get_api_key(conn.name),
                         "model": model, "connection": conn.name})

    def _begin_load(self, current: str, status: str) -> None:
        if self._active:
            self.stop()
        self.model_info = None
        self._mtp_limit_said = False  # a new model: its costs are measured anew
        self.mtp_banner.hide()
        self._update_controls()
        self.picker.refresh(current=current, status=status)
        self.statusBar().showMessage("Connecting…" if status == "connecting…" else "Loading model…")

    def open_server(self) -> None:
        """Serve on localhost: the loaded local model as an OpenAI-compatible API for editors."""
        from .server_panel import ServerPanel

        if getattr(self, "server_panel", None) is None:
            self.server_panel = ServerPanel(
                lambda: self.worker.engine if self.model_info and not self.model_info.get("remote") else None,
                lambda: Path(self.model_info["target_name"]).stem if self.model_info else "model",
                self.settings, self)
            self.server_panel.changed.connect(self._serving)
        self.server_panel.show()
        self.server_panel.raise_()

    def _serving(self, url: str) -> None:
        self.serve_label.setText(f"serving {url}" if url else "")
        self.serve_label.setVisible(bool(url))

    def open_connections(self) -> None:
        from .connections import ConnectionsDialog

        ConnectionsDialog(self.settings, self).exec()
        self.picker.refresh()

    def _on_load_progress(self, label, frac):
        self.statusBar().showMessage(f"Loading {label}… {frac * 100:.0f} %")

    def _on_loaded(self, info):
        self.model_info = info
        if info.get("remote"):
            self.settings["remote"] = {"connection": info["remote"]["connection"], "model": info["remote"]["model"]}
        else:
            self.settings["target"], self.settings["drafter"] = info["target"], info["drafter"]
            self.settings["remote"] = None
            if self.library.find(info["target"]) is None:  # loaded from an older setting: list it
                self.library.add(Path(info["target"]).stem, info["target"], info["drafter"] or None, "import")
            self.library.touch(info["target"])
        self.settings.save()
        self._set_model_label(info)
        where = f" on {info['engine']} at {info['remote']['server']}" if info.get("remote") else ""
        ctx = f"context {info['n_ctx']} tokens" if info["n_ctx"] else "context set by the server"
        self.statusBar().showMessage(f"Loaded {info['target_name']}{where} ({ctx})", 5000)
        self._update_controls()
        self._count_context()

    def _on_load_failed(self, msg):
        self._set_model_label(None)
        self.statusBar().showMessage("Loading failed", 5000)
        self._update_controls()
        if not self._closing:
            message(self, QMessageBox.Warning, "Could not load the model", msg)

    def _set_model_label(self, info):
        """The picker shows the loaded pair (or that none is)."""
        if not info:
            self.picker.refresh(current="", status="")
            return
        if info.get("remote"):
            r = info["remote"]
            self.picker.refresh(current=f"remote:{r['connection']}:{r['model']}", status=info["engine"])
            self.picker.setToolTip(f"{r['model']} on {info['engine']} at {r['server']}. Switch with one click")
            return
        self.picker.refresh(current=info["target"], status="" if info["drafter_name"] else "no drafter")
        d = f" + {info['drafter_name']}" if info["drafter_name"] else " (no MTP drafter)"
        self.picker.setToolTip(f"{info['target_name']}{d}. Switch with one click; Models… to add or remove")

    def _update_controls(self):
        loaded = self.model_info is not None
        busy = self._active is not None
        has_mtp = bool(loaded and self.model_info["has_mtp"])
        remote = bool(loaded and self.model_info.get("remote"))
        fixed = remote and not self.model_info.get("can_switch_mtp")  # the server decides, not each request
        self.mtp_switch.setEnabled(has_mtp and not fixed)
        self.draft_spin.setEnabled(has_mtp and not fixed and self.mtp_switch.isChecked())
        if fixed:
            self.mtp_switch.setToolTip(f"{self.model_info['engine']} decides about drafting when it starts, not per "
                                       "request" + (f": {self.model_info['mtp_reason']}" if self.model_info["mtp_reason"]
                                                    else ": it drafts"))
        elif loaded and not has_mtp:
            self.mtp_switch.setToolTip(f"MTP unavailable: {self.model_info['mtp_reason']}")
        else:
            self.mtp_switch.setToolTip("MTP: a small drafter guesses the next few words and the model checks them "
                                       "all in one pass. Same answer, often faster. Help → How MTP works")
        can_compare = bool(loaded and (self.model_info.get("has_baseline") if remote else has_mtp))
        self.compare_btn.setEnabled(can_compare and not busy)
        self.compare_btn.setToolTip(self.model_info.get("baseline_note") if remote and not can_compare else
                                    "Send the prompt in the input box twice: baseline, then MTP, and compare"
                                    + (" (the baseline on the connection's baseline server)" if remote else ""))
        self.picker.setEnabled(not busy)
        media_ok = bool(loaded and (self.model_info.get("vision") or self.model_info.get("audio")))
        self.attach_btn.setEnabled(media_ok and not busy)
        self.attach_btn.setToolTip(
            ("Attach pictures" + (" or sounds" if self.model_info.get("audio") else "") +
             " (also: paste a screenshot, or drop files on the input)") if media_ok else
            f"Attaching is off: {self._media_unavailable('image')}")
        self.send_btn.setText("Stop" if busy else "Send")
        self.send_btn.setEnabled(busy or loaded)

    def open_settings(self):
        from .gui import apply_theme
        from .settings_dialog import SettingsDialog

        dlg = SettingsDialog(self.settings, self)
        if dlg.exec() != SettingsDialog.Accepted:
            return
        reload, theme = dlg.apply()
        if theme:
            apply_theme(QApplication.instance(), self.settings["theme"])
            self.chat_view.refresh()
            self.stats_bar.restyle()
        if reload and self.settings["target"]:
            self.load_models(self.settings["target"], self.settings["drafter"])

    # ---- conversations ---------------------------------------------------------------
    def _refresh_conversations(self, *_):
        self.chat_list.refresh(self.conversation_id)

    def new_conversation(self):
        if self._active:
            return
        cid = self.store.create_conversation(
            "New chat", {"use_mtp": self.settings["use_mtp"], "draft_max": self.settings["draft_max"],
                         "thinking": False})
        self.open_conversation(cid)
        self._refresh_conversations()

    def open_conversation(self, cid: int):
        if self._active or cid == self.conversation_id and self._message_widgets():
            return
        self.conversation_id = cid
        conv = self.store.conversation(cid)
        s = conv.settings
        for w, v in ((self.mtp_switch, s.get("use_mtp", True)), (self.think_switch, s.get("thinking", False))):
            w.blockSignals(True)
            w.setChecked(bool(v))
            w.blockSignals(False)
        self.draft_spin.blockSignals(True)
        self.draft_spin.setValue(int(s.get("draft_max", 0)))
        self.draft_spin.blockSignals(False)
        self._show_chat()
        self._show_last_stats()
        self.stack.setCurrentIndex(0)
        self.setWindowTitle(f"{conv.title} — Tandem")
        self._update_controls()
        self._count_context()

    def _count_context(self) -> None:
        """Ask the engine thread how many tokens this chat's history takes."""
        self.context_label.setText("context: –")
        if self.model_info is not None and self.conversation_id is not None:
            self._count.emit(self.conversation_id, self._history(), self.think_switch.isChecked())

    def _on_counted(self, cid: int, used: int, n_ctx: int) -> None:
        if cid != self.conversation_id:
            return
        if used < 0:  # a server: it applies the template and counts
            self.context_label.setText(f"context: counted by the server ({n_ctx:,} tokens)" if n_ctx
                                       else "context: counted by the server")
            self.context_label.setStyleSheet("")
            return
        self._show_context(used, n_ctx)

    def _show_context(self, used: int, n_ctx: int) -> None:
        """The context meter: tokens in use of the context size, amber past 80 %."""
        share = used / n_ctx if n_ctx else 0.0
        self.context_label.setText(f"context: {used:,} / {n_ctx:,} tokens ({share * 100:.0f} %)")
        self.context_label.setStyleSheet("color: #c77c02" if share > 0.8 else "")
        self.context_label.setToolTip("How much of the model's context this chat uses. Past it, the oldest "
                                      "turns have to be left out (or the context size raised in Settings).")

    def _chat_settings_changed(self, *_):
        if self.conversation_id is None:
            return
        s = {**self.store.conversation(self.conversation_id).settings, "use_mtp": self.mtp_switch.isChecked(),
             "draft_max": self.draft_spin.value(), "thinking": self.think_switch.isChecked()}
        self.store.set_conversation_settings(self.conversation_id, s)
        self._update_controls()

    def rename_conversation(self, cid, title):
        self.store.rename(cid, title)
        self._refresh_conversations()
        if cid == self.conversation_id:
            self.setWindowTitle(f"{title} — Tandem")

    def delete_conversation(self, cid):
        if self._active and cid == self.conversation_id:
            return
        self.store.delete_conversation(cid)
        if cid == self.conversation_id:
            self.conversation_id = None
            rest = self.store.conversations()
            if rest:
                self.open_conversation(rest[0].id)
            else:
                self.new_conversation()
        self._refresh_conversations()

    def export(self, kind: str, cid: int | None = None):
        cid = cid or self.conversation_id
        if cid is None:
            return
        title = self.store.conversation(cid).title
        path, _ = QFileDialog.getSaveFileName(self, "Export chat", f"{file_name(title)}.{kind}",
                                              "Markdown (*.md)" if kind == "md" else "JSON (*.json)")
        if path:
            info = self.model_info or {}
            models = {"target": info.get("target_name", ""), "drafter": info.get("drafter_name", "")}
            keys = ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "max_tokens", "n_ctx", "system_prompt")
            data = (self.store.export_markdown(cid) if kind == "md" else
                    self.store.export_json(cid, models=models, app_settings={k: self.settings[k] for k in keys}))
            Path(path).write_text(data, "utf-8")

    # ---- message widgets ---------------------------------------------------------------
    @property
    def empty_state(self):
        return self.chat_view.empty_state

    def _message_widgets(self) -> list[MessageWidget]:
        return self.chat_view.widgets()

    def _show_chat(self) -> None:
        """Show the chat's current path (after opening it, or a version switch)."""
        self.cancel_edit()
        self.chat_view.show_messages(self.store.messages(self.conversation_id))
        self._scroll_to_end()

    def _show_last_stats(self) -> None:
        """The stats bar belongs to the chat on screen: its last reply's numbers, or none."""
        self.stats_bar.reset()
        last = next((w for w in reversed(self._message_widgets()) if w.role == "assistant" and w.stats), None)
        if last is not None and last.stats.get("mode"):
            self.stats_bar.update_stats(last.stats, final=True)

    def _mark_last(self):
        self.chat_view.mark_last()

    def _example_chosen(self, prompt: str) -> None:
        self.input.setPlainText(prompt)
        self.send()

    def _scroll_to_end(self):
        self.chat_view.scroll_to_end()

    def _toggle_origins(self, on):
        self.origin_legend.setVisible(on)
        self.chat_view.set_origins(on)

    def _message_action(self, name, w: MessageWidget):
        if self._active:
            return
        if name == "regenerate":
            self.regenerate(w)
        elif name == "edit":
            self.edit_message(w)
        elif name == "continue":
            self.continue_reply(w)
        elif name in ("previous", "next"):
            self.store.show_version(self.conversation_id, w.message_id, -1 if name == "previous" else 1)
            self._show_chat()
            self._count_context()
        elif name == "details" and w.stats:
            pp = w.stats.get("per_position_acceptance") or []
            rows = "".join(f"<tr><td>draft {i + 1}</td><td align=right>{v * 100:.0f} %</td></tr>" for i, v in enumerate(pp))
            s = w.stats
            QMessageBox.information(self, "Acceptance per draft position", (
                f"<p>{html.escape(str(s.get('footer', '')))}</p><table cellpadding=3>{rows}</table>"
                f"<p>{s.get('accepted_tokens', 0)} of {s.get('draft_tokens', 0)} drafted tokens accepted "
                f"in {s.get('steps', 0)} verify steps."
                + (f" Draft length auto: {s.get('mean_draft_length') or 0:.2f} tokens per step on average, "
                   f"{s.get('undrafted_steps', 0)} steps without drafting (drafts were not paying off there)."
                   if s.get("draft_max") == "auto" else "") + "</p>"))

    # ---- sending -----------------------------------------------------------------------
    def _send_or_stop(self):
        self.stop() if self._active else self.send()

    def _with_system(self, msgs: list[dict]) -> list[dict]:
        """The chat's own system prompt if it has one, else the default from Settings."""
        conv = self.store.conversation(self.conversation_id) if self.conversation_id is not None else None
        own = (conv.settings.get("system_prompt") or "").strip() if conv else ""
        sp = own or self.settings.get("system_prompt", "").strip()
        return ([{"role": "system", "content": sp}] if sp else []) + msgs

    def edit_system_prompt(self) -> None:
        from .system_prompt import SystemPromptDialog

        if self.conversation_id is None:
            return
        current = self.store.conversation(self.conversation_id).settings.get("system_prompt", "")
        dlg = SystemPromptDialog(current, self)
        if dlg.exec() == SystemPromptDialog.Accepted:
            self.set_chat_system_prompt(dlg.value())

    def set_chat_system_prompt(self, text: str) -> None:
        conv = self.store.conversation(self.conversation_id)
        self.store.set_conversation_settings(self.conversation_id, {**conv.settings, "system_prompt": text})
        self._count_context()

    def _history(self, upto: int | None = None) -> list[dict]:
        """The messages sent to the model: the chat's path (to its leaf, or to message `upto`);
        attachments go as files, decoded in the engine thread."""
        out = []
        for m in self.store.messages(self.conversation_id, upto):
            if m.role not in ("user", "assistant"):
                continue
            d = m.as_chat()
            files = [{"path": str(p), "name": str(i.get("name", ""))} for i in m.media
                     if (p := self.store.attachment_path(i)) is not None]
            if files:
                d["attachments"] = files
            out.append(d)
        return self._with_system(out)

    def _gen_config(self, **over) -> dict:
        keys = ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "max_tokens")
        cfg = {k: self.settings[k] for k in keys}
        cfg.update(use_mtp=self.mtp_switch.isChecked() and self.mtp_switch.isEnabled(),
                   draft_max=self.draft_spin.value() or "auto", thinking=self.think_switch.isChecked())
        cfg.update(over)
        return cfg

    def send(self):
        text = self.input.toPlainText().strip()
        if not (text or self.attach_bar.items) or self._active or self.model_info is None:
            return
        self.input.clear()
        cid = self.conversation_id
        items = self.attach_bar.take()
        media = [self.store.save_attachment(a.data, a.name, a.kind) for a in items]
        if self.store.conversation(cid).title == "New chat":
            self.store.rename(cid, chat_title(text) if text else (items[0].name if items else "New chat"))
            self._refresh_conversations()
        if self._editing is not None:  # a new version beside the edited message
            self.store.add_message(cid, "user", text, parent=self.store.parent_of(self._editing.message_id),
                                   media=media)
            self._show_chat()
        else:
            mid = self.store.add_message(cid, "user", text, media=media)
            w = self.chat_view.add("user", mid)
            if media:
                w.set_media([(self.store.attachment_path(m), m["name"], m["kind"]) for m in media])
            w.set_content(text)
        self._start_reply()

    # ---- attachments ------------------------------------------------------------------
    def attach_files(self) -> None:
        self.composer.attach_files()

    def _media_refusal(self, kind: str) -> str | None:
        """None when the loaded model reads this kind of attachment, else why not."""
        info = self.model_info or {}
        return None if info.get("vision" if kind == "image" else "audio") else self._media_unavailable(kind)

    def _media_unavailable(self, kind: str) -> str:
        info = self.model_info or {}
        if not info:
            return "no model is loaded"
        if info.get("remote"):
            return "pictures and sounds are not sent to servers yet"
        if kind == "audio" and info.get("vision"):
            return "this model reads no audio (Gemma 4 E2B and E4B do)"
        return info.get("media_note") or "this model has no projector (mmproj) for pictures"

    def _start_reply(self, drop_oldest: bool = False, parent: int | None = None,
                     cont: MessageWidget | None = None):
        """Answer the chat's last message, or write a new version of the reply to `parent`, or
        continue the cut reply `cont`."""
        cid = self.conversation_id
        if cont is not None:
            history, mid, w = self._history(self.store.parent_of(cont.message_id)), cont.message_id, cont
        else:
            history = self._history(parent)
            mid = self.store.add_message(cid, "assistant", "", parent="leaf" if parent is None else parent)
            if parent is not None:
                self._show_chat()  # the new version replaces the old one in view
                w = self._message_widgets()[-1]
            else:
                w = self.chat_view.add("assistant", mid)
            w.set_content("")
        self._mark_last()
        self._scroll_to_end()
        self._rid += 1
        self._active = {"rid": self._rid, "kind": "chat", "widget": w, "mid": mid, "cid": cid,
                        "t0": time.perf_counter(), "saved": time.perf_counter(), "drop_oldest": drop_oldest,
                        "parent": parent, "cont": None if cont is None else (w.text, list(w.origins), w.thinking)}
        self.stats_bar.reset()
        self._update_controls()
        self.statusBar().showMessage("Generating…")
        over = {"drop_oldest": drop_oldest}
        if cont is not None:
            over["answer_prefix"] = w.text
        self._generate.emit(self._rid, history, self._gen_config(**over))

    def regenerate(self, w: MessageWidget | None = None):
        """Another answer to the same question; the old one stays as a version."""
        ws = self._message_widgets()
        w = w or (ws[-1] if ws else None)
        if w is None or w.role != "assistant" or self._active:
            return
        self._start_reply(parent=self.store.parent_of(w.message_id))

    def edit_message(self, w: MessageWidget) -> None:
        """Put a message back in the input box; sending makes a new version of it."""
        if self._active or w.role != "user":
            return
        self._editing = w
        self.chat_view.hide_from(w)
        self.edit_banner.show()
        self.attach_bar.clear()
        for path, name, kind in w.media:  # the new version starts with the same attachments
            if path is not None and path.is_file():
                self.attach_bar.add(Attachment(path.read_bytes(), name, kind))
        self.input.setPlainText(w.text)
        self.input.setFocus()

    def cancel_edit(self) -> None:
        if self._editing is None:
            return
        self._editing = None
        self.attach_bar.clear()
        self.edit_banner.hide()
        self.chat_view.hide_from(None)

    def continue_reply(self, w: MessageWidget) -> None:
        if self._active or w.role != "assistant" or not w.text:
            return
        self._start_reply(cont=w)

    def stop(self):
        if self._active:
            self.worker.cancel(self._active["rid"])
            self.compare_page.stop()

    # ---- compare ---------------------------------------------------------------------
    def compare(self):
        text = self.input.toPlainText().strip()
        if not text:
            ws = [w for w in self._message_widgets() if w.role == "user"]
            text = ws[-1].text if ws else ""
        if not text or self._active or not self.compare_btn.isEnabled():
            if not text:
                self.statusBar().showMessage("Type a prompt to compare first", 4000)
            return
        msgs = self._with_system([{"role": "user", "content": text}])
        self.stack.setCurrentIndex(1)
        info = self.model_info
        servers = ((info.get("baseline_server") or info["remote"]["server"], info["remote"]["server"])
                   if info.get("remote") else None)
        self.compare_page.start(text, self.settings["temperature"] <= 0, self.draft_spin.value() or "auto", servers)
        self._compare_msgs = msgs
        self.stats_bar.reset()
        self._rid += 1  # marks the comparison as running until the first run starts
        self._active = {"rid": self._rid, "kind": "compare", "which": "baseline", "t0": time.perf_counter()}
        self._update_controls()
        # let the page switch paint first: the GUI thread shares the GIL with the engine
        # thread, and both runs must see an idle window for a fair comparison
        QTimer.singleShot(150, self._next_compare)

    def _next_compare(self):
        run = self.compare_page.next_run()
        if run is None:
            if self._active and self._active.get("kind") == "compare":
                self._active = None  # stopped before the first run began
                self._update_controls()
                self.compare_page.interrupted("stopped before both runs finished")
            return
        which, use_mtp, first = run  # repeats add numbers, not lines on the chart
        self.stats_bar.reset(keep_chart=bool(self.compare_page.runs["baseline"]))  # both runs on one chart
        self._rid += 1
        self._active = {"rid": self._rid, "kind": "compare", "which": which, "t0": time.perf_counter(),
                        "chart": first}
        self._update_controls()
        # fresh cache for each run, so both pay the same prefill; same seed for sampling
        cfg = self._gen_config(use_mtp=use_mtp, fresh=True, seed=1234)
        if self.model_info.get("remote") and not use_mtp and not self.model_info.get("can_switch_mtp"):
            cfg["backend"] = "baseline"  # servers cannot switch drafting off: the baseline server runs it
        self._generate.emit(self._rid, self._compare_msgs, cfg)

    # ---- worker signals --------------------------------------------------------------
    def _on_stream(self, rid, pieces, stats):
        a = self._active
        if not a or a["rid"] != rid:
            return
        answer = "".join(t for t, ch, _ in pieces if ch == "answer")
        thinking = "".join(t for t, ch, _ in pieces if ch == "thinking")
        self.stats_bar.update_stats(stats, time.perf_counter() - a["t0"] if a.get("chart", True) else None)
        if a["kind"] == "compare":
            self.compare_page.stream(a["which"], answer)
            return
        w = a["widget"]
        w.append(answer, thinking, pieces)
        now = time.perf_counter()
        if now - a["saved"] >= SAVE_INTERVAL_S:
            self.store.update_message(a["mid"], w.text, w.thinking, None, w.origins)
            a["saved"] = now
        self._scroll_to_end()

    def _on_finished(self, rid, result):
        a = self._active
        if not a or a["rid"] != rid:
            return
        self._active = None
        self._show_mtp_limit(result)
        self.stats_bar.update_stats(result["stats"], time.perf_counter() - a["t0"] if a.get("chart", True) else None,
                                    final=True)
        if a["kind"] == "compare":
            self.compare_page.finished(a["which"], result)
            self._update_controls()
            self._next_compare()
            return
        self._learn_drafting(result["stats"])
        w = a["widget"]
        answer, thinking, origins = result["answer"], result["thinking"], result["origins"]
        if a["cont"]:  # a continued reply: what was there, then what was added
            answer, origins, thinking = a["cont"][0] + answer, a["cont"][1] + origins, a["cont"][2] + thinking
        w.set_content(answer, thinking, origins)
        w.set_stats(result["stats"])
        self.store.update_message(a["mid"], answer, thinking, result["stats"], origins)
        self.statusBar().showMessage(result["stats"].get("footer", ""), 8000)
        self._update_controls()
        self._mark_last()
        self._count_context()

    def _learn_drafting(self, stats: dict) -> None:
        """A server shows whether it drafts with its replies: the MTP switch follows."""
        info = self.model_info
        if not (info and info.get("remote") and stats.get("drafts_reported")):
            return
        info["has_mtp"] = stats.get("mode") == "mtp"
        info["mtp_reason"] = "" if info["has_mtp"] else f"{info['engine']} reports no drafting"
        self.mtp_switch.blockSignals(True)
        self.mtp_switch.setChecked(info["has_mtp"])
        self.mtp_switch.blockSignals(False)
        self._update_controls()

    def _show_mtp_limit(self, result: dict) -> None:
        """Once per loaded model: where measurements show MTP cannot be faster here."""
        if "mtp_ceiling" not in result or self.mtp_banner.isVisible() or self._mtp_limit_said:
            return
        self._mtp_limit_said = True
        self.mtp_banner.setText(
            f"On this machine MTP cannot be faster than plain decoding for this model: {result['mtp_costs']}, "
            f"so even if every draft were accepted it would reach only {result['mtp_ceiling']:.2f}x. "
            "With k auto Tandem keeps drafting paused (it still tries now and then); "
            "switch MTP off to skip the drafter entirely.")
        self.mtp_banner.show()

    def _on_failed(self, rid, kind, msg):
        a = self._active
        if not a or a["rid"] != rid:
            return
        self._active = None
        self._update_controls()
        self.statusBar().showMessage("Stopped" if kind == "cancelled" else "No reply", 5000)
        if a["kind"] == "compare":
            self.compare_page.interrupted(msg)
            return
        w = a["widget"]
        if a["cont"] and len(w.text) == len(a["cont"][0]):  # nothing was added: the reply stays as it was
            pass
        elif w.text:  # an error mid-reply: keep what was written
            stats = {"footer": "stopped by an error", "finish_reason": "error"}
            self.store.update_message(a["mid"], w.text, w.thinking, stats, w.origins)
            w.set_stats(stats)
        else:  # drop the empty reply placeholder; the user's message stays
            self.store.delete_message(a["cid"], a["mid"])
            if a["parent"] is not None:  # a new version that never started: the previous one again
                self.store.show_version(a["cid"], a["parent"], 0)
                if a["cid"] == self.conversation_id:
                    self._show_chat()
            else:
                self.chat_view.remove(w)
        self._mark_last()
        if self._closing or kind == "cancelled":
            return
        if kind == "overflow" and a.get("drop_oldest"):
            # the oldest turns are already left out: the last message alone does not fit
            if message(self, QMessageBox.Question, "Message too long for the context",
                       f"{msg}.\n\nEven without the earlier turns your last message does not leave room "
                       "for an answer. Shorten it (Edit), or raise the context size. Open Settings now?",
                       QMessageBox.Yes | QMessageBox.No) == QMessageBox.Yes:
                self.open_settings()
        elif kind == "overflow":
            ans = message(self, QMessageBox.Question, "Conversation too long",
                          f"{msg}.\n\nLeave out the oldest turns for this reply? (They stay saved in the chat.)",
                          QMessageBox.Yes | QMessageBox.No)
            if ans == QMessageBox.Yes:
                self._start_reply(drop_oldest=True)
        else:
            message(self, QMessageBox.Warning, "Generation failed", msg)

    # ---- closing -----------------------------------------------------------------------
    def scale_font(self, step: float) -> None:
        """Text size for the whole window: step +/-0.1 of the normal size, 0 back to normal."""
        scale = 1.0 if step == 0 else min(2.5, max(0.6, round(self.settings.get("font_scale", 1.0) + step, 2)))
        self.settings["font_scale"] = scale
        self._apply_font_scale()

    def _apply_font_scale(self) -> None:
        font = self.font()
        font.setPointSizeF(self._base_font_size * float(self.settings.get("font_scale", 1.0)))
        self.setFont(font)  # children follow their window's font
        self.chat_view.refresh()

    def restore_geometry(self) -> None:
        data = self.settings.get("geometry") or ""
        if data:
            self.restoreGeometry(QByteArray.fromBase64(data.encode("ascii")))

    def closeEvent(self, e):
        self.settings["geometry"] = bytes(self.saveGeometry().toBase64()).decode("ascii")
        if getattr(self, "server_panel", None) is not None:
            self.server_panel.stop()  # before the engine goes
        self._closing = True
        self.worker.request_close()
        self._shutdown.emit()
        self.thread.quit()
        self.thread.wait(30000)
        # deliver the worker's last signals (the stopped reply) so nothing is lost
        from PySide6.QtCore import QCoreApplication

        QCoreApplication.processEvents(QEventLoop.AllEvents, 200)
        if self._active and self._active.get("kind") == "chat":
            w = self._active["widget"]
            self.store.update_message(self._active["mid"], w.text, w.thinking, None, w.origins)
        self.settings.save()
        self.store.close()
        super().closeEvent(e)
