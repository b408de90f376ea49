"""Compare mode: one prompt, baseline then MTP on the same loaded target, two panes.

Both runs share one device, so they run one after the other (`CompareRun` is the schedule and
its results; the chat session runs it); afterwards "Replay" plays both answers side by side at
their recorded timings, so the race is shown as it happened.
"""

from __future__ import annotations

import html
import statistics
import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QGridLayout, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.session.compare_run import CompareRun  # noqa: F401 (the page shows one; older imports find it here)
from app.core.help_text import draft_source
from .render import for_display
from .safe_text import SafeBrowser


def speed_verdict(ratio, bt, mt, mtp_stats: dict, usual_tps=None, runs: int = 1) -> str:
    """The comparison in plain words: faster, the same, or slower and why; the drafting run is
    named by what drafted it (MTP, lookup, or both)."""
    if not ratio:
        return "Speed: –"
    name = draft_source(mtp_stats.get("mode"))
    acc = mtp_stats.get("acceptance_rate")
    speeds = (f"({bt:.1f} → {mt:.1f} tok/s" + (f", median of {runs} runs each" if runs > 1 else "")
              + (f"; {acc * 100:.0f} % of the drafted tokens accepted" if acc is not None else "") + ")")
    if ratio >= 1.05:
        text = f"<b>{name} was {ratio:.2f}× faster</b> {speeds}."
    elif ratio >= 0.95:
        text = f"<b>About the same speed</b> {speeds}: here what drafting saves and what it costs cancel out."
    else:
        if mtp_stats.get("draft_max") == "auto" and (mtp_stats.get("mean_draft_length") or 0) < 0.2:
            why = "drafting did not pay on this text and machine, so auto paused it; the gap is its overhead"
        elif acc is not None and acc < 0.5:
            why = "the model rejected most of the drafted tokens, so most drafting was wasted"
        else:
            why = ("checking several tokens at once costs nearly as much as writing them one by one on this "
                   "hardware (typical of CPUs); " + ("auto drafts less once it has measured that, which a short "
                                                     "reply leaves it little time to do"
                                                     if mtp_stats.get("draft_max") == "auto" else "try draft length auto"))
        text = f"<b>{name} was slower here ({ratio:.2f}×)</b> {speeds}: {why}."
    if usual_tps and bt and bt < 0.8 * usual_tps:  # slower than usual: something else used the machine
        text += (f" <span style='color:#c77c02'>The baseline ran at {bt:.1f} tok/s where this machine usually "
                 f"does {usual_tps:.1f}: it was busy, so run the comparison again.</span>")
    return text


def first_difference(a: str, b: str) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


