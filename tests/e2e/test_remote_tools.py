"""Tools through the remote backend against a real llama-server (the tiny pair over Gemma 4's
real vocabulary and chat template, whose calls llama-server's Gemma 4 parser reads): a forced
call comes back as a checked ToolCall, the call and its result go back in OpenAI's shape and
the model answers after them; a call cut by the token limit, and a server that refuses tools,
are errors in words. The checks of streamed calls on their own, with the SDK's delta types."""

from __future__ import annotations

import pytest
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall, ChoiceDeltaToolCallFunction

from engine import TandemError
from engine.backends.remote import RemoteBackend, RemoteError
from engine.backends.remote_tools import StreamedCalls, openai_message, tool_fields
from engine.local.engine import GenerationConfig
from engine.sampling import SamplingParams

from ..support.llamaserver import LlamaServer, steering_flags

# llama-server without Jinja: its built-in Gemma template for plain chat, no tool calling
NO_JINJA = ("--no-jinja", "--chat-template", "gemma")
TODAY = {"type": "function", "function": {"name": "today", "description": "Today's date.",
                                          "parameters": {"type": "object", "properties": {}}}}
ADD = {"type": "function", "function": {"name": "add", "description": "Add two numbers.",
                                        "parameters": {"type": "object", "required": ["a", "b"],
                                                       "properties": {"a": {"type": "integer"},
                                                                      "b": {"type": "integer"}}}}}
ASK = [{"role": "user", "content": "What day is it?"}]
GREEDY = SamplingParams(temperature=0.0)


def _run(backend, messages, max_tokens=24, **kw):
    text, last = [], None
    for ev in backend.chat(messages, GenerationConfig(max_tokens=max_tokens, sampling=GREEDY, seed=1), **kw):
        text.append(ev.answer)
        last = ev
    return "".join(text), last


def test_a_forced_call_and_its_result_go_through_llama_server(llama_server_bin, real_vocab, tmp_path):
    srv = LlamaServer(llama_server_bin, real_vocab["target"], log=tmp_path / "srv.log",
                      extra=steering_flags(real_vocab["target"]))
    b = RemoteBackend(srv.url)
    try:
        _, last = _run(b, ASK, tools=[TODAY, ADD], force_tool="today")
        assert last.finish_reason == "tool_calls" and [(c.name, c.arguments) for c in last.calls] == [("today", {})]
        call = last.calls[0]
        assert call.id  # the server's id, kept for the result
        # the answer's call and the tool's result, as the chat keeps them, go back in OpenAI's shape
        followup = ASK + [{"role": "assistant", "content": "", "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": "today", "arguments": {}}}]},
            {"role": "tool", "content": "2026-12-02", "tool_call_id": call.id, "name": "today"}]
        text, last = _run(b, followup, tools=[TODAY, ADD])
        assert text and last.calls == [] and last.finish_reason in ("stop", "length")
        assert last.stats.prompt_tokens > 20
    finally:
        b.close()
        srv.stop()


def test_a_call_cut_by_the_token_limit_and_a_server_without_jinja_are_errors_in_words(
        llama_server_bin, real_vocab, tmp_path):
    srv = LlamaServer(llama_server_bin, real_vocab["target"], log=tmp_path / "srv.log")
    b = RemoteBackend(srv.url)
    try:  # random weights write the arguments' keys on and on: the budget ends inside the call
        with pytest.raises(TandemError, match="token limit .* call of add: the call's arguments are incomplete"):
            _run(b, ASK, max_tokens=16, tools=[TODAY, ADD], force_tool="add")
    finally:
        b.close()
        srv.stop()
    srv = LlamaServer(llama_server_bin, real_vocab["target"], log=tmp_path / "no-jinja.log", extra=NO_JINJA)
    b = RemoteBackend(srv.url)
    try:
        with pytest.raises(RemoteError, match="tools param requires --jinja.*started with --jinja.*Tools off"):
            _run(b, ASK, tools=[TODAY])
        # asked for by name, the hint names the forced call (a grammar the server may fail to build)
        with pytest.raises(RemoteError, match="asked for a call of today by name.*without asking for the tool"):
            _run(b, ASK, tools=[TODAY], force_tool="today")
        text, last = _run(b, ASK)  # the same server without tools answers
        assert text and last.finish_reason in ("stop", "length")
    finally:
        b.close()
        srv.stop()


def _delta(index, id=None, name=None, arguments=None):
    return ChoiceDeltaToolCall(index=index, id=id, type="function" if id else None,
                               function=ChoiceDeltaToolCallFunction(name=name, arguments=arguments))


def test_streamed_calls_are_assembled_and_checked():
    s = StreamedCalls(["add", "today"], "vllm at http://box/v1")
    s.feed([_delta(0, "call_1", "add", '{"a": 1,')])
    s.feed([_delta(0, arguments=' "b": 2}'), _delta(1, "call_2", "today", "")])
    calls = s.calls("tool_calls")
    assert [(c.id, c.name, c.arguments) for c in calls] == [("call_1", "add", {"a": 1, "b": 2}),
                                                             ("call_2", "today", {})]

    bad = StreamedCalls(["add"], "vllm at http://box/v1")
    bad.feed([_delta(0, "c", "add", "[1, 2]")])
    with pytest.raises(TandemError, match="arguments are not a JSON object, so it was not run"):
        bad.calls("tool_calls")
    unknown = StreamedCalls(["add"], "vllm at http://box/v1")
    unknown.feed([_delta(0, "c", "rm_rf", "{}")])
    with pytest.raises(TandemError, match="a tool it was not offered: 'rm_rf'"):
        unknown.calls("stop")
    odd_id = StreamedCalls(["add"], "x")
    odd_id.feed([_delta(0, "x" * 500, "add", "{}")])
    assert odd_id.calls("stop")[0].id.startswith("call_")  # an id no client could echo back: one of ours


def test_the_request_says_which_tool_and_the_chat_goes_in_openai_shape():
    assert tool_fields([TODAY, ADD], "add", "vllm")["tool_choice"] == {"type": "function", "function": {"name": "add"}}
    # llama-server reads tool_choice as a string only: the one tool, required
    assert tool_fields([TODAY, ADD], "add", "llama-server") == {"tools": [ADD], "tool_choice": "required",
                                                                 "parallel_tool_calls": False}
    assert tool_fields([TODAY], "", "vllm") == {"tools": [TODAY]} and tool_fields(None, "", "vllm") == {}
    with pytest.raises(TandemError, match="not among the tools offered"):
        tool_fields([TODAY], "add", "vllm")
    m = openai_message({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 1}}}]})
    assert m["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'
    assert openai_message({"role": "tool", "content": "3", "tool_call_id": "c1", "name": "add"}) == \
        {"role": "tool", "content": "3", "tool_call_id": "c1", "name": "add"}


def test_a_forced_call_through_tandem_serve_uses_the_named_tool_choice(tools_server):
    """`tandem serve` reads OpenAI's named tool_choice and forces the call with the tool's schema."""
    b = RemoteBackend(tools_server.url)
    try:
        assert b.engine_name == "tandem"
        _, last = _run(b, ASK, max_tokens=40, tools=[TODAY, ADD], force_tool="today")
        assert last.finish_reason == "tool_calls" and [(c.name, c.arguments) for c in last.calls] == [("today", {})]
    finally:
        b.close()
