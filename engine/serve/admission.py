"""Who decodes when: the server's state (engine, limits, what it has served) and one request's
generation, in the engine scheduler's queue with the others. The scheduler decodes one
generation per sequence of the context at once (one batch per step); up to `queue_size` more
wait in its queue; beyond that a 503 with Retry-After. A client that leaves while waiting gives
up its place at once; one that leaves while generating stops its generation at the next step.
"""

from __future__ import annotations

import asyncio
import contextlib
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
    drafts: int = 0  # verify steps that had a draft
    n_tokens_max: int = 0  # the longest sequence: prompt and reply
    hosted_tools_left_out: int = 0  # hosted tools in requests' tools, not offered to the model

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
        self.drafts += stats.drafted_at[0] if stats.drafted_at else 0
        self.n_tokens_max = max(self.n_tokens_max, stats.prompt_tokens + stats.generated_tokens)


@dataclass
class ServerState:
    """What the app shows about the server: its requests as they come and go."""

    engine_getter: Callable[[], Any]  # the engine to use now (the app may load another model)
    model_name: str | Callable[[], str]  # the name clients see (a callable: the loaded model's, now)
    api_key: str | None = None
    queue_size: int = 4
    draft_max: int | str = AUTO  # for requests that do not choose
    last: dict = field(default_factory=dict)  # the latest generation: tokens and how it ended
    on_log: Callable[[dict], None] | None = None  # one entry per finished request
    active: int = 0  # generations of this server's requests, from admission to their end
    admitting: int = 0  # requests admitted whose generations do not count in `active` yet
    totals: Totals = field(default_factory=Totals)
    aliases: list[str] = field(default_factory=list)  # other names of the model, and its labels (/v1/models)
    tags: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.model_name() if callable(self.model_name) else self.model_name

    def engine(self):
        """The engine now, or a 503 when no model is loaded."""
        engine = self.engine_getter()
        if engine is None:
            raise ApiError(503, "No model is loaded", "server_error", "no_model")
        return engine

    def counts(self) -> tuple[int, int]:
        """(generating, waiting): the engine's, the app's own chats included."""
        engine = self.engine_getter()
        return engine.scheduler.counts() if engine is not None else (0, 0)

    def finished(self, api: str, all_stats: list, stream: bool, seconds: float) -> None:
        """One request done: counted for /metrics and logged (the app's server panel shows it)."""
        for s in all_stats:
            self.totals.add(api, s)
        if all_stats:
            s = all_stats[-1]
            self._log(dict(kind=api, stream=stream, tokens=sum(x.generated_tokens for x in all_stats),
                           tps=s.decode_tps, accepted=s.acceptance_rate, seconds=seconds,
                           prompt=all_stats[0].prompt_tokens, cached=all_stats[0].reused_tokens))

    def hosted_left_out(self, api: str, kinds: list[str]) -> None:
        """A request's hosted tools were left out of what the model is offered (hosted_tools.py)."""
        from .hosted_tools import left_out_note

        self.totals.hosted_tools_left_out += len(kinds)
        self._log({"kind": api, "error": left_out_note(kinds)})

    def schema_checked(self, api: str, line: str) -> None:
        """A reply decoded under a schema whose grammar left keywords unenforced, and whether it met them."""
        self._log({"kind": api, "error": line})

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
    # what the prompt cost: the part of it the prompt cache held was not read again
    prompt = f", prompt {e['prompt']:,} tokens ({e['cached']:,} cached)" if e.get("prompt") else ""
    return (f"{api}{' (stream)' if e['stream'] else ''}: {e['tokens']} tokens, {(e['tps'] or 0):.1f} tok/s"
            f"{accepted}, {e['seconds']:.1f} s{prompt}")


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


async def watched(state: ServerState, api: str, events, choices=()):
    """A reply's stream, noting in the log when its client goes away before the end. Closing it
    (the reply ended, or its client left) closes `events`, then the `choices` it streams (those
    never read too), before it returns: left to the garbage collector, a generator that a
    reference cycle keeps alive goes on pulling the engine's events to max_tokens."""
    ended = False
    try:
        async with contextlib.aclosing(events):
            async for e in events:
                yield e
        ended = True
    finally:
        for c in choices:
            await c.close()
        if not ended:
            state.note(api, "the client went away before the reply ended")


@dataclass
class Place:
    """A request's place in the queue, held from its admission until its first generation
    counts in `state.active` (in between, the request awaits: without the place, a burst of
    requests would all be admitted against the same count)."""

    state: "ServerState"
    held: bool = True

    def taken(self) -> None:
        """Its generations count now (or it ended before any did): the place is given back."""
        if self.held:
            self.held = False
            self.state.admitting -= 1


def admit(state: ServerState) -> Place:
    """A request's place in the queue, or a 503 when it is full (a request of n choices takes one
    place: its choices wait in the scheduler's queue for their sequences). Checked and taken in
    one step on the event loop."""
    if state.active + state.admitting >= state.engine().scheduler.n_slots + state.queue_size:
        waiting = f"{state.queue_size} request{'' if state.queue_size == 1 else 's'} waiting"
        raise ApiError(503, f"The server is busy ({waiting}); try again shortly",
                       "server_error", "queue_full")
    state.admitting += 1
    return Place(state)


async def generate(state: ServerState, start: Callable, gone: Callable | None = None, place: Place | None = None):
    """The engine's events for one generation. `start(engine, sink)` (run on a worker thread: it
    renders and tokenizes the prompt) submits it to the engine's scheduler, whose queue is the
    only one: the scheduler puts each event onto this event loop through `sink`, and decodes up
    to one generation per sequence of the context together (the app's own chats among them).
    `gone`: async, true once the client has disconnected; checked while no event comes (a
    long prefill, a wait for a slot), so a client that leaves frees its place at once.
    `place`: the request's place, taken already (`admit`: one for all its choices)."""
    engine = state.engine()
    if place is None:
        place = admit(state)
    loop = asyncio.get_running_loop()
    q: asyncio.Queue = asyncio.Queue()

    def arrived(item) -> None:  # on the event loop
        if getattr(item, "finish_reason", None) is not None and item.stats.prefill_tokens:
            s = item.stats
            state.last = {"tokens": s.generated_tokens, "finish": s.finish_reason, "draft_tokens": s.draft_tokens,
                          "accepted_tokens": s.accepted_tokens}
        q.put_nowait(item)

    state.active += 1
    place.taken()
    try:
        stream = await asyncio.to_thread(start, engine, lambda item: loop.call_soon_threadsafe(arrived, item))
    except BaseException:
        state.active -= 1
        raise
    try:
        while True:
            try:
                item = await asyncio.wait_for(q.get(), 0.25)
            except asyncio.TimeoutError:
                if gone is not None and await gone():
                    raise ClientGone() from None
                continue
            if isinstance(item, BaseException):
                raise item
            yield item
            if item.finish_reason is not None:
                return
    finally:
        # a client that went away, or the end: the scheduler drops the sequence after its current
        # step (or from its queue); nothing is awaited here, as a disconnect cancels this task
        stream.close()
        state.active -= 1