class Pane(QWidget):
    def __init__(self, title: str, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.title = QLabel(f"<b>{title}</b>")
        self.view = SafeBrowser(self)
        self.stats = QLabel("–")
        self.stats.setStyleSheet("color: gray")
        self.stats.setWordWrap(True)  # a long footer wraps instead of widening the window
        lay.addWidget(self.title)
        lay.addWidget(self.view, 1)
        lay.addWidget(self.stats)
        self.result = None  # the first ReplyResult of this kind

    def clear(self, waiting: str = ""):
        self.view.setPlainText(waiting)
        self.stats.setText("–")
        self.result = None


class ComparePage(QWidget):
    back = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        top = QHBoxLayout()
        self.prompt_label = QLabel("")
        self.prompt_label.setTextFormat(Qt.RichText)  # the prompt inside is escaped
        self.prompt_label.setWordWrap(True)
        top.addWidget(self.prompt_label, 1)
        self.replay_btn = QPushButton("Replay")
        self.replay_btn.setToolTip("Play both answers back at their recorded token timings")
        self.replay_btn.clicked.connect(self.replay)
        self.replay_btn.setEnabled(False)
        back = QPushButton("Back to chat")
        back.clicked.connect(self.back.emit)
        top.addWidget(self.replay_btn)
        top.addWidget(back)
        lay.addLayout(top)
        grid = QGridLayout()
        self.base = Pane("Baseline (no drafting)")
        self.mtp = Pane("Drafting")
        grid.addWidget(self.base, 0, 0)
        grid.addWidget(self.mtp, 0, 1)
        lay.addLayout(grid, 1)
        self.verdict = QLabel("")
        self.verdict.setWordWrap(True)
        self.verdict.setStyleSheet("font-size: 14px")
        lay.addWidget(self.verdict)
        self._timer = QTimer(self)
        self._timer.setInterval(16)
        self._timer.timeout.connect(self._tick)
        self._replay_t0 = 0.0
        self.greedy, self.servers = True, None
        self.run: CompareRun | None = None

    WAITING = ("running…", "waiting for the baseline run to finish…")

    def start(self, run: CompareRun, servers: tuple[str, str] | None = None):
        """`servers`: (baseline server, MTP server) when a remote engine runs both."""
        self._timer.stop()  # a replay of the last comparison still playing ends here
        self.greedy, self.servers = run.greedy, servers
        self.prompt_label.setText(f"<b>Prompt:</b> {html.escape(for_display(run.prompt[:300]))}")
        if servers:
            self.base.title.setText(f"<b>Baseline</b> (no drafter, {html.escape(servers[0])})")
            self.mtp.title.setText(f"<b>MTP</b> (the server's drafter, {html.escape(servers[1])})")
        else:
            self.base.title.setText("<b>Baseline (no drafting)</b>")
            self._drafting_title(run.source, run.draft_max)
        self.base.clear(self.WAITING[0])
        self.mtp.clear(self.WAITING[1])
        self.verdict.setText(
            "Running the baseline server, then the MTP server (one at a time, so neither slows the other; servers "
            "cannot switch drafting per request)." if servers else
            f"Running baseline, then {html.escape(run.source)} drafting, on the same model (one at a time, so neither slows the other).")
        self.replay_btn.setEnabled(False)
        self.run = run

    def _drafting_title(self, source: str, k) -> None:
        self.mtp.title.setText(f"<b>{html.escape(source)} drafting</b> (k {k})" if isinstance(k, str) else
                               f"<b>{html.escape(source)} drafting</b> (k={k})")

    @property
    def concluded(self) -> bool:
        return self.run is not None and self.run.concluded

    def interrupted(self, message: str = "") -> None:
        """Stopped or failed: with both kinds of run done the verdict uses what there is."""
        run = self.run  # (the session has interrupted it)
        if run.complete:
            self._conclude()
            return
        message = message or "stopped before both runs finished"
        for pane in (self.base, self.mtp):  # no pane goes on saying it runs
            if pane.result is None and pane.view.toPlainText() in self.WAITING:
                pane.view.setPlainText("stopped" if message.startswith("stopped") else "failed")
        self.verdict.setText(f"Comparison failed: {html.escape(message)}")

    def stream(self, which: str, text: str):
        pane = self.base if which == "baseline" else self.mtp
        if pane.result is not None:
            return  # a repeat (short runs): the pane keeps the first run's text
        if pane.view.toPlainText() in self.WAITING:
            pane.view.setPlainText("")
        pane.view.moveCursor(QTextCursor.End)
        pane.view.insertPlainText(for_display(text))

    def show_run(self, run: CompareRun, which: str) -> None:
        """A run finished. Repeats (short runs) only add their numbers: the panes keep the
        first run's text and timings for Replay."""
        result = run.runs[which][-1]
        pane = self.base if which == "baseline" else self.mtp
        if pane.result is None:
            pane.result = result
            pane.view.setPlainText(for_display(result.answer))
            if which == "mtp" and not self.servers:  # named by what drafted: the run's mode
                self._drafting_title(draft_source(result.stats.get("mode")), run.draft_max)
        tps = [r.stats.get("decode_tps") or 0.0 for r in run.runs[which]]
        pane.stats.setText(html.escape(result.stats.get("footer", "")) if len(tps) == 1 else
                           f"median {statistics.median(tps):.1f} tok/s of {len(tps)} runs "
                           f"({', '.join(f'{t:.1f}' for t in tps)})")
        if which == "baseline" and self.mtp.result is None and not run.concluded:
            self.mtp.view.setPlainText(self.WAITING[0])
        if run.concluded:
            self._conclude() if run.complete else self.interrupted()
        elif run.repeats and len(run.runs["mtp"]) == 1 and which == "mtp":
            self.verdict.setText(f"The runs were short, so one run's speed is mostly noise: running each "
                                 f"{run.repeats} more times, alternating, for a steady median…")

    def _conclude(self) -> None:
        """All runs are in: the verdict (medians when repeated) and Replay."""
        run = self.run
        b, m = self.base.result, self.mtp.result
        bt, mt = run.median_tps("baseline"), run.median_tps("mtp")
        runs = min(len(run.runs["baseline"]), len(run.runs["mtp"]))
        parts = [speed_verdict(run.ratio, bt, mt, run.drafting_stats(), b.usual_tps, runs)]
        if self.greedy:
            diff = first_difference(b.answer, m.answer)
            if diff is None:
                parts.append("· <span style='color:#2e9d52'><b>identical output</b></span> ✓")
            else:
                parts.append(
                    f"· outputs differ from character {diff}: at that point two tokens were tied within "
                    "floating-point rounding, and the batched verify pass (MTP) rounded differently from "
                    "the one-token pass (baseline). This is a near-tie, not an error.")
        else:
            parts.append("· sampling (temperature > 0): the outputs differ by design, "
                         "but both follow the same distribution")
        self.verdict.setText(" ".join(parts))
        self.replay_btn.setEnabled(True)

    # ---- replay ------------------------------------------------------------------
    def replay(self):
        if not (self.base.result and self.mtp.result):
            return
        self.base.view.clear()
        self.mtp.view.clear()
        self._cursor = {"baseline": 0, "mtp": 0}
        self._replay_t0 = time.perf_counter()
        self._timer.start()

    def _tick(self):
        t = time.perf_counter() - self._replay_t0
        running = False
        for which, pane in (("baseline", self.base), ("mtp", self.mtp)):
            tl = pane.result.timeline
            i = self._cursor[which]
            while i < len(tl) and tl[i][0] <= t:
                pane.view.moveCursor(QTextCursor.End)
                pane.view.insertPlainText(for_display(tl[i][1]))
                i += 1
            self._cursor[which] = i
            running |= i < len(tl)
        if not running:
            self._timer.stop()

    @property
    def replaying(self) -> bool:
        return self._timer.isActive()
