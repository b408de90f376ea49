"""`tandem serve` on every size's shaped pair (tests/support/shaped.py), with the openai SDK as
the client: the model it names, the context it chose from the memory plan, a reply with MTP
that equals the reply without drafting, and a forced tool call, the same either way. Slow lane: the big shapes load in seconds and decode
at 15-50 tokens a second on 2 cores."""

from __future__ import annotations

import json

import httpx2 as httpx
import jsonschema
import openai
import pytest

from ..support.serve import Serve
from ..support.shaped import SIZES, WAIT_AND_RUN, one_loaded, shaped_pair
from ..support.tool_schemas import ASK as TOOL_ASK
from ..support.tool_schemas import TOOLS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(WAIT_AND_RUN)]
ASK = [{"role": "user", "content": "Write a Python function that reverses a list."}]


@pytest.mark.parametrize("size", SIZES)
def test_each_size_serves_mtp_replies_equal_to_plain_decoding(size):
    target, drafter = shaped_pair(size)
    with one_loaded():
        n_ctx, out = _serve_and_ask(target, drafter)
    assert f"a context of {n_ctx:,} tokens" in out  # and says so


def _serve_and_ask(target, drafter):
    """(the context tandem serve chose, what it printed) after the checks on its replies."""
    s = Serve({"target": target, 0.7: drafter}, "--threads", "2", "--draft-max", "3", ctx=None)
    try:
        props = httpx.get(f"http://127.0.0.1:{s.port}/props", timeout=10).json()
        n_ctx = props["default_generation_settings"]["n_ctx"]
        # 32768 where the memory holds it; less when it does not (the suite's other workers hold
        # big pairs too), never below 4096
        assert 4096 <= n_ctx <= 32768 and props["tandem"]["mtp"]
        c = openai.OpenAI(base_url=s.url, api_key="none", max_retries=0, timeout=300)
        assert [m.id for m in c.models.list().data] == [target.stem]
        replies = [c.chat.completions.create(model=target.stem, messages=ASK, max_tokens=24, temperature=0,
                                             extra_body={"tandem": {"mtp": mtp}}) for mtp in (True, False)]
        mtp, plain = replies
        assert mtp.model_extra["timings"]["draft_n"] > 0 and mtp.model_extra["timings"]["draft_n_accepted"] > 0
        assert mtp.choices[0].message.content == plain.choices[0].message.content != ""
        # a forced tool call: its grammar's forced tokens under drafting, the same call either way
        calls = [c.chat.completions.create(model=target.stem, messages=TOOL_ASK, tools=TOOLS, max_tokens=80,
                                           tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                           temperature=0, extra_body={"tandem": {"mtp": mtp}}).choices[0]
                 for mtp in (True, False)]
        assert all(ch.finish_reason == "tool_calls" for ch in calls), calls
        got = [(ch.message.tool_calls[0].function.name, ch.message.tool_calls[0].function.arguments) for ch in calls]
        assert got[0] == got[1] and got[0][0] == "get_weather"
        schema = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == "get_weather")
        jsonschema.validate(json.loads(got[0][1]), schema)
    finally:
        s.stop()
    return n_ctx, s.proc.stdout.read().decode(errors="replace")
