"""Tool calls, log-probabilities, penalties, logit_bias and n through a real `tandem serve`
(the tiny pair with Gemma 4's real chat template), with the openai SDK and the OpenAI Agents
SDK as the clients (the call syntax piece by piece: tests/unit/test_tool_calls.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Literal

import jsonschema
import openai
import pytest

from ..support.tool_schemas import ASK, TOOLS, TRIP


@pytest.fixture(scope="module")
def server(tools_server):
    return tools_server


def client(server):
    return openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=120)


def model(server) -> str:
    return client(server).models.list().data[0].id


def _args(call, schema) -> dict:
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, schema)
    return args


# ---- through the server ---------------------------------------------------------------------
@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_forced_call_has_schema_valid_arguments_streamed_or_not_and_mtp_off_gives_the_same(server, choice):
    c = client(server)
    kw = dict(model=model(server), messages=ASK, tools=TOOLS, tool_choice=choice, max_tokens=120,
              parallel_tool_calls=False)
    r = c.chat.completions.create(**kw)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and len(ch.message.tool_calls) == 1, ch
    call = ch.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_")
    schema = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}[call.function.name]
    args = _args(call, schema)
    if isinstance(choice, dict):
        assert call.function.name == "get_weather" and args["unit"] in ("celsius", "fahrenheit")
    base = c.chat.completions.create(**kw, extra_body={"tandem": {"mtp": False}}).choices[0].message.tool_calls[0]
    assert (base.function.name, base.function.arguments) == (call.function.name, call.function.arguments)
    assert r.model_extra["timings"].get("draft_n", 0) > 0  # it drafted, and still the same call

    # streamed: the openai SDK's own accumulation of tool-call deltas gives the same call
    with c.chat.completions.stream(**kw) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion().choices[0]
    assert final.finish_reason == "tool_calls"
    got = final.message.tool_calls[0]
    assert (got.function.name, got.function.arguments) == (call.function.name, call.function.arguments)


def test_streamed_tool_call_deltas_name_the_call_once_then_its_arguments(server):
    chunks = list(client(server).chat.completions.create(
        model=model(server), messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=120,
        parallel_tool_calls=False, stream=True))
    parts = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
    assert parts[0].index == 0 and parts[0].id and parts[0].function.name
    assert all(p.id is None and p.function.name is None for p in parts[1:])
    json.loads("".join(p.function.arguments or "" for p in parts))
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_the_tool_result_goes_back_through_the_template_and_the_agent_gets_an_answer(server, api):
    """The OpenAI Agents SDK runs the whole round, through chat completions and through the
    Responses API (its default): its tool is called with valid arguments, the result goes back
    (a role: tool message, a function_call_output item), and the model's next turn is its answer."""
    from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, RunConfig, Runner,
                        function_tool, set_tracing_disabled)

    set_tracing_disabled(True)
    seen = []

    @function_tool
    def get_weather(city: Literal["Paris", "Oslo"], days: int) -> str:
        """The weather of a city for some days."""
        seen.append((city, days))
        return f"sunny in {city} for {days} days"

    kind = OpenAIChatCompletionsModel if api == "chat" else OpenAIResponsesModel
    llm = kind(model=model(server), openai_client=openai.AsyncOpenAI(base_url=server.url, api_key="none",
                                                                    max_retries=0, timeout=120))
    # the synthetic model's answer never ends by itself, and to the SDK a response cut at
    # max_output_tokens is an error (status incomplete, as OpenAI's): stop strings
    # (llama-server's extension to the Responses API) end it where its walk through the
    # vocabulary passes
    stops = {"extra_body": {"stop": ["\n", "0", "!", "a", "e", "5", "x"]}} if api == "responses" else {}
    agent = Agent(name="weather", instructions="Answer with the tool.", tools=[get_weather], model=llm,
                  model_settings=ModelSettings(tool_choice="required", max_tokens=120, temperature=0.0, **stops))
    result = asyncio.run(Runner.run(agent, "Weather in Paris for 3 days?", max_turns=4,
                                    run_config=RunConfig(tracing_disabled=True)))
    assert len(seen) == 1 and seen[0][0] in ("Paris", "Oslo"), result.new_items
    assert isinstance(seen[0][0], str) and isinstance(seen[0][1], int)
    kinds = [item.type for item in result.new_items]
    assert kinds[:2] == ["tool_call_item", "tool_call_output_item"] and kinds[-1] == "message_output_item"
    assert isinstance(result.final_output, str)


def test_auto_returns_what_the_model_wrote_and_none_renders_no_tools(server):
    c = client(server)
    auto = c.chat.completions.create(model=model(server), messages=ASK, tools=TOOLS, max_tokens=16)
    assert auto.choices[0].finish_reason in ("stop", "length", "tool_calls")
    none = c.chat.completions.create(model=model(server), messages=ASK, tools=TOOLS, tool_choice="none",
                                     max_tokens=4)
    plain = c.chat.completions.create(model=model(server), messages=ASK, max_tokens=4)
    assert none.usage.prompt_tokens == plain.usage.prompt_tokens < auto.usage.prompt_tokens


