"""Live statistics: the numbers of the reply being written and two small charts (tokens/s
over time, with baseline and MTP overlaid in Compare; acceptance per draft position).

The charts are pyqtgraph plots: axes, ticks, legend and scaling come from a maintained
library instead of hand painting. They redraw at most LIVE_INTERVAL_S apart, and a plot
keeps only what it shows (one point per update), so the GUI's work per update stays small
and does not grow with the reply.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QGridLayout, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from engine.generation import AUTO, SERVER_DRAFT

from app.core.help_text import draft_source, position_bars, prefill_text

# the drafting run's line is named by what drafted it (app.core.help_text.draft_source)
SERIES_COLORS = {"MTP": "#2e9d52", "Lookup": "#2e9d52", "MTP + lookup": "#2e9d52", "baseline": "#8a8f98"}


def _theme_colors() -> tuple[str, str]:
    """(background, foreground) matching the window's palette, light or dark."""
    pal = QGuiApplication.palette()
    return pal.base().color().name(), pal.text().color().name()


DRAFTING_MODES = ("mtp", "lookup", "hybrid")  # the stats' mode when drafts were made (see engine.stats)
MAX_POINTS = 500  # of a stored reply's speed line drawn again (app.session.replies keeps at most 240)


def _lookup_share(s: dict) -> str:
    """'40 % of the accepted drafts came from lookup': the sources' shares (hybrid replies)."""
    acc = s.get("accepted_tokens") or 0
    if s.get("mode") != "hybrid" or not acc:
        return ""
    return (f"{100 * (s.get('lookup_accepted_tokens') or 0) // acc} % of the accepted drafts came from lookup "
            "(text copied from the chat), the rest from the MTP drafter")


class _Plot(pg.PlotWidget):
    def __init__(self, title: str, left: str, bottom: str, parent=None):
        bg, fg = _theme_colors()
        super().__init__(parent, background=bg)
        self.setMouseEnabled(False, False)
        self.hideButtons()
        self.setMenuEnabled(False)
        item = self.getPlotItem()
        item.setTitle(title, color=fg, size="9pt")
        # the units are in the title: axis labels would take a third of a small chart's height
        self.units = {"left": left, "bottom": bottom}
        for side in ("left", "bottom"):
            ax = item.getAxis(side)
            ax.enableAutoSIPrefix(False)  # plain seconds, never "(x0.001)"
            ax.setTextPen(fg)
            ax.setPen(fg)
        item.showGrid(x=True, y=True, alpha=0.15)
        self.setMinimumHeight(100)

    def restyle(self) -> None:
        bg, fg = _theme_colors()
        self.setBackground(bg)
        item = self.getPlotItem()
        item.titleLabel.setText(item.titleLabel.text, color=fg, size="9pt")
        for side in ("left", "bottom"):
            ax = item.getAxis(side)
            ax.setTextPen(fg)
            ax.setPen(fg)


class SpeedChart(_Plot):
    """Decode tokens/s over a reply's time; one line per run (baseline, MTP)."""

    TITLE = "tok/s over seconds"

    def __init__(self, parent=None):
        super().__init__(self.TITLE, "tok/s", "seconds", parent)
        self.series: dict[str, tuple[list, list, pg.PlotDataItem]] = {}
        self.setToolTip("Decode tokens per second over the reply. In Compare, the baseline run (gray) and "
                        "the MTP run (green) are drawn on the same axes.")

    @property
    def points(self) -> list[tuple[float, float]]:
        """Every series' points, for tests and summaries."""
        return [p for xs, ys, _ in self.series.values() for p in zip(xs, ys)]

    def clear_series(self) -> None:
        # not clear(): PlotWidget sets its PlotItem's clear() on each instance, hiding a method
        for _, _, item in self.series.values():
            self.removeItem(item)
        self.series = {}
        self._title()
        self.setXRange(0, 1.0, padding=0.02)  # a new chat's axes, not the last reply's
        self.setYRange(0, 1.15, padding=0)

    def _title(self) -> None:
        """The title names the lines in their colors (a legend would cover the curves)."""
        names = " vs ".join(f"<span style='color:{SERIES_COLORS.get(n, '#3b7dd8')}'>{n}</span>" for n in self.series)
        self.getPlotItem().setTitle(f"{self.TITLE}{': ' + names if names else ''}", color=_theme_colors()[1],
                                    size="9pt")

    def add(self, name: str, t: float, tps: float, since: float | None = None) -> None:
        """A point of run `name`'s line; `since`: when its first token came (a line of one point
        is drawn flat from there, not as a dot)."""
        if name not in self.series:
            pen = pg.mkPen(SERIES_COLORS.get(name, "#3b7dd8"), width=2)
            self.series[name] = ([], [], self.plot([], [], pen=pen, symbol="o", symbolSize=4,
                                                   symbolBrush=SERIES_COLORS.get(name), symbolPen=None))
            self._title()
        xs, ys, item = self.series[name]
        xs.append(t)
        ys.append(tps)
        if len(xs) == 1 and since is not None and since < t:  # a short reply: its speed since its first token
            item.setData([since, t], [tps, tps])
        else:
            item.setData(xs, ys)
        # axes from zero: the eye reads speeds against nothing, not against the lowest value
        t_max = max(x for xs_, _, _ in self.series.values() for x in xs_)
        v_max = max(y for _, ys_, _ in self.series.values() for y in ys_)
        self.setXRange(0, max(t_max, 1.0), padding=0.02)
        self.setYRange(0, max(v_max, 1.0) * 1.15, padding=0)


