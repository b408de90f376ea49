"""First run: recommend a Gemma 4 pair that fits, download it with progress, or use local files."""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import QObject, QThread, Signal, Slot
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QFileDialog, QHBoxLayout, QLabel, QMessageBox, QProgressBar,
                               QPushButton, QVBoxLayout)

from engine.errors import TandemError
from engine.models.catalog import DEFAULT_QUANT, load_catalog
from engine.models.download import Downloader, DownloadCancelled, HubUnreachable, Progress
from engine.models.hardware import Machine
from engine.models.library import Library
from engine.models.pairing import find_drafter
from engine.models.recommend import USABLE_TPS, check_fit, recommend

from app.ui.safe_text import message


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB" if n < 1e9 else f"{n / 1e9:,.2f} GB"


class _DownloadWorker(QObject):
    progress = Signal(dict)
    finished = Signal(str, str, list, str)  # target, drafter ("" = none), notes, projector ("" = none)
    failed = Signal(str, str)  # message, kind: "cancelled" | "offline" | "error"

    def __init__(self, downloader: Downloader, model, quant, vision: bool = True):
        super().__init__()
        self.downloader, self.model, self.quant, self.vision = downloader, model, quant, vision

    @Slot()
    def run(self):
        def report(p: Progress):
            self.progress.emit({"label": p.label, "file": p.filename, "done": p.done, "total": p.total,
                                "speed": p.speed, "eta": p.eta_s})
        try:
            res = self.downloader.download_plan(self.downloader.plan(self.model, self.quant), report, self.vision)
        except DownloadCancelled as e:
            self.failed.emit(str(e), "cancelled")
            return
        except HubUnreachable as e:
            self.failed.emit(str(e), "offline")
            return
        except (TandemError, OSError) as e:
            self.failed.emit(str(e), "error")
            return
        self.finished.emit(str(res.target), str(res.drafter or ""), list(res.notes), str(res.projector or ""))