def test_logprobs_top_entry_is_the_greedy_token_streamed_and_not_chat_and_completions(server):
    c = client(server)
    r = c.chat.completions.create(model=model(server), messages=ASK, max_tokens=8, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    # one entry per token of the content (control tokens, hidden from it, have none)
    assert 0 < len(content) <= r.usage.completion_tokens
    for e in content:
        assert len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token
        assert e.logprob == pytest.approx(e.top_logprobs[0].logprob) and e.logprob <= 0
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob
    assert "".join(e.token for e in content) == r.choices[0].message.content
    streamed = [e for ch in c.chat.completions.create(model=model(server), messages=ASK, max_tokens=8, logprobs=True,
                                                       top_logprobs=3, stream=True)
                if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
    assert [(e.token, round(e.logprob, 4)) for e in streamed] == [(e.token, round(e.logprob, 4)) for e in content]
    base = c.chat.completions.create(model=model(server), messages=ASK, max_tokens=8, logprobs=True,
                                     extra_body={"tandem": {"mtp": False}})
    assert [round(e.logprob, 3) for e in base.choices[0].logprobs.content] == [round(e.logprob, 3) for e in content]

    t = c.completions.create(model=model(server), prompt="Hello world", max_tokens=6, logprobs=2)
    lp = t.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6
    assert all(max(top, key=top.get) == tok for tok, top in zip(lp.tokens, lp.top_logprobs))
    assert lp.text_offset[0] == 0 and "".join(lp.tokens) == t.choices[0].text


def test_logit_bias_and_penalties_change_the_answer(server):
    c = client(server)
    kw = dict(model=model(server), messages=ASK, max_tokens=6)
    plain = c.chat.completions.create(**kw, logprobs=True)
    first = plain.choices[0].logprobs.content[0]
    # ban the first token the model chose: the answer starts differently
    tok = server_token_id(c, kw, first)
    forced = c.chat.completions.create(**kw, logit_bias={str(tok + 40): 100}, logprobs=True)
    assert forced.choices[0].logprobs.content[0].bytes != first.bytes
    banned = c.chat.completions.create(**kw, logit_bias={str(tok): -100}, logprobs=True)
    assert banned.choices[0].logprobs.content[0].token != first.token
    # the tiny model walks up the vocabulary and never repeats: a frequency penalty on a reply
    # that repeats the prompt's tokens changes the logits it reports
    rep = c.chat.completions.create(**kw, frequency_penalty=2.0, presence_penalty=2.0, logprobs=True)
    assert [e.logprob for e in rep.choices[0].logprobs.content] != [e.logprob for e in plain.choices[0].logprobs.content]


def server_token_id(c, kw, entry) -> int:
    """The id of a logprobs entry's token in the synthetic vocabulary (bytes as <0xNN>, words
    with SentencePiece's space mark)."""
    from engine.testmodels import vocabulary

    toks, _, _ = vocabulary(512)
    for i, t in enumerate(toks):
        b = bytes([int(t[3:5], 16)]) if t.startswith("<0x") else t.replace("\u2581", " ").encode()
        if b == bytes(entry.bytes):
            return i
    raise AssertionError(f"{entry.token!r} is not in the vocabulary")


def test_n_choices_one_after_another(server):
    c = client(server)
    greedy = c.chat.completions.create(model=model(server), messages=ASK, max_tokens=6, n=2)
    assert [ch.index for ch in greedy.choices] == [0, 1]
    assert greedy.choices[0].message.content == greedy.choices[1].message.content
    sampled = c.chat.completions.create(model=model(server), messages=ASK, max_tokens=12, n=3, temperature=1.5,
                                        top_p=1.0, seed=7)
    assert len({ch.message.content for ch in sampled.choices}) > 1
    assert sampled.usage.completion_tokens > 12  # all three choices count
    # streamed, each choice's deltas under its own index add up to its text. Greedy: a sampled
    # choice's tokens may differ between two requests where the batches they decoded in differ
    # (llama.cpp's kernels are not batch-invariant; under a loaded machine the choices of one
    # request can be admitted a step apart), and at temperature 1.5 a tiny logit change moves a draw
    streamed = {}
    for ch in c.chat.completions.create(model=model(server), messages=ASK, max_tokens=6, n=2, stream=True):
        for x in ch.choices:
            streamed[x.index] = streamed.get(x.index, "") + (x.delta.content or "")
    assert [streamed[i] for i in range(2)] == [ch.message.content for ch in greedy.choices]


# ---- from a new user's walk: each failed before its fix --------------------------------------
def test_a_function_without_arguments_is_called_with_an_empty_object(server):
    for params in ({"type": "object", "properties": {}}, None):
        fn = {"name": "refresh", "description": "Refresh the view"}
        if params is not None:
            fn["parameters"] = params
        r = client(server).chat.completions.create(model=model(server), messages=ASK, max_tokens=20,
                                                   tools=[{"type": "function", "function": fn}], tool_choice="required",
                                                   parallel_tool_calls=False)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls" and ch.message.tool_calls[0].function.arguments == "{}", ch


def test_curl_without_a_content_type_and_malformed_json(server):
    import httpx2 as httpx

    r = httpx.post(f"{server.url}/chat/completions", timeout=30, content=json.dumps(
        {"messages": ASK, "max_tokens": 2}).encode(), headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 200, r.text
    bad = httpx.post(f"{server.url}/chat/completions", timeout=30, content=b'{"messages":[',
                     headers={"Content-Type": "application/json"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] is None


# ---- what a forced call enforces --------------------------------------------------------------
def test_a_forced_call_keeps_its_parameters_bounds_with_mtp_and_without(server):
    """`minimum`/`maximum` in a tool's parameters are enforced (the test model once answered a
    forced book_trip with "nights": 67898989: the bounds were dropped without a word)."""
    c = client(server)
    for prompt in ("Book me a trip", "Hello world, this is a test", "nights nights nights 12345"):
        calls = []
        for mtp in (True, False):
            r = c.chat.completions.create(model=model(server), messages=[{"role": "user", "content": prompt}],
                                          tools=[TRIP], tool_choice="required", max_tokens=60,
                                          extra_body={"tandem": {"mtp": mtp}})
            call = r.choices[0].message.tool_calls[0]
            args = _args(call, TRIP["function"]["parameters"])
            assert 1 <= args["nights"] <= 9
            calls.append(call.function.arguments)
        assert calls[0] == calls[1]
