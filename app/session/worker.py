"""The engine thread: one QObject living in a QThread owns the backend — the local llama.cpp
Engine, or a remote server (with, for Compare, a second one serving the model without a drafter).

The GUI talks to it only through queued signals carrying the records of `chat_types` (and
`cancel()`, which only records, thread-safely, which requests are stopped). Token updates are
coalesced to about 15 per second so the window stays fluid however fast tokens arrive.
"""

from __future__ import annotations

import time
import traceback
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from engine import TandemError
from engine.local.engine import Engine
from engine.errors import ContextOverflowError
from engine.generation import DEFAULT_PARALLEL, GenerationConfig
from engine.strategies import AUTO_K_MAX
from engine.gemma4.reply import ReplyAssembler
from engine.gemma4.calls import CALL_OPEN
from engine.gemma4.template_sandbox import RenderCancelled
from engine.gemma4.call_grammar import calls_grammar

from app.session.context_parts import count_parts
from app.core.chat_types import LoadRequest, ModelInfo, RemoteInfo, ReplyRequest, ReplyResult

EMIT_INTERVAL_S = 1 / 15  # text updates per second: smooth to read, little CPU taken from decoding


def _first_chars(origins: list, n: int) -> list:
    """The [text, origin] pieces of an answer's first n characters."""
    out = []
    for piece, origin in origins:
        if n <= 0:
            break
        out.append([piece[:n], origin])
        n -= len(piece)
    return out


def call_outcome_note(reply, s, text: str, origins: list, live: dict) -> tuple[str, list]:
    """A call the token limit cut open is not shown as its raw markup but said in words; a
    tool asked for by name and not called (a server that ignored it) is said too."""
    note = ""
    if reply.cut_call and CALL_OPEN in text:
        keep = text.rindex(CALL_OPEN)
        text, origins = text[:keep].rstrip(), _first_chars(origins, len(text[:keep].rstrip()))
        name = s.force_tool or ("" if reply.cut_call == "?" else reply.cut_call)
        note = (f"the call of {name}" if name else "a tool call") + \
            " was cut off by the token limit (Max reply tokens), so it was not run"
    elif s.force_tool and s.tools and not reply.calls and live.get("finish_reason") != "cancelled":
        note = f"the answer did not call {s.force_tool}, which was asked for"
    if note and live:
        live["footer"] = f"{live.get('footer', '')} · {note}"
    return text, origins


