"""The engine thread: one QObject living in a QThread owns the backend — the local llama.cpp
Engine, or a remote server (with, for Compare, a second one serving the model without a drafter).

The GUI talks to it only through queued signals (and `cancel()`, which only sets a
thread-safe flag in the engine). Token updates are coalesced to about 15 per second so the
window stays fluid however fast tokens arrive. Signals carry plain Python containers.
"""

from __future__ import annotations

import time
import traceback
from collections import OrderedDict
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from engine import TandemError
from engine.engine import Engine, GenerationConfig
from engine.errors import ContextOverflowError
from engine.runtime import LoadOptions
from engine.sampling import SamplingParams
from engine.strategies import AUTO, AUTO_K_MAX
from engine.template_sandbox import RenderCancelled

EMIT_INTERVAL_S = 1 / 15  # text updates per second: smooth to read, little CPU taken from decoding


def _draft_length(value) -> int | str:
    """'auto', or a fixed draft length (the window's k control sends 0 for auto)."""
    return AUTO if value in (AUTO, 0, None) else int(value)


class EngineWorker(QObject):
    loaded = Signal(dict)  # {"target", "drafter", "n_ctx", "has_mtp"}
    load_failed = Signal(str)
    load_progress = Signal(str, float)  # which model, fraction
    stream = Signal(int, list, dict)  # request id, [[text, channel, drafted], ...], live stats
    finished = Signal(int, dict)  # request id, {"answer", "thinking", "origins", "stats", "timeline", ...}
    failed = Signal(int, str, str)  # request id, kind ("overflow" | "error" | "cancelled"), message
    counted = Signal(int, int, int)  # conversation id, prompt tokens of its history, context size

    def __init__(self):
        super().__init__()
        self.engine = None  # the backend: engine.engine.Engine or engine.backends.remote.RemoteBackend
        self.baseline = None  # remote only: the same model served without a drafter, for Compare
        self._replying = False  # the window's own reply holds the engine's turn
        self._media_cache: OrderedDict = OrderedDict()  # attachment path -> decoded Media
        self._closing = False
        self._stopped_rid = 0  # requests up to this id were stopped by the user

    # -- called from the GUI thread directly: only touches thread-safe state ---------
    def cancel(self, rid: int | None = None) -> None:
        """Stop request `rid` (and any earlier one), also if it has not started yet: the
        request id is remembered, because starting a generation clears the engine's flag."""
        if rid is not None:
            self._stopped_rid = max(self._stopped_rid, rid)
        for e in (self.engine, self.baseline):
            # a local engine serving an editor right now is not the window's to stop
            if e is not None and (getattr(e, "turn", None) is None or self._replying):
                e.cancel()

    def request_close(self) -> None:
        self._closing = True
        self.cancel()

    # -- slots, run in the engine thread -------------------------------------------------
    @Slot(dict)
    def load(self, spec: dict) -> None:
        self._unload()
        if spec.get("server"):
            self._load_remote(spec)
            return
        try:
            opts = LoadOptions(
                n_ctx=int(spec.get("n_ctx", 4096)), n_threads=int(spec.get("threads", 0)),
                target_gpu_layers=int(spec.get("target_gpu_layers", 0)),
                drafter_gpu_layers=int(spec.get("drafter_gpu_layers", 0)))

            def progress(label, frac):
                self.load_progress.emit(label, frac)
                return not self._closing  # returning False aborts loading

            self.engine, media_note = self._load_local(spec, opts, progress)
        except TandemError as e:
            self.load_failed.emit(str(e))
            return
        except Exception as e:  # a failed load must leave the app usable
            self.load_failed.emit(f"{type(e).__name__}: {e}")
            return
        rt = self.engine.rt
        self.loaded.emit({
            "target": str(rt.target_info.path), "drafter": str(rt.drafter_info.path) if rt.drafter_info else "",
            "target_name": rt.target_info.path.name,
            "drafter_name": rt.drafter_info.path.name if rt.drafter_info else "",
            "n_ctx": self.engine.n_ctx, "has_mtp": self.engine.has_mtp, "mtp_reason": self.engine.mtp_reason,
            "remote": None, "engine": "llama.cpp", "can_switch_mtp": True, "has_baseline": self.engine.has_mtp,
            "vision": bool(self.engine.projector and self.engine.projector.vision),
            "audio": bool(self.engine.projector and self.engine.projector.audio),
            "mmproj": str(self.engine.projector.info.path) if self.engine.projector else "",
            "media_note": media_note,
        })

    @staticmethod
    def _load_local(spec: dict, opts, progress):
        """The engine, with the projector next to the target when there is one. A projector
        that cannot be used leaves the model usable for text, and says why."""
        from engine.media import ProjectorError
        from engine.models.pairing import find_projector

        mmproj = spec.get("mmproj")
        if mmproj is None:
            try:
                found = find_projector(spec["target"])
            except (OSError, TandemError):
                found = None
            mmproj = str(found) if found else ""
        if not mmproj:
            return Engine.load(spec["target"], spec.get("drafter") or None, opts, progress), \
                "no projector (mmproj) next to the model: pictures and audio are off"
        try:
            return Engine.load(spec["target"], spec.get("drafter") or None, opts, progress, mmproj=mmproj), ""
        except ProjectorError as e:  # the model itself is fine: it loads without pictures
            return Engine.load(spec["target"], spec.get("drafter") or None, opts, progress), \
                f"pictures and audio are off: {e}"

    def _load_remote(self, spec: dict) -> None:
        """Connect to a server (and its baseline server, when there is one)."""
        from engine.backends.remote import RemoteBackend

        try:
            self.load_progress.emit(spec["server"], 0.0)
            self.engine = RemoteBackend(spec["server"], spec.get("api_key") or None, spec.get("model") or None)
        except Exception as e:
            self.load_failed.emit(str(e) if isinstance(e, TandemError) else f"{type(e).__name__}: {e}")
            return
        e, baseline_note = self.engine, ""
        if spec.get("baseline_server"):
            try:
                self.baseline = RemoteBackend(spec["baseline_server"], spec.get("api_key") or None, e.model)
            except TandemError as err:
                baseline_note = f"the baseline server is not available: {err}"
        self.loaded.emit({
            "target": "", "drafter": "", "target_name": e.model, "drafter_name": "",
            "n_ctx": e.n_ctx or 0, "has_mtp": bool(e.has_mtp), "mtp_reason": e.mtp_reason,
            "remote": {"connection": spec.get("connection", ""), "model": e.model, "server": e.base_url},
            "engine": e.engine_name, "can_switch_mtp": e.can_switch_mtp,
            "has_baseline": self.baseline is not None or e.can_switch_mtp,
            "baseline_server": self.baseline.base_url if self.baseline else "",
            "baseline_note": baseline_note or ("" if self.baseline or e.can_switch_mtp else
                                               "Compare needs a baseline server: the same model served without "
                                               "a drafter (servers cannot switch drafting per request). Add its "
                                               "address to this connection in Settings → Connections."),
        })
    @Slot(int, list, dict)
    def generate(self, rid: int, messages: list, cfg: dict) -> None:
        if self.engine is None:
            self.failed.emit(rid, "error", "No model is loaded.")
            return
        def stopped() -> bool:
            return self._closing or rid <= self._stopped_rid

        e = self.baseline if cfg.get("backend") == "baseline" else self.engine
        if e is None:
            self.failed.emit(rid, "error", "No baseline server is connected.")
            return
        # the local engine may be serving an editor (tandem serve in the app): wait for its turn,
        # still answering Stop while waiting
        turn = getattr(e, "turn", None)
        acquired = turn is None
        while not acquired and not stopped():
            acquired = turn.acquire(timeout=0.1)
        if stopped():
            if acquired and turn is not None:
                turn.release()
            self.failed.emit(rid, "cancelled", "")
            return
        self._replying = True
        try:
            self._generate(rid, messages, cfg, e, stopped)
        finally:
            self._replying = False
            if turn is not None:
                turn.release()

    def _generate(self, rid, messages, cfg, e, stopped) -> None:
        try:
            messages = self._with_media(messages)
            sp = SamplingParams(temperature=float(cfg.get("temperature", 0.0)), top_k=int(cfg.get("top_k", 64)),
                                top_p=float(cfg.get("top_p", 0.95)), min_p=float(cfg.get("min_p", 0.0)),
                                repeat_penalty=float(cfg.get("repeat_penalty", 1.0)))
            gc = GenerationConfig(max_tokens=int(cfg.get("max_tokens", 1024)), use_mtp=bool(cfg.get("use_mtp", True)),
                                  draft_max=_draft_length(cfg.get("draft_max", "auto")), sampling=sp,
                                  seed=cfg.get("seed"))
            if cfg.get("drop_oldest"):
                messages = e.drop_oldest_turns(messages, bool(cfg.get("thinking", False)), stopped)
            if cfg.get("fresh"):
                e.reset()  # compare mode: both runs start from an empty cache
            events = e.chat(messages, gc, enable_thinking=bool(cfg.get("thinking", False)), should_stop=stopped,
                            answer_prefix=str(cfg.get("answer_prefix", "")))
            if stopped():  # a Stop that came while the prompt was prepared
                e.cancel()
        except RenderCancelled:
            self.failed.emit(rid, "cancelled", "")
            return
        except ContextOverflowError as err:
            self.failed.emit(rid, "overflow", str(err))
            return
        except (TandemError, ValueError) as err:
            self.failed.emit(rid, "error", str(err))
            return
        usual_tps = self._usual_tps()  # before this run's own steps enter the median
        answer, thinking, origins, timeline = [], [], [], []
        pending, last_emit = [], 0.0
        t0 = time.perf_counter()
        stats = None
        try:
            for ev in events:
                stats = ev.stats
                now = time.perf_counter()
                answer.append(ev.answer)
                thinking.append(ev.thinking)
                for p in ev.pieces:
                    if p.channel == "answer":
                        origins.append([p.text, p.drafted])
                    pending.append([p.text, p.channel, p.drafted])
                if ev.answer or ev.thinking:
                    timeline.append([now - t0, ev.answer, ev.thinking])
                if now - last_emit >= EMIT_INTERVAL_S or ev.finish_reason:
                    self.stream.emit(rid, pending, self._live(stats))
                    pending, last_emit = [], now
        except Exception as err:
            traceback.print_exc()
            self.failed.emit(rid, "error", f"Generation failed: {err}")
            return
        self.finished.emit(rid, {
            "answer": "".join(answer), "thinking": "".join(thinking), "origins": origins,
            "timeline": timeline, "stats": self._live(stats) if stats else {},
            "finish_reason": stats.finish_reason if stats else "error",
            "usual_tps": usual_tps,
            **(self._mtp_limit() if stats and stats.mode == "mtp" and e.kind == "local" else {}),
        })

    @Slot(int, list, bool)
    def count_tokens(self, cid: int, messages: list, thinking: bool) -> None:
        """How much of the context a conversation's history takes (for the context meter)."""
        if self.engine is None or self._closing:
            return
        try:
            n = self.engine.count_tokens(self._with_media(messages), thinking)
        except TandemError:
            return  # the meter stays as it was; sending will report the problem
        self.counted.emit(cid, -1 if n is None else n, self.engine.n_ctx or 0)  # -1: the server counts

    MEDIA_CACHE = 16  # decoded attachments kept between requests (the same picture, every turn)

    def _with_media(self, messages: list) -> list:
        """Messages whose "attachments" (files the window stored) become decoded media, here in
        the engine thread: decoding a big picture must never hold up the window."""
        from engine.media import load_media

        if not any(m.get("attachments") for m in messages):
            return messages
        cache = self._media_cache
        out = []
        for m in messages:
            files = m.get("attachments") or []
            if not files:
                out.append(m)
                continue
            media = []
            for f in files:
                key = str(f["path"])
                if key not in cache:
                    cache[key] = load_media(f["path"], f.get("name") or Path(key).name)
                    while len(cache) > self.MEDIA_CACHE:
                        cache.popitem(last=False)
                cache.move_to_end(key)
                media.append(cache[key])
            out.append({k: v for k, v in m.items() if k != "attachments"} | {"media": media})
        return out

    @staticmethod
    def _live(stats) -> dict:
        d = stats.to_dict()
        d["footer"] = stats.footer()
        return d

    def _usual_tps(self) -> float | None:
        """Plain decoding speed this machine usually reaches with this model (the median of
        recent one-token steps), to tell a busy machine from a real difference."""
        costs = getattr(self.engine, "costs", None)  # measured locally only
        one = costs.batch_cost(1) if costs is not None else None
        return 1.0 / one if one else None

    def _mtp_limit(self) -> dict:
        """Where the measured costs say MTP cannot beat plain decoding on this machine even if
        every draft were accepted: the numbers, for the window to say so once."""
        c = self.engine.costs
        ceiling = c.ceiling(AUTO_K_MAX)
        if ceiling is None or ceiling >= 1.0:
            return {}
        return {"mtp_ceiling": ceiling,
                "mtp_costs": f"one decode takes {c.batch_cost(1) * 1e3:.1f} ms, a verify of 2 tokens "
                             f"{c.batch_cost(2) * 1e3:.1f} ms and a draft step {c.draft * 1e3:.1f} ms"}

    @Slot()
    def shutdown(self) -> None:
        self._unload()

    def _unload(self) -> None:
        if self.baseline is not None:
            self.baseline.close()
            self.baseline = None
        if self.engine is not None:
            self.engine.close()
            self.engine = None