class DownloadDialog(QDialog):
    """Progress of the target and the drafter: bytes, speed and time left; Cancel resumes later."""

    def __init__(self, downloader: Downloader, model, quant: str, library: Library, parent=None,
                 vision: bool = True):
        super().__init__(parent)
        self.setWindowTitle(f"Downloading {model.title}")
        self.setMinimumWidth(560)
        self.model, self.library = model, library
        self.result_paths: tuple[str, str] | None = None
        self.notes: list[str] = []
        self.error: str | None = None
        self.wants_local = False  # offline: the user chose to use files on this computer
        lay = QVBoxLayout(self)
        self.bars, self.labels = {}, {}
        for label, title in (("target", f"{model.title} {quant}"), ("drafter", "MTP drafter"),
                             ("projector", "Picture reader (mmproj)")):
            if label == "projector" and not vision:
                continue
            lay.addWidget(QLabel(f"<b>{title}</b>"))
            bar = QProgressBar()
            bar.setRange(0, 1000)
            lab = QLabel("waiting…")
            lab.setStyleSheet("color: gray")
            lay.addWidget(bar)
            lay.addWidget(lab)
            self.bars[label], self.labels[label] = bar, lab
        self.status = QLabel("")
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        row = QHBoxLayout()
        row.addStretch(1)
        self.local_btn = QPushButton("Use files on this computer…")  # shown when offline
        self.local_btn.clicked.connect(self._use_local)
        self.local_btn.hide()
        row.addWidget(self.local_btn)
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.clicked.connect(self.cancel)
        row.addWidget(self.cancel_btn)
        lay.addLayout(row)

        self.downloader = downloader
        self.thread = QThread(self)
        self.worker = _DownloadWorker(downloader, model, quant, vision)
        self.worker.moveToThread(self.thread)
        self.thread.started.connect(self.worker.run)
        self.worker.progress.connect(self._on_progress)
        self.worker.finished.connect(self._on_finished)
        self.worker.failed.connect(self._on_failed)

    def start(self):
        self.thread.start()

    def cancel(self):
        self.downloader.cancel()
        self.cancel_btn.setEnabled(False)
        self.status.setText("Cancelling… (the partial file is kept; the download resumes next time)")

    def _on_progress(self, p: dict):
        self.bars[p["label"]].setValue(int(1000 * p["done"] / max(1, p["total"])))
        eta = f" · {p['eta']:.0f} s left" if p["eta"] is not None else ""
        self.labels[p["label"]].setText(
            f"{_mb(p['done'])} of {_mb(p['total'])} · {p['speed'] / 1e6:.1f} MB/s{eta} · {Path(p['file']).name}")

    def _on_finished(self, target: str, drafter: str, notes: list, projector: str = ""):
        self._stop_thread()
        self.result_paths = (target, drafter)
        self.notes = notes
        self.library.add(self.model.name, target, drafter or None, "download", projector or None)
        self.accept()

    def _on_failed(self, message: str, kind: str):
        self._stop_thread()
        self.error = message
        if kind == "offline":
            self.status.setText("No connection to Hugging Face, so nothing can be downloaded now. If you have "
                                "Gemma 4 GGUF files on this computer, use them instead.\n\n(" + message + ")")
            self.local_btn.show()
        else:
            self.status.setText(("Cancelled. " if kind == "cancelled" else "Download failed: ") + message)
        # room for the whole message: a top-level layout squeezes a wrapped label to fewer lines
        self.status.setMinimumHeight(self.status.heightForWidth(self.status.width()))
        self.adjustSize()
        self.cancel_btn.setText("Close")
        self.cancel_btn.setEnabled(True)
        self.cancel_btn.clicked.disconnect()
        self.cancel_btn.clicked.connect(self.reject)

    def _use_local(self):
        self.wants_local = True
        self.reject()

    def _stop_thread(self):
        self.thread.quit()
        self.thread.wait(5000)

    def closeEvent(self, e):
        if self.thread.isRunning():
            self.downloader.cancel()
            self._stop_thread()
        super().closeEvent(e)