class AcceptanceBars(_Plot):
    """Acceptance (accepted / drafted, as the strip's) of the drafts at each draft position."""

    def __init__(self, parent=None):
        super().__init__(self.TITLE, "%", "position", parent)
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.6, brush=SERIES_COLORS["MTP"])
        self.addItem(self.bars)
        self.setYRange(0, 100, padding=0)
        self.getPlotItem().getAxis("left").setTicks([[(0, "0"), (50, "50"), (100, "100")]])
        self.values: list[float] = []
        self.setToolTip("Acceptance at each position of a draft (1 = the first drafted token): of the tokens "
                        "drafted there, by MTP or lookup, the share the model accepted. A token is only "
                        "accepted after the ones before it, so the bars fall off; where they get low, longer "
                        "drafts stop paying. The strip's 'accepted' is the same ratio over every position.")

    TITLE = "% accepted, per draft position"

    def show_stats(self, s: dict) -> None:
        values, labels = position_bars(s)
        self.set_values(values, s.get("acceptance_rate"), labels)

    def set_values(self, values: list[float], overall: float | None = None, labels: list[str] | None = None) -> None:
        """The positions' acceptance; `overall` (the strip's figure) goes in the title, so the
        first bar's higher share is not read as a second acceptance."""
        title = self.TITLE + (f" (all: {overall * 100:.0f} %)" if overall is not None and values else "")
        if title != self.getPlotItem().titleLabel.text:
            self.getPlotItem().setTitle(title, color=_theme_colors()[1], size="9pt")
        if values == self.values:
            return
        self.values = list(values)
        xs = list(range(1, len(values) + 1))
        self.bars.setOpts(x=xs, height=[v * 100 for v in values])
        n = max(len(values), 3)
        labels = (labels or []) + [str(i) for i in range(len(labels or []) + 1, n + 1)]
        self.getPlotItem().getAxis("bottom").setTicks([[(i, labels[i - 1]) for i in range(1, n + 1)]])
        self.setXRange(0.4, n + 0.6, padding=0)