class EngineWorker(QObject):
    loaded = Signal(object)  # ModelInfo
    load_failed = Signal(str, bool)  # the engine's message; whether the model loaded before is still loaded
    load_progress = Signal(str, float)  # which model, fraction
    stream = Signal(int, list, dict)  # request id, [[text, channel, drafted], ...], live stats
    finished = Signal(int, object)  # request id, ReplyResult
    failed = Signal(int, str, str)  # request id, kind ("overflow" | "error" | "cancelled" | "no_model"), message
    # conversation id, its prompt's tokens (-1: the server counts), context size, ContextParts or None
    counted = Signal(int, int, int, object)
    texts_counted = Signal(int, list, bool)  # request tag, tokens of each text, exact (False: estimated)

    def __init__(self):
        super().__init__()
        self.engine = None  # the backend: engine.local.engine.Engine or engine.backends.remote.RemoteBackend
        self.baseline = None  # remote only: the same model served without a drafter, for Compare
        self._media_cache: OrderedDict = OrderedDict()  # attachment path -> decoded Media
        self._closing = False
        self._stopped_rid = 0  # requests up to this id were stopped by the user
        self._info: ModelInfo | None = None

    # -- called from the GUI thread directly: only touches thread-safe state ---------
    def cancel(self, rid: int) -> None:
        """Stop request `rid` (and any earlier one), also if it has not started yet. Only the
        window's own requests see it: an editor's request on the same engine goes on."""
        self._stopped_rid = max(self._stopped_rid, rid)

    def request_close(self) -> None:
        self._closing = True
        for e in (self.engine, self.baseline):
            if e is not None:
                e.cancel()  # whatever runs, also an editor's request: the models are going

    # -- slots, run in the engine thread -------------------------------------------------
    @Slot(object)
    def load(self, req: LoadRequest) -> None:
        if not req.remote:
            why = self._cannot_load(req)
            if why:  # refused before anything is unloaded: what was loaded stays loaded
                self.load_failed.emit(why, self.engine is not None)
                return
        self._unload()
        try:
            self._info = self._load_remote(req) if req.remote else self._load_local(req)
        except TandemError as e:
            self.load_failed.emit(str(e), False)
            return
        except Exception as e:  # a failed load must leave the app usable
            self.load_failed.emit(f"{type(e).__name__}: {e}", False)
            return
        self.loaded.emit(self._info)

    @staticmethod
    def _cannot_load(req: LoadRequest) -> str:
        """Why these files cannot be loaded, found without loading them (a file gone, not a
        GGUF), or ""."""
        from engine.models.gguf_info import read_gguf_info

        for path in (req.target, req.drafter):
            if not path:
                continue
            try:
                read_gguf_info(path)
            except (OSError, TandemError) as e:
                return str(e) if isinstance(e, TandemError) else f"{path}: {e.strerror or e}"
        return ""

    def _load_local(self, req: LoadRequest) -> ModelInfo:
        # a sequence for the window's chat and one per request the app's server decodes together
        opts = replace(req.options, n_seq=DEFAULT_PARALLEL + 1)

        def progress(label, frac):
            self.load_progress.emit(label, frac)
            return not self._closing  # returning False aborts loading

        self.engine, media_note = self._load_pair(req, opts, progress)
        self.engine.warm_up()  # the first message does not pay for the template's compiling
        e, rt = self.engine, self.engine.rt
        p = e.projector
        return ModelInfo(
            target=str(rt.target_info.path), drafter=str(rt.drafter_info.path) if rt.drafter_info else "",
            target_name=rt.target_info.path.name, drafter_name=rt.drafter_info.path.name if rt.drafter_info else "",
            n_ctx=e.n_ctx, has_mtp=e.has_mtp, mtp_reason=e.mtp_reason, sources=e.spec_sources,
            vision=bool(p and p.vision), audio=bool(p and p.audio), mmproj=str(p.info.path) if p else "",
            media_note=media_note, tools=bool(e.template is not None and e.template.supports_tools),
            placement=e.placement.note)

    @staticmethod
    def _load_pair(req: LoadRequest, opts, progress):
        """The engine, with the projector next to the target when there is one. A projector
        that cannot be used leaves the model usable for text, and says why."""
        from engine.local.media import ProjectorError
        from engine.models.pairing import find_projector

        mmproj = req.mmproj
        if mmproj is None:
            try:
                found = find_projector(req.target)
            except (OSError, TandemError):
                found = None
            mmproj = str(found) if found else ""
        drafter = req.drafter or None
        if not mmproj:
            return Engine.load(req.target, drafter, opts, progress), \
                "no projector (mmproj) next to the model: pictures and audio are off"
        try:
            return Engine.load(req.target, drafter, opts, progress, mmproj=mmproj), ""
        except ProjectorError as e:  # the model itself is fine: it loads without pictures
            return Engine.load(req.target, drafter, opts, progress), f"pictures and audio are off: {e}"

    def _load_remote(self, req: LoadRequest) -> ModelInfo:
        """Connect to a server (and its baseline server, when there is one)."""
        from engine.backends.remote import RemoteBackend

        self.load_progress.emit(req.server, 0.0)
        self.engine = e = RemoteBackend(req.server, req.api_key or None, req.model or None)
        baseline_error = ""
        if req.baseline_server:
            try:
                self.baseline = RemoteBackend(req.baseline_server, req.api_key or None, e.model)
            except TandemError as err:
                baseline_error = str(err)
        return ModelInfo(
            target="", drafter="", target_name=e.model, drafter_name="", n_ctx=e.n_ctx or 0,
            has_mtp=bool(e.has_mtp), mtp_reason=e.mtp_reason, engine=e.engine_name, can_switch_mtp=e.can_switch_mtp,
            remote=RemoteInfo(req.connection, e.model, e.base_url),
            tools=True,  # llama-server (--jinja), vLLM and tandem serve call tools; one that cannot says so when asked
            baseline_server=self.baseline.base_url if self.baseline else "", baseline_error=baseline_error)

    @Slot(object)
    def generate(self, req: ReplyRequest) -> None:
        rid = req.rid

        def stopped() -> bool:
            return self._closing or rid <= self._stopped_rid

        e = self.baseline if req.settings.on_baseline_server else self.engine
        if e is None:
            self.failed.emit(rid, "no_model", "")
            return
        if stopped():  # Stop pressed before this request was picked up
            self.failed.emit(rid, "cancelled", "")
            return
        # the local engine may be serving an editor too (tandem serve in the app): its scheduler
        # decodes this reply beside their requests, or queues it (Stop still works while queued)
        self._generate(req, e, stopped)

    def _start(self, req: ReplyRequest, e, stopped, calls_done: list):
        """The request's events from the engine, or None when it failed to start (said through `failed`)."""
        rid, s = req.rid, req.settings
        try:
            messages = self._with_media(req.messages)
            gc = GenerationConfig(max_tokens=s.max_tokens, spec=s.spec, draft_max=s.draft_max, sampling=s.sampling,
                                  seed=s.seed, grammar=self._tool_grammar(s, e))
            if s.drop_oldest:
                messages = e.drop_oldest_turns(messages, s.thinking, stopped, list(s.tools) or None)
            if s.fresh:
                e.reset()  # compare mode: both runs start from an empty cache

            def stop() -> bool:
                return stopped() or bool(calls_done)

            tools = {"tools": list(s.tools)} if s.tools else {}
            if s.tools and s.force_tool and e.kind == "remote":  # a server forces the call itself (tool_choice)
                tools["force_tool"] = s.force_tool
            return e.chat(messages, gc, enable_thinking=s.thinking, should_stop=stop,
                          answer_prefix=s.answer_prefix, **tools)
        except RenderCancelled:
            self.failed.emit(rid, "cancelled", "")
            return None
        except ContextOverflowError as err:
            self.failed.emit(rid, "overflow", str(err))
            return None
        except (TandemError, ValueError) as err:
            self.failed.emit(rid, "error", str(err))
            return None

    def _generate(self, req: ReplyRequest, e, stopped) -> None:
        rid, s = req.rid, req.settings
        calls_done = []  # a call was written and Gemma went on to the tool's answer: stop there
        events = self._start(req, e, stopped, calls_done)
        if events is None:
            return
        usual_tps = self._usual_tps()  # before this run's own steps enter the median
        # the engine's reply assembler reads calls, thinking and each piece's source, as the server does
        reply = ReplyAssembler([t["function"]["name"] for t in s.tools] if s.tools else None)
        answer, thinking, timeline = [], [], []
        pending, last_emit = [], 0.0
        t0 = time.perf_counter()
        stats = None
        try:
            for ev in events:
                stats = ev.stats
                now = time.perf_counter()
                d = reply.feed(ev)
                if reply.tool_turn:
                    calls_done.append(True)
                thinking.append(ev.thinking)
                pending += d.pieces
                answer.append(d.text)
                if answer[-1] or ev.thinking:
                    timeline.append([now - t0, answer[-1], ev.thinking])
                if now - last_emit >= EMIT_INTERVAL_S or ev.finish_reason:
                    self.stream.emit(rid, pending, self._live(stats))
                    pending, last_emit = [], now
        except Exception as err:
            if not isinstance(err, TandemError):
                traceback.print_exc()
            if pending:  # the text that came before the error is the user's
                self.stream.emit(rid, pending, self._live(stats) if stats else {})
            self.failed.emit(rid, "error", str(err))
            return
        calls, origins, text = reply.calls, reply.origins, "".join(answer)
        live = self._live(stats) if stats else {}
        if calls and live.get("finish_reason") in ("stop", "cancelled") and not stopped():
            live["finish_reason"] = "tool_calls"  # it stopped to let the tool answer
        text, origins = call_outcome_note(reply, s, text, origins, live)
        result = ReplyResult(text, "".join(thinking), origins, timeline, live, usual_tps,
                             tool_calls=[{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls])
        if stats and stats.mode in ("mtp", "hybrid") and e.kind == "local":
            self._mtp_limit(result)
        self.finished.emit(rid, result)

    @Slot(int, list, bool, list, int)
    def count_tokens(self, cid: int, messages: list, thinking: bool, tools: list, rid: int) -> None:
        """How much of the context a conversation's prompt takes, tool declarations and files
        included, and what takes it (for the context meter). `rid`: the reply this prompt is
        for (0: none), whose Stop also stops the count (a slow template must not hold it up)."""
        e = self.engine
        if e is None or self._closing:
            return

        def stopped() -> bool:
            return self._closing or 0 < rid <= self._stopped_rid

        try:
            parts = count_parts(lambda msgs, t: e.count_tokens(self._with_media(msgs), thinking, t, stopped),
                                messages, tools or None)
        except (TandemError, ValueError, RenderCancelled):
            return  # the meter stays as it was; sending will report the problem
        self.counted.emit(cid, -1 if parts is None else parts.total, e.n_ctx or 0, parts)

    @staticmethod
    def _tool_grammar(s, e) -> str | None:
        """The user asked for a tool: the reply is one call of it, its arguments as its schema says
        (Gemma's markers matched as the engine's vocabulary has them)."""
        if not (s.force_tool and s.tools) or e.kind != "local":  # a server is asked through tool_choice
            return None
        # a string without a maxLength gets at most half the reply's tokens in characters, so the
        # call closes within max_tokens (a test model wrote 900 tokens of one string, and was cut)
        return calls_grammar(list(s.tools), s.force_tool, parallel=False, thinking=s.thinking,
                             marker=e.grammar_marker, max_string=max(16, s.max_tokens // 2))

    @Slot(int, list)
    def count_texts(self, tag: int, texts: list) -> None:
        """Tokens of each text (an attached file), by the loaded model's tokenizer; a server
        that cannot tokenize gets an estimate, marked as one."""
        from app.core.text_files import estimate_tokens

        e = self.engine
        counts, exact = [], e is not None and getattr(e, "kind", "") == "local"
        for t in texts:
            if exact and not self._closing:
                counts.append(len(e.tokenize(t, add_special=False, parse_special=False)))
            else:
                counts.append(estimate_tokens(t))
        self.texts_counted.emit(tag, counts, exact)

    MEDIA_CACHE = 16  # decoded attachments kept between requests (the same picture, every turn)

    def _with_media(self, messages: list) -> list:
        """Messages whose "attachments" (files the window stored) become decoded media, here in
        the engine thread: decoding a big picture must never hold up the window. Text files go
        into the message's text, each as a fenced block with its name and language."""
        from engine.local.media import load_media

        from app.core.text_files import decode_text, with_files

        if not any(m.get("attachments") for m in messages):
            return messages
        cache = self._media_cache
        out = []
        for m in messages:
            files = m.get("attachments") or []
            if not files:
                out.append(m)
                continue
            media, texts = [], []
            for f in files:
                key, name = str(f["path"]), f.get("name") or Path(str(f["path"])).name
                if key not in cache:
                    try:
                        cache[key] = decode_text(Path(key).read_bytes()) if f.get("kind") == "text" \
                            else load_media(key, name)
                    except (OSError, ValueError) as err:
                        raise TandemError(f"{name}: the attached file cannot be read ({err})") from None
                    while len(cache) > self.MEDIA_CACHE:
                        cache.popitem(last=False)
                cache.move_to_end(key)
                (texts.append((name, cache[key])) if f.get("kind") == "text" else media.append(cache[key]))
            d = {k: v for k, v in m.items() if k != "attachments"}
            if texts:
                d["content"] = with_files(d.get("content") or "", texts)
            out.append(d | ({"media": media} if media else {}))
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

    def _mtp_limit(self, result: ReplyResult) -> None:
        """Where the measured costs say MTP cannot beat plain decoding on this machine even if
        every draft were accepted: the ceiling and the costs, for the window to say so once."""
        c = self.engine.costs
        ceiling = c.ceiling(AUTO_K_MAX)
        if ceiling is not None and ceiling < 1.0:
            result.mtp_ceiling = ceiling
            result.mtp_costs_ms = (c.batch_cost(1) * 1e3, c.batch_cost(2) * 1e3, c.draft * 1e3)

    @Slot()
    def shutdown(self) -> None:
        self._unload()

    def _unload(self) -> None:
        self._info = None
        if self.baseline is not None:
            self.baseline.close()
            self.baseline = None
        if self.engine is not None:
            self.engine.close()
            self.engine = None
