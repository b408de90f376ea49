"""Structured output as users ask for it, through a real `tandem serve` (the tiny pair with
Gemma 4's real template) and the real client libraries: instructor in JSON-schema and tools
modes, and the openai SDK's `parse`, with a bounded integer, a Literal and a bounded nested
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


@pytest.mark.parametrize("mode", ["JSON_SCHEMA", "TOOLS"])
def test_instructor_gets_a_valid_model_with_drafting_on_and_off(tools_server, mode):
    client = instructor.from_openai(_client(tools_server), mode=getattr(instructor.Mode, mode))
    got = []
    for mtp in (True, False):
        r = client.chat.completions.create(model=_model(tools_server), response_model=Rating, messages=ASK,
                                           max_tokens=200, max_retries=0, extra_body={"tandem": {"mtp": mtp}})
        assert 1 <= r.stars <= 5 and r.mood in ("good", "bad") and len(r.scores) <= 3
        got.append(r.model_dump())
    assert got[0] == got[1]  # greedy: the same answer with the drafter on and off


def test_the_openai_sdk_parses_into_the_model(tools_server):
    r = _client(tools_server).chat.completions.parse(model=_model(tools_server), messages=ASK, response_format=Rating,
                                                     max_tokens=200)
    msg = r.choices[0].message
    assert msg.parsed is not None and 1 <= msg.parsed.stars <= 5 and r.choices[0].finish_reason == "stop"