class StatsBar(QWidget):
    """Live numbers of the reply being generated, and its charts (View → Speed charts)."""

    FIELDS = [("decode", "tok/s"), ("ttft", "TTFT"), ("prefill", "prefill"), ("accept", "accepted"),
              ("steplen", "tok/step"), ("k", "k")]
    TIPS = {
        "decode": "Speed: tokens written per second once the answer has started",
        "ttft": "Time to first token: from sending until the first word of the answer appears",
        "prefill": "How fast the model read your conversation before answering (tokens per second); pictures "
                   "and sounds are encoded apart first (the time after +), and only once per chat",
        "accept": "Acceptance: of the drafted tokens (MTP's or lookup's), the share the model accepted. High "
                  "on code and repetitive text, lower on creative prose. The same figure in the reply's "
                  "footer and in Compare's verdict",
        "steplen": "Tokens produced per pass of the big model: 1 without drafting; 3 means each pass produced "
                   "three tokens, because the model accepted two drafted tokens and added its own",
        "k": "Draft length: how many tokens the drafter guesses per step. 'auto' chooses it every step "
             "from what drafting costs on this computer and how often guesses are accepted, and pauses "
             "drafting when it would only slow things down",
    }
    LIVE_INTERVAL_S = 0.25  # live numbers and charts at most 4 times a second: painting them costs
    # the CPU that decoding needs on small machines, and a faster flicker tells a reader nothing

    def __init__(self, parent=None):
        super().__init__(parent)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(8, 2, 8, 2)
        self.grid = QGridLayout()
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setHorizontalSpacing(14)
        self.grid.setVerticalSpacing(0)
        self.labels = {}
        for key, title in self.FIELDS:
            lab = QLabel(f"{title}: –")
            lab.setToolTip(self.TIPS[key])
            self.labels[key] = (lab, title)
        self._columns = 0
        self._reflow(len(self.FIELDS))
        outer.addLayout(self.grid)
        self.charts = QWidget(self)
        cl = QHBoxLayout(self.charts)
        cl.setContentsMargins(0, 0, 0, 0)
        self.chart = SpeedChart(self.charts)
        self.bars = AcceptanceBars(self.charts)
        cl.addWidget(self.chart, 3)
        cl.addWidget(self.bars, 2)
        self.charts.setFixedHeight(140)
        outer.addWidget(self.charts)
        self._last_live = -1.0

    def _reflow(self, columns: int) -> None:
        """One row of numbers, or two rows of three when the window is narrow."""
        if columns == self._columns:
            return
        self._columns = columns
        for i, (lab, _) in enumerate(self.labels.values()):
            self.grid.removeWidget(lab)
            self.grid.addWidget(lab, i // columns, i % columns)
        for c in range(len(self.FIELDS) + 1):
            self.grid.setColumnStretch(c, 0)
        self.grid.setColumnStretch(columns, 1)

    def _one_row_width(self) -> int:
        return sum(lab.sizeHint().width() for lab, _ in self.labels.values()) + 14 * len(self.FIELDS) + 16

    def _fit(self) -> None:
        """One row if the numbers' texts fit the bar's width, else two: on a resize, and after the
        texts change (a longer text in one row would be clipped until the next resize)."""
        self._reflow(len(self.FIELDS) if self.width() >= self._one_row_width() else 3)

    def resizeEvent(self, e):
        super().resizeEvent(e)
        self._fit()

    def minimumSizeHint(self):
        hint = super().minimumSizeHint()
        labs = [lab.sizeHint().width() for lab, _ in self.labels.values()]
        three = sum(max(labs[c::3]) for c in range(3)) + 14 * 3 + 16  # two rows of three
        hint.setWidth(min(hint.width(), three))
        return hint

    def show_charts(self, on: bool) -> None:
        self.charts.setVisible(on)

    def restyle(self) -> None:
        """After a theme change."""
        self.chart.restyle()
        self.bars.restyle()

    def _set_k(self, s: dict) -> None:
        lab, _ = self.labels["k"]
        if s.get("draft_max") == SERVER_DRAFT:  # a server: its draft length was set when it started
            lab.setText("k: set by the server" if s.get("drafts_reported") else "drafts: not reported")
        elif s.get("mode") not in DRAFTING_MODES:
            lab.setText("k: –" if s.get("mode") is None else "drafting off")
        elif s.get("draft_max") != AUTO:
            lab.setText(f"{draft_source(s['mode'])} k: {s.get('draft_max')}")
        elif s.get("engine") not in (None, "llama.cpp"):  # a server drafting with auto: its k is not reported
            lab.setText("k auto (the server's)")
        elif s.get("paused"):  # the drafter is paused; lookup (hybrid) still drafts, and may be accepted
            lab.setText("MTP paused, lookup on" if s.get("mode") == "hybrid" else "MTP paused: drafts not paying off")
        else:
            lab.setText(f"{draft_source(s['mode'])} k auto (now {s.get('k_now', 0)})")
        lab.setToolTip(_lookup_share(s))

    def _set(self, key, value):
        lab, title = self.labels[key]
        lab.setText(f"{title}: {value}")

    def reset(self, keep_chart: bool = False) -> None:
        """Before a reply. `keep_chart`: Compare's second run draws beside the first."""
        for key, _ in self.FIELDS:
            self._set(key, "–")
        if not keep_chart:
            self.chart.clear_series()
            self.bars.set_values([])
        self._last_live = -1.0
        self._fit()

    def update_stats(self, s: dict, t: float | None = None, final: bool = False):
        if t is not None and not final:  # live updates are throttled; the final one always shows
            if t - self._last_live < self.LIVE_INTERVAL_S and t >= self._last_live:
                return
            self._last_live = t
        f = lambda v, fmt: "–" if v is None else format(v, fmt)  # noqa: E731
        self._set("decode", f(s.get("decode_tps"), ".1f"))
        self._set("ttft", f(s.get("ttft_s"), ".2f") + " s" if s.get("ttft_s") else "–")
        media = f" + {s['media_s']:.2f} s reading media" if s.get("media_s") else ""  # encoding, apart
        self._set("prefill", prefill_text(s) + media)
        ar = s.get("acceptance_rate")
        self._set("accept", f"{ar * 100:.0f} %" if ar is not None else
                  "off" if s.get("mode") == "baseline" else
                  "not reported" if s.get("drafts_reported") is False and s.get("mode") == "remote" else "–")
        self._set("steplen", f(s.get("mean_accepted_length"), ".2f"))
        self._set_k(s)
        self._fit()
        if s.get("mode") in DRAFTING_MODES and (final or not self.charts.isHidden()):
            # a finished reply's bars even while hidden (one cheap update): shown again, the charts
            # show the chat on screen, not the one before
            self.bars.show_stats(s)
        if self.charts.isHidden() and t is not None:
            return  # a hidden chart costs nothing (a reply shown again draws once, below)
        name = draft_source(s.get("mode")) if s.get("mode") in DRAFTING_MODES else "baseline"
        if t is not None and s.get("decode_tps"):
            self.chart.add(name, t, s["decode_tps"], s.get("ttft_s"))
        elif t is None and final and s.get("speeds"):  # a finished reply shown again: its line, as it streamed
            self.chart.clear_series()
            for p in s["speeds"][:MAX_POINTS]:  # as stored: [seconds, tok/s] pairs, anything else skipped
                if isinstance(p, list) and len(p) == 2 and all(isinstance(v, (int, float)) for v in p):
                    self.chart.add(name, float(p[0]), float(p[1]), s.get("ttft_s"))
