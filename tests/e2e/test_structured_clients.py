"""Structured output as users ask for it, through a real `tandem serve` (the tiny pair with
Gemma 4's real template) and the real client libraries: instructor in JSON-schema and tools
modes, pydantic-ai (tool and native output), and the openai SDK's `parse`, with a bounded integer, a Literal and a bounded nested
list. The random test model's values are whatever the grammar lets through: each reply must
validate as the pydantic model says (no retries), with drafting on and off alike."""

from __future__ import annotations

from typing import Annotated, Literal

import openai
import pytest
from pydantic import BaseModel, Field

instructor = pytest.importorskip("instructor")


class Rating(BaseModel):
    stars: int = Field(ge=1, le=5)
    mood: Literal["good", "bad"]
    scores: list[Annotated[int, Field(ge=0, le=9)]] = Field(max_length=3)


ASK = [{"role": "user", "content": "Rate the film Alien (1979)."}]


def _client(server):
    return openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=120)


def _model(server) -> str:
    return _client(server).models.list().data[0].id


# llama.cpp's CPU kernels are not batch-invariant: verifying drafts moves a logit by up to ~1e-2
# from decoding one token at a time (engine/bench.py), so greedy may part where two tokens tie.
NEAR_TIE = 0.05


@pytest.mark.parametrize("mode", ["JSON_SCHEMA", "TOOLS"])
def test_instructor_gets_a_valid_model_with_drafting_on_and_off(tools_server, mode):
    client = instructor.from_openai(_client(tools_server), mode=getattr(instructor.Mode, mode))
    got, tokens = [], []
    for mtp in (True, False):
        r, completion = client.chat.completions.create_with_completion(
            model=_model(tools_server), response_model=Rating, messages=ASK, max_tokens=200, max_retries=0,
            logprobs=True, top_logprobs=2, extra_body={"tandem": {"mtp": mtp}})
        assert 1 <= r.stars <= 5 and r.mood in ("good", "bad") and len(r.scores) <= 3
        got.append(r.model_dump())
        tokens.append(completion.choices[0].logprobs.content)
    # greedy: the same answer with the drafter on and off, or parting only where the baseline's
    # two best tokens (within the schema) nearly tie
    drafted, base = tokens
    assert drafted and base
    j = next((i for i, (a, b) in enumerate(zip(drafted, base)) if a.token != b.token), None)
    if j is None:
        assert got[0] == got[1] and len(drafted) == len(base)
    else:
        top = base[j].top_logprobs
        assert len(top) == 2 and top[0].logprob - top[1].logprob < NEAR_TIE, \
            f"drafting changed token {j} ({base[j].token!r} -> {drafted[j].token!r}) with a gap of " \
            f"{top[0].logprob - top[1].logprob:.4f}: not a near-tie"


def test_the_openai_sdk_parses_into_the_model(tools_server):
    r = _client(tools_server).chat.completions.parse(model=_model(tools_server), messages=ASK, response_format=Rating,
                                                     max_tokens=200)
    msg = r.choices[0].message
    assert msg.parsed is not None and 1 <= msg.parsed.stars <= 5 and r.choices[0].finish_reason == "stop"


def test_logprobs_under_a_schema_list_only_what_the_schema_allows(tools_server):
    """A grammar leaves one token possible after `{`: its alternatives have probability 0
    (-inf), which are no alternatives, and which JSON cannot carry (a 500 at every API)."""
    r = _client(tools_server).chat.completions.create(
        model=_model(tools_server), messages=ASK, max_tokens=20, logprobs=True, top_logprobs=5,
        response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": {
            "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}})
    content = r.choices[0].logprobs.content
    assert content[0].token == "{" and [t.token for t in content[0].top_logprobs] == ["{"]
    assert all(len(t.top_logprobs) <= 5 and all(a.logprob > float("-inf") for a in t.top_logprobs) for t in content)


@pytest.mark.parametrize("mode", ["tool", "native"])
def test_pydantic_ai_gets_a_valid_model(tools_server, mode):
    """pydantic-ai's structured output through its OpenAI provider: by default a forced
    `final_result` tool call, or (NativeOutput) response_format json_schema. No retries: the
    first reply must validate."""
    ai = pytest.importorskip("pydantic_ai")
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel(_model(tools_server), provider=OpenAIProvider(openai_client=_client_async(tools_server)))
    output = Rating if mode == "tool" else ai.NativeOutput(Rating)
    agent = ai.Agent(model, output_type=output, retries=0, model_settings={"max_tokens": 200, "temperature": 0})
    r = agent.run_sync("Rate the film Alien (1979).").output
    assert isinstance(r, Rating) and 1 <= r.stars <= 5 and r.mood in ("good", "bad") and len(r.scores) <= 3


def _client_async(server):
    return openai.AsyncOpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=120)
