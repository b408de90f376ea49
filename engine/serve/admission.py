"""Who decodes when: the server's state (engine, limits, what it has served) and one request's
generation in turn with the others. Up to `parallel` generations run at once (the engine's
scheduler decodes them together, one batch per step); up to `queue_size` more wait; beyond
that a 503 with Retry-After. A client that leaves while waiting gives up its place at once;
one that leaves while generating stops its generation at the next step.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from ..generation import AUTO
from .errors import ApiError, ClientGone

RETRY_AFTER_S = 1  # what a 503 for a full queue tells the client to wait


@dataclass
class Totals:
    """What the server has served since it started, for /metrics (Prometheus counters)."""

    requests: Counter = field(default_factory=Counter)  # by API: chat, completions, messages, responses
    prompt_tokens: int = 0  # decoded (llama-server's count): the cached part apart
    cached_tokens: int = 0
    predicted_tokens: int = 0
    prompt_seconds: float = 0.0
    predicted_seconds: float = 0.0
    drafted: Counter = field(default_factory=Counter)  # by source: mtp, lookup
    accepted: Counter = field(default_factory=Counter)

    def add(self, api: str, stats) -> None:
        self.requests[api] += 1
        self.prompt_tokens += stats.prefill_tokens
        self.cached_tokens += stats.reused_tokens
        self.predicted_tokens += stats.generated_tokens
        self.prompt_seconds += stats.prefill_s
        self.predicted_seconds += stats.decode_s
        self.drafted["mtp"] += stats.mtp_draft_tokens
        self.drafted["lookup"] += stats.lookup_draft_tokens
        self.accepted["mtp"] += stats.mtp_accepted_tokens
        self.accepted["lookup"] += stats.lookup_accepted_tokens


@dataclass
class ServerState:
    """What the app shows about the server: its requests as they come and go."""

    engine_getter: Callable[[], Any]  # the engine to use now (the app may load another model)
    model_name: str | Callable[[], str]  # the name clients see (a callable: the loaded model's, now)
    api_key: str | None = None
    queue_size: int = 4
    draft_max: int | str = AUTO  # for requests that do not choose
    waiting: int = 0
    last: dict = field(default_factory=dict)  # the latest generation: tokens and how it ended
    on_log: Callable[[dict], None] | None = None  # one entry per finished request
    parallel: int = 1  # generations at once (the engine must have as many sequences)
    running: int = 0
    totals: Totals = field(default_factory=Totals)

    def __post_init__(self):
        self.turn = asyncio.Semaphore(self.parallel)

    @property
    def name(self) -> str:
        return self.model_name() if callable(self.model_name) else self.model_name

    def engine(self):
        """The engine now, or a 503 when no model is loaded."""
        engine = self.engine_getter()
        if engine is None:
            raise ApiError(503, "No model is loaded", "server_error", "no_model")
        return engine

    def finished(self, api: str, all_stats: list, stream: bool, seconds: float) -> None:
        """One request done: counted for /metrics and logged (the app's server panel shows it)."""
        for s in all_stats:
            self.totals.add(api, s)
        if all_stats:
            s = all_stats[-1]
            self._log(dict(kind=api, stream=stream, tokens=sum(x.generated_tokens for x in all_stats),
                           tps=s.decode_tps, accepted=s.acceptance_rate, seconds=seconds))

    def note(self, api: str, what: str) -> None:
        """A request that did not end with a reply (refused, failed, or its client went away)."""
        self._log({"kind": api, "error": what})

    def _log(self, entry: dict) -> None:
        if self.on_log is not None:
            try:
                self.on_log(entry)
            except Exception:
                pass


# the API each request came through, as the log names it
API_NAMES = {"chat": "OpenAI chat", "completions": "OpenAI completions", "messages": "Anthropic messages",
             "responses": "OpenAI responses", "completion": "llama.cpp completion"}


def log_line(e: dict) -> str:
    """One request's line in `tandem serve`'s output and the app's server panel."""
    api = API_NAMES.get(e["kind"], e["kind"])
    if "error" in e:
        return f"{api}: {e['error']}"
    accepted = f", {e['accepted'] * 100:.0f} % accepted" if e.get("accepted") is not None else ""
    return (f"{api}{' (stream)' if e['stream'] else ''}: {e['tokens']} tokens, {(e['tps'] or 0):.1f} tok/s"
            f"{accepted}, {e['seconds']:.1f} s")


def api_of(path: str) -> str:
    """Which API a path belongs to, for the log."""
    if not path.startswith("/v1") and path.rstrip("/") in ("/completion", "/completions"):
        return "completion"  # llama-server's native one
    path = path.removeprefix("/v1")
    for prefix, api in (("/messages", "messages"), ("/responses", "responses"), ("/chat", "chat"),
                        ("/completions", "completions")):
        if path.startswith(prefix):
            return api
    return path.lstrip("/") or "/"


async def watched(state: ServerState, api: str, events):
    """A reply's stream, noting in the log when its client goes away before the end."""
    ended = False
    try:
        async for e in events:
            yield e
        ended = True
    finally:
        if not ended:
            state.note(api, "the client went away before the reply ended")


async def _wait_turn(state: ServerState, gone: Callable | None) -> None:
    """Wait for the engine's turn, watching the client: one that leaves while queued gives
    up its place at once (its prompt is never decoded). Raises ClientGone then."""
    acquire = asyncio.ensure_future(state.turn.acquire())
    try:
        while True:
            done, _ = await asyncio.wait({acquire}, timeout=0.25)
            if done:
                return acquire.result()
            if gone is not None and await gone():
                raise ClientGone()
    except BaseException:
        acquire.cancel()
        if acquire.done() and not acquire.cancelled():
            state.turn.release()  # acquired as we gave up: pass it on
        raise


async def generate(state: ServerState, start: Callable, gone: Callable | None = None):
    """The engine's events for one request, on a worker thread, in turn with the others.
    `start(engine, should_stop)` returns the engine's event iterator; `gone`: async, true once
    the client has disconnected."""
    if state.running + state.waiting >= state.parallel + state.queue_size:
        waiting = f"{state.queue_size} request{'' if state.queue_size == 1 else 's'} waiting"
        raise ApiError(503, f"The server is busy ({waiting}); try again shortly",
                       "server_error", "queue_full")
    state.waiting += 1
    try:
        await _wait_turn(state, gone)
    finally:
        state.waiting -= 1
    loop = asyncio.get_running_loop()
    q: asyncio.Queue = asyncio.Queue()
    done = object()
    engine = state.engine_getter()
    if engine is None:
        state.turn.release()
        raise ApiError(503, "No model is loaded", "server_error", "no_model")
    state.running += 1  # from the turn's acquiring on: a request counts once, waiting or running

    stop = threading.Event()  # this request's own: it never stops the next holder of the engine's turn

    def work():
        with engine.turn:  # shared with the app's own chats
            try:
                for ev in start(engine, stop.is_set):
                    loop.call_soon_threadsafe(q.put_nowait, ev)
                loop.call_soon_threadsafe(q.put_nowait, done)
            except Exception as e:  # reported to the client in its API's error shape
                loop.call_soon_threadsafe(q.put_nowait, e)

    fut = loop.run_in_executor(None, work)
    stats = None
    try:
        while True:
            try:  # a long prompt's prefill yields nothing for a while: watch the client meanwhile
                item = await asyncio.wait_for(q.get(), 0.25)
            except asyncio.TimeoutError:
                if gone is not None and await gone():
                    raise ClientGone() from None
                continue
            if item is done:
                return
            if isinstance(item, Exception):
                raise item
            stats = item.stats
            yield item
    finally:
        stop.set()  # a client that went away, or the end: either way this generation stops

        # Nothing is awaited here: a disconnect cancels this task, and under anyio every await in a
        # cancelled scope is cancelled again. The turn passes on when the worker thread has ended.
        def ended(_fut):
            last = stats
            while not q.empty():  # the events it made before it saw the cancel
                item = q.get_nowait()
                last = item.stats if hasattr(item, "stats") else last
            if last is not None:
                state.last = {"tokens": last.generated_tokens, "finish": last.finish_reason or "cancelled",
                              "draft_tokens": last.draft_tokens, "accepted_tokens": last.accepted_tokens}
            state.running -= 1
            state.turn.release()

        fut.add_done_callback(ended)
