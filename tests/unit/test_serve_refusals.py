"""What `tandem serve` refuses before anything is decoded: a 400 naming the field, through
FastAPI's test client over the real app. The engine is a stand-in holding only what the checks
read (see Checked); a request that passes every check meets a scheduler with no room and is
answered 503 "busy", never decoded. What a model does with the requests that pass:
tests/e2e/test_serve.py and tests/e2e/test_tools.py."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from engine.gemma4.chat import ChatTemplate
from engine.gemma4.call_grammar import text_marker
from engine.serve import ServerState, create_app
from engine.testmodels.vocab import chat_template

from ..support.tool_schemas import ASK, TOOLS

MSGS = [{"role": "user", "content": "Hello world, this is a test"}]


@dataclass(frozen=True)
class NoRoom:
    """A scheduler without a sequence to decode on: with an empty queue, admission says busy."""

    n_slots: int = 0


@dataclass
class Checked:
    """An engine as the request checks see it: its context and vocabulary sizes, whether it has a
    drafter, the chat template the test models carry (the tiny pair's own, without tools, or
    Gemma 4's real one), and control markers written in grammars as text (as on a vocabulary
    without them as tokens)."""

    template: ChatTemplate
    has_mtp: bool = True
    n_ctx: int = 8192
    n_vocab: int = 4096
    scheduler: NoRoom = NoRoom()

    def grammar_marker(self, text: str) -> str:
        return text_marker(text)


def client(template: str = "tandem", **engine) -> TestClient:
    state = ServerState(lambda: Checked(ChatTemplate(chat_template(template)), **engine), "tiny-target", queue_size=0)
    return TestClient(create_app(state), base_url="http://127.0.0.1")


def post(c: TestClient, body: dict, path: str = "/v1/chat/completions"):
    return c.post(path, json={"model": "tiny-target", "max_tokens": 4, **body})


def refused(r, param: str) -> dict:
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error", r.text
    return err


def passed(r) -> None:
    """Past every check: the request reached admission (no room here: busy)."""
    assert r.status_code == 503 and r.json()["error"]["code"] == "queue_full", r.text


@pytest.mark.parametrize("extra, field", [
    ({"n": 10**9}, "n"), ({"n": 0}, "n"), ({"best_of": 3}, "best_of"), ({"logprobs": 3}, "logprobs"),
    ({"top_logprobs": 5, "logprobs": False}, "top_logprobs"), ({"top_logprobs": 21, "logprobs": True}, "top_logprobs"),
    ({"presence_penalty": 2.5}, "presence_penalty"), ({"frequency_penalty": -3}, "frequency_penalty"),
    ({"logit_bias": {"999999": 5}}, "logit_bias"), ({"logit_bias": {"hello": 5}}, "logit_bias"),
    ({"logit_bias": {"12": 500}}, "logit_bias"),
    # the tiny pair's own template renders no tools (Gemma 4's: the tests below)
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "no spaces allowed"}}]}, "tools"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"functions": [{"name": "f"}]}, "functions"), ({"function_call": {"name": "f"}}, "function_call"),
    ({"messages": [{"role": "function", "content": "x"}]}, "messages[0].role"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"enum": list(range(5000))}}}},
     "response_format"),
    ({"response_format": {"type": "yaml"}}, "response_format"),
])
def test_fields_that_would_change_the_answer_are_refused_by_name(extra, field):
    err = refused(post(client(), {"messages": MSGS, **extra}), field)
    assert field.split("[")[0] in err["message"]


def test_stop_strings_are_few_and_short():
    c = client()
    for stop in ([f"s{i}" for i in range(17)], ["x" * 257]):
        refused(post(c, {"messages": MSGS, "stop": stop}), "stop")
    passed(post(c, {"messages": MSGS, "stop": [f"s{i}" for i in range(16)]}))


def test_completions_refuse_the_prompts_logprobs_with_echo():
    c = client()
    refused(post(c, {"prompt": "x", "echo": True, "logprobs": 1}, "/v1/completions"), "echo")
    passed(post(c, {"prompt": "x", "echo": True}, "/v1/completions"))


def test_tandems_options_are_few_and_checked():
    c = client()
    refused(post(c, {"messages": MSGS, "tandem": {"spec": "telepathy"}}), "tandem.spec")
    # a misspelt option is refused by name, not ignored, and the refusal says which options there are
    r = post(c, {"messages": MSGS, "tandem": {"specs": "lookup"}})
    assert r.status_code == 400 and "tandem.specs" in r.json()["error"]["message"], r.text
    assert "draft_max" in r.json()["error"]["message"]
    refused(post(c, {"messages": MSGS, "tandem": {"spec": "lookup", "mtp": False}}), "tandem.spec")  # as the CLI
    passed(post(c, {"messages": MSGS, "tandem": {"spec": "lookup", "draft_max": 3}}))


def test_mtp_by_name_without_a_drafter_is_a_400_saying_so():
    """Not a silent baseline: the field is named, and lookup (every model has it) passes."""
    c = client(has_mtp=False)
    err = refused(post(c, {"messages": MSGS, "tandem": {"spec": "mtp"}}), "tandem.spec")
    assert "drafter" in err["message"]
    passed(post(c, {"messages": MSGS, "tandem": {"spec": "lookup"}}))


@pytest.mark.parametrize("extra, param", [
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "a:b": {"type": "string"}}}}}], "tool_choice": "required"}, "tools"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format"),
    ({"messages": ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{not json"}}]}]},
     "messages[1].tool_calls[0]"),
])
def test_bad_tool_requests_get_a_400_naming_the_field(extra, param):
    refused(post(client("gemma4"), {"messages": ASK, **extra}), param)


@pytest.mark.parametrize("extra, param", [
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "frob"}}}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "a": {"$ref": "#/$defs/missing"}}}}}]}, "tools"),
    ({"messages": ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}]}, "messages[1].tool_calls[0].id"),
    ({"messages": ASK + [{"role": "tool", "content": "sunny"}]}, "messages[1].tool_call_id"),
    ({"messages": ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "sunny"}]}, "messages[2].tool_call_id"),
])
def test_tool_declarations_and_history_that_cannot_be_used_name_the_field(extra, param):
    err = refused(post(client("gemma4"), {"messages": ASK, "tool_choice": "required", "tools": TOOLS, **extra}), param)
    assert "template failed" not in err["message"]


def test_a_forced_call_refuses_what_it_cannot_enforce_naming_the_keyword_and_where():
    tool = {"type": "function", "function": {"name": "tag", "parameters": {
        "type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"},
                                                  "uniqueItems": True}}}}}
    c = client("gemma4")
    err = refused(post(c, {"messages": ASK, "tools": [tool], "tool_choice": "required"}), "tool_choice")
    assert "'uniqueItems' (at /properties/tags)" in err["message"]
    passed(post(c, {"messages": ASK, "tools": [tool]}))  # declared without forcing: the model calls it freely
