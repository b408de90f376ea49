"""`tandem serve` on every size's shaped pair (tests/support/shaped.py), with the openai SDK as
the client: the model it names, the context it chose from the memory plan, and a reply with MTP
that equals the reply without drafting. Slow lane: the big shapes load in seconds and decode
at 15-50 tokens a second on 2 cores."""

from __future__ import annotations

import httpx2 as httpx
import openai
import pytest

from ..support.serve import Serve
from ..support.shaped import SIZES, shaped_pair

pytestmark = pytest.mark.slow
ASK = [{"role": "user", "content": "Write a Python function that reverses a list."}]


@pytest.mark.parametrize("size", SIZES)
def test_each_size_serves_mtp_replies_equal_to_plain_decoding(size):
    target, drafter = shaped_pair(size)
    s = Serve({"target": target, 0.7: drafter}, "--threads", "2", "--draft-max", "3", ctx=None)
    try:
        props = httpx.get(f"http://127.0.0.1:{s.port}/props", timeout=10).json()
        assert props["default_generation_settings"]["n_ctx"] == 32768 and props["tandem"]["mtp"]
        c = openai.OpenAI(base_url=s.url, api_key="none", max_retries=0, timeout=300)
        assert [m.id for m in c.models.list().data] == [target.stem]
        replies = [c.chat.completions.create(model=target.stem, messages=ASK, max_tokens=24, temperature=0,
                                             extra_body={"tandem": {"mtp": mtp}}) for mtp in (True, False)]
        mtp, plain = replies
        assert mtp.model_extra["timings"]["draft_n"] > 0 and mtp.model_extra["timings"]["draft_n_accepted"] > 0
        assert mtp.choices[0].message.content == plain.choices[0].message.content != ""
    finally:
        s.stop()
