"""A client that goes away stops its generation at once, however the reply was being written.

The server's replies are chains of async generators (the response's stream, each API's events,
the merged choices, the reply's deltas, the engine's events). Closing the outer one must close
every one inside before it returns: left to the garbage collector, an inner generator that a
reference cycle keeps alive goes on pulling the engine's events. Found under two test workers:
a streamed request whose client left after its first chunk ran its 8000 tokens to the end.

Here each inner generator is also held by the test, as such a cycle would hold it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from engine.serve.admission import watched
from engine.serve.choice import Choice, merged


class Log:
    def __init__(self):
        self.closed = []
        self.notes = []

    def note(self, api, what):  # ServerState.note's stand-in
        self.notes.append(what)

    def endless(self, name):
        async def gen():
            try:
                while True:
                    await asyncio.sleep(0)
                    yield SimpleNamespace(name=name, stats=None)
            finally:
                self.closed.append(name)
        return gen()


def test_closing_a_response_stream_closes_the_events_inside_it():
    log = Log()

    async def main():
        inner = log.endless("events")
        outer = watched(log, "chat", inner)
        assert (await outer.__anext__()).name == "events"
        await outer.aclose()  # the response ended early: its client went away
        assert log.closed == ["events"], "closed only by asyncio.run's shutdown, not by the stream"
        return inner

    asyncio.run(main())
    assert log.notes == ["the client went away before the reply ended"]


def test_closing_merged_choices_closes_each_before_it_returns():
    log = Log()

    async def main():
        inners = [log.endless("a"), log.endless("b")]
        m = merged(inners)
        assert (await m.__anext__()).name in ("a", "b")
        await m.aclose()
        assert sorted(log.closed) == ["a", "b"]
        return inners

    asyncio.run(main())


class Reply:  # ChoiceReply's stand-in: takes each event, never done by itself
    done = False
    stats = None

    def feed(self, ev):
        return ev


class Gone:  # a Request whose client has left
    async def is_disconnected(self):
        return True


def test_a_whole_reply_whose_client_left_closes_its_generation():
    log = Log()

    async def main():
        gen = log.endless("engine")
        choice = Choice(Reply(), gen, await gen.__anext__())
        await choice.run(Gone())
        assert log.closed == ["engine"]
        return gen

    asyncio.run(main())


def test_a_stream_closes_the_choices_it_was_given_even_those_never_read():
    log = Log()

    async def main():
        gens = [log.endless("read"), log.endless("unread")]
        choices = [Choice(Reply(), g, await g.__anext__()) for g in gens]

        async def events():
            async for d in choices[0].deltas():
                yield d
        outer = watched(log, "chat", events(), choices)
        await outer.__anext__()
        await outer.aclose()
        assert sorted(log.closed) == ["read", "unread"]
        return gens

    asyncio.run(main())
