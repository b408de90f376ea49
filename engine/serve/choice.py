"""One generation of a request, read as the reply assembler's Deltas: the part every API shares.
Each API module (openai_api, anthropic_api, responses_api) turns its request into the engine's
messages, GenerationConfig and ToolUse, opens a Choice, and writes the Deltas in its own shapes.

Opening awaits the first event, so what fails before any text (a full queue, a prompt longer
than the context, a bad grammar) gets its HTTP status, not a 200 with an error inside.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator, Callable

from fastapi import Request

from .admission import ServerState, api_of, generate
from . import chat_messages as cm
from . import request as rq
from .errors import ApiError, from_exception
from .openai_shapes import Timings
from ..gemma4.reply import Delta
from .reply import ChoiceReply
from .request import ChatRequest, ToolUse


async def off_loop(fn, *args):
    """A blocking engine call (tokenizing, rendering the template) on a worker thread, its
    errors in the API's shape."""
    try:
        return await asyncio.to_thread(fn, *args)
    except ApiError:
        raise
    except Exception as e:
        raise from_exception(e) from None


def chat_start(messages: list[dict], thinking: bool, tools: ToolUse) -> Callable:
    """How a chat generation starts (on a worker thread: the engine, its config, where its events go)."""
    return lambda e, cfg, sink: e.chat(messages, cfg, thinking, tools=tools.tools, sink=sink)


class Choice:
    """One choice as it streams: `deltas()` yields what each engine step added; `reply` holds the
    whole so far (text, thinking, calls, logprobs, stats, why it ended)."""

    def __init__(self, reply: ChoiceReply, gen, first):
        self.reply, self._gen, self._first = reply, gen, first
        if first is not None:  # the prompt's numbers, for what a stream says before any text
            reply.stats = first.stats

    @classmethod
    async def open(cls, state: ServerState, request: Request, kind: str, cfg, tools: ToolUse, stops: list[str],
                   start: Callable, place=None) -> "Choice":
        engine = state.engine()
        reply = ChoiceReply(kind, stops, engine.token_bytes, tools.names, tools.parallel, cfg.logprobs is not None)
        gen = generate(state, lambda e, sink: start(e, cfg, sink), request.is_disconnected, place)
        try:
            first = await gen.__anext__()
        except StopAsyncIteration:
            first = None
        except Exception as e:
            await gen.aclose()
            raise from_exception(e) from None
        return cls(reply, gen, first)

    async def deltas(self) -> AsyncIterator[Delta]:
        """The Deltas up to the end (or a stop string); the generation is closed however this ends."""
        try:
            if self._first is None:
                return
            yield self.reply.feed(self._first)
            if self.reply.done:
                return
            async for ev in self._gen:
                yield self.reply.feed(ev)
                if self.reply.done:
                    return
        finally:
            await self._gen.aclose()

    async def close(self) -> None:
        await self._gen.aclose()

    async def run(self, request: Request) -> ChoiceReply:
        """The whole choice (no streaming): stops early if the client goes away."""
        try:
            async with contextlib.aclosing(self.deltas()) as deltas:  # closed at once when the client left
                async for _ in deltas:
                    if await request.is_disconnected():
                        break
        except Exception as e:
            raise from_exception(e) from None
        return self.reply


async def open_together(opens: list) -> list[Choice]:
    """Several choices of one request opened at once (`opens`: their Choice.open coroutines), so
    that the scheduler decodes them together; if one fails, the others are closed."""
    results = await asyncio.gather(*opens, return_exceptions=True)
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        for r in results:
            if isinstance(r, Choice):
                await r.close()
        raise failed[0]
    return results


async def merged(streams: list):
    """The items of several async iterators as they come (a request's choices, streamed at once);
    the first error ends them all."""
    q: asyncio.Queue = asyncio.Queue()
    end = object()

    async def pump(it):
        try:
            async with contextlib.aclosing(it):
                async for x in it:
                    await q.put(x)
        except Exception as e:
            await q.put(e)
        finally:
            q.put_nowait(end)

    tasks = [asyncio.ensure_future(pump(it)) for it in streams]
    try:
        left = len(tasks)
        while left:
            x = await q.get()
            if x is end:
                left -= 1
            elif isinstance(x, Exception):
                raise x
            else:
                yield x
    finally:  # each stream closed before this returns (see admission.watched)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def open_chat(state: ServerState, request: Request, chat: ChatRequest, thinking: bool) -> Choice:
    """A chat request (what the Messages and Responses APIs are translated into) opened as one
    choice: its messages (pictures decoded off the event loop), tools and settings checked."""
    engine = state.engine()
    msgs = await off_loop(cm.messages, chat, engine)
    tools = rq.tool_use(chat, engine, thinking)
    cfg = rq.config(engine, chat, "chat", state.draft_max, tools.grammar)
    if chat._hosted_left_out:
        state.hosted_left_out(api_of(request.url.path), chat._hosted_left_out)
    return await Choice.open(state, request, "chat", cfg, tools, rq.stop_strings(chat),
                             chat_start(msgs, thinking, tools))


def timings(stats) -> dict:
    """llama-server's `timings` object as a dict (for the native routes' replies)."""
    return Timings.of(stats).model_dump()
