"""Compare mode's schedule: one prompt, baseline then MTP on the same loaded target, one after
the other (both share one device), short runs repeated for a steady median; and each kind's
results. The chat session runs it; the Compare page shows it."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from PySide6.QtCore import QTimer

from engine.generation import choose_spec
from engine.stats import summed

from .replies import ActiveReply

SHORT_RUN_S = 3.0  # runs shorter than this are repeated (a median of 3 each): timer noise and a
# busy moment weigh too much in one short run
REPEATS = 2


@dataclass
class CompareRun:
    """One comparison: its prompt, the runs still to do, and each kind's results."""

    prompt: str
    messages: list[dict]
    greedy: bool
    draft_max: int | str
    queue: list = field(default_factory=lambda: [("baseline", False), ("mtp", True)])  # (which, drafting)
    runs: dict = field(default_factory=lambda: {"baseline": [], "mtp": []})  # which -> [ReplyResult]
    repeats: int = 0  # runs of each kind added because the first ones were short
    concluded: bool = False
    source: str = "MTP"  # the draft sources the drafting runs use, as the drafting switch names them

    def next_run(self) -> tuple[str, bool, bool] | None:
        """(which, drafting, first of its kind) for the next run, or None when all are done."""
        if not self.queue:
            return None
        which, drafting = self.queue.pop(0)
        return which, drafting, not self.runs[which]

    def stop(self) -> None:
        self.queue.clear()

    def interrupt(self) -> None:
        """Stopped or failed: nothing more runs, and the verdict uses what there is."""
        self.stop()
        self.concluded = True

    def record(self, which: str, result) -> None:
        """A run finished: repeat short runs once, conclude when nothing is left."""
        self.runs[which].append(result)
        b, m = self.runs["baseline"], self.runs["mtp"]
        if (not self.queue and len(m) == 1 and b
                and max(r.stats.get("decode_s") or 0.0 for r in b + m) < SHORT_RUN_S):
            self.queue = [("baseline", False), ("mtp", True)] * REPEATS
            self.repeats = REPEATS
        self.concluded = not self.queue

    @property
    def complete(self) -> bool:
        return bool(self.runs["baseline"] and self.runs["mtp"])

    def median_tps(self, which: str) -> float:
        return statistics.median(r.stats.get("decode_tps") or 0.0 for r in self.runs[which])

    def drafting_stats(self) -> dict:
        """The drafting runs' numbers together, as the verdict and the stats strip both show
        them: acceptance is accepted / drafted over every run (engine.stats defines it once),
        each position's likewise; the speed is the median run's."""
        runs = [r.stats for r in self.runs["mtp"]]
        if not runs:
            return {}
        d = dict(runs[-1])
        total = lambda key: sum(s.get(key) or 0 for s in runs)  # noqa: E731
        drafted, accepted, steps = total("draft_tokens"), total("accepted_tokens"), total("steps")
        if drafted and all(s.get("drafts_reported", True) for s in runs):
            d["acceptance_rate"] = accepted / drafted
        d["drafted_at"] = summed([s.get("drafted_at") or [] for s in runs])
        d["accepted_at"] = summed([s.get("accepted_at") or [] for s in runs])
        d["per_position_acceptance"] = [a / k if k else 0.0 for k, a in zip(d["drafted_at"], d["accepted_at"])]
        if steps:
            d["mean_accepted_length"] = (accepted + steps) / steps
            d["mean_draft_length"] = drafted / steps
        d["decode_tps"] = self.median_tps("mtp")
        return d

    @property
    def ratio(self) -> float | None:
        if not self.complete:
            return None
        bt, mt = self.median_tps("baseline"), self.median_tps("mtp")
        return mt / bt if bt and mt else None


class CompareRuns:
    """Compare's part of ChatSession (a mixin: ChatSession holds the state and the signals): it
    runs a CompareRun's schedule through the engine thread, one run after the other."""

    def start_compare(self, text: str) -> bool:
        """Baseline, then MTP, on one prompt (repeated when the runs are short)."""
        info = self.model_info
        if not text or self.busy or info is None or not info.has_baseline:
            return False
        servers = (info.baseline_server or info.remote.server, info.remote.server) if info.remote else None
        rs = self.reply_settings()
        self.compare_run = run = CompareRun(text, self.with_system([{"role": "user", "content": text}]),
                                            rs.sampling.greedy, rs.draft_max, source=info.sources_label)
        self.compare_started.emit(run, servers)
        self.stats_reset.emit(False)
        # marks the comparison as running until the first run starts
        self.active = ActiveReply(self._next_rid(), time.perf_counter(), compare="baseline")
        self.busy_changed.emit()
        # let the page switch paint first: the GUI thread shares the GIL with the engine
        # thread, and both runs must see an idle window for a fair comparison
        QTimer.singleShot(150, self._next_compare)
        return True

    def _next_compare(self) -> None:
        run = self.compare_run
        nxt = run.next_run() if run is not None else None
        if nxt is None:
            if self.active and self.active.compare:  # stopped before the first run began
                self.active = None
                self.busy_changed.emit()
                self._compare_interrupted("stopped before both runs finished")
            return
        which, drafting, first = nxt  # repeats add numbers, not lines on the chart
        self.stats_reset.emit(bool(run.runs["baseline"]))  # both runs on one chart
        self.active = ActiveReply(self._next_rid(), time.perf_counter(), compare=which, chart=first)
        self.busy_changed.emit()
        info = self.model_info
        # fresh cache for each run, so both pay the same prefill; same seed for sampling (a
        # seed fixes the draft length, so greedy runs, which need none, keep auto's);
        # servers that cannot switch drafting off run the baseline on the baseline server
        settings = self.reply_settings().but(spec=choose_spec(drafting=drafting), fresh=True,
                                             seed=None if run.greedy else 1234,
                                             on_baseline_server=bool(info.remote and not drafting
                                                                     and not info.can_switch_mtp))
        self._request(run.messages, settings)

    def _compare_finished(self, which: str, result) -> None:
        run = self.compare_run
        run.record(which, result)
        self.compare_run_done.emit(run, which)
        if run.concluded:
            if run.runs["mtp"]:  # the strip ends on the numbers the verdict gives
                self.live_stats.emit(run.drafting_stats(), None, True)
            self.compare_concluded.emit(run)
        self.busy_changed.emit()
        self._next_compare()

    def _compare_interrupted(self, message: str) -> None:
        self.compare_run.interrupt()
        self.compare_interrupted.emit(message)