class WelcomeDialog(QDialog):
    """Shown when no model is configured: pick (or accept) a recommended pair and get it."""

    def __init__(self, parent=None, downloader_args: dict | None = None, library: Library | None = None,
                 machine: Machine | None = None):
        super().__init__(parent)
        self.setWindowTitle("Welcome to Tandem")
        self.setMinimumWidth(620)
        self.downloader_args = dict(downloader_args or {})
        self.library = library or Library()
        self.catalog = load_catalog()
        if machine is None:
            from engine.models.hardware import this_machine

            machine = this_machine()
        self.machine = machine
        self.chosen: tuple[str, str] | None = None  # (target, drafter)

        lay = QVBoxLayout(self)
        lay.addWidget(QLabel("<h2>Welcome to Tandem</h2>"
                             "<p>Tandem runs Google's Gemma 4 on this computer, offline, with its MTP drafter "
                             "for faster answers. Let's get a model.</p>"))
        lay.addWidget(QLabel(f"<b>This machine:</b> {html.escape(machine.description)}"))
        rec = recommend(machine)
        row = QHBoxLayout()
        self.model_box = QComboBox()
        for m in self.catalog:
            self.model_box.addItem(f"{m.title} — {m.summary}", m.name)
        self.model_box.setCurrentIndex([m.name for m in self.catalog].index(rec.model.name))
        self.quant_box = QComboBox()
        row.addWidget(self.model_box, 1)
        row.addWidget(self.quant_box)
        lay.addLayout(row)
        self.fit_label = QLabel()
        self.fit_label.setWordWrap(True)
        lay.addWidget(self.fit_label)
        folder_row = QHBoxLayout()
        self.folder_label = QLabel("Save to: the Hugging Face cache")
        change = QPushButton("Change…")
        change.clicked.connect(self._choose_folder)
        folder_row.addWidget(self.folder_label, 1)
        folder_row.addWidget(change)
        lay.addLayout(folder_row)
        self.vision_box = QCheckBox("Also get the picture reader (mmproj, about 0.6–0.8 GB) to attach images")
        self.vision_box.setChecked(True)
        lay.addWidget(self.vision_box)
        buttons = QHBoxLayout()
        self.local_btn = QPushButton("Use files on this computer…")
        self.local_btn.clicked.connect(self.use_local)
        later = QPushButton("Not now")
        later.clicked.connect(self.reject)
        self.download_btn = QPushButton("Download and start")
        self.download_btn.setDefault(True)
        self.download_btn.clicked.connect(self.download)
        buttons.addWidget(self.local_btn)
        buttons.addStretch(1)
        buttons.addWidget(later)
        buttons.addWidget(self.download_btn)
        lay.addLayout(buttons)
        self.model_box.currentIndexChanged.connect(self._model_changed)
        self.quant_box.currentIndexChanged.connect(self._update_fit)
        self._model_changed()

    def current_model(self):
        return self.catalog[self.model_box.currentIndex()]

    def _model_changed(self, *_):
        m = self.current_model()
        self.quant_box.blockSignals(True)
        self.quant_box.clear()
        self.quant_box.addItems(list(m.quants))
        self.quant_box.setCurrentText(DEFAULT_QUANT)
        self.quant_box.blockSignals(False)
        self._update_fit()

    def _update_fit(self, *_):
        fit = check_fit(self.current_model(), self.quant_box.currentText(), self.machine)
        color = "#b3261e" if fit.spills else ("#a15c00" if fit.tps < USABLE_TPS else "#2e7d32")
        self.fit_label.setText(f"<span style='color:{color}'>{fit.explain()}.</span> "
                               f"Download: about {_mb(fit.model.quants[fit.quant] + fit.model.drafter_bytes)}.")

    def _choose_folder(self):
        d = QFileDialog.getExistingDirectory(self, "Download models to")
        if d:
            self.downloader_args["folder"] = d
            self.folder_label.setText(f"Save to: {d}")

    def download(self):
        m, quant = self.current_model(), self.quant_box.currentText()
        fit = check_fit(m, quant, self.machine)
        if fit.spills and QMessageBox.question(self, "Model may not fit", fit.explain() + ".\n\nDownload anyway?") \
                != QMessageBox.Yes:
            return
        self.download_dialog = DownloadDialog(Downloader(**self.downloader_args), m, quant, self.library, self,
                                              vision=self.vision_box.isChecked())
        self.download_dialog.start()
        accepted = self.download_dialog.exec() == QDialog.Accepted
        if not accepted and self.download_dialog.wants_local:
            self.use_local()
            return
        if accepted:
            t, d = self.download_dialog.result_paths
            if not d:
                message(self, QMessageBox.Information, "Downloaded without a drafter",
                        f"{m.title} was downloaded, but no MTP drafter pairs with it, so it runs without "
                        "the speed-up.\n\n" + "\n".join(self.download_dialog.notes))
            self.chosen = (t, d)
            self.accept()

    def use_local(self):
        path, _ = QFileDialog.getOpenFileName(self, "Choose a Gemma 4 GGUF", "", "GGUF models (*.gguf)")
        if path:
            self.use_local_file(path)

    def use_local_file(self, path: str) -> None:
        try:
            drafter, reasons = find_drafter(path)
        except TandemError as e:
            message(self, QMessageBox.Warning, "Cannot use this file", str(e))
            return
        if drafter is None:
            why = "\n".join(reasons) or "no other GGUF files next to it"
            message(self, QMessageBox.Information, "No MTP drafter found",
                    "Tandem will run without an MTP drafter: it drafts by lookup only, which speeds up "
                    f"answers that repeat text already in the chat (an edited file).\n\nWhy: {why}")
        self.library.add(Path(path).stem, path, drafter, "import")
        self.chosen = (path, str(drafter) if drafter else "")
        self.accept()
