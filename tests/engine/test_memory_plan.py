"""The memory plan (engine/models/memory_plan.py: what the recommendation and `/props` say a
pair needs) against what llama.cpp allocates for it, on the engine's real load: the weights and
the total within 10 %, the KV cache (sliding-window layers holding every sequence's window,
KV-sharing layers nothing) to llama.cpp's rounding. The shaped pairs of every size: tests/engine/test_sizes.py."""

from __future__ import annotations

import pytest

from engine.local.engine import Engine
from engine.local.runtime import LoadOptions
from engine.models.memory_plan import outputs_max


def check_plan(engine: Engine, n_seq: int) -> None:
    planned, allocated = engine.memory
    # llama.cpp grows the output buffer to n_outputs_max logits rows on the first batch that
    # returns them, without a log line: the plan counts it, the load's log cannot
    grown = (outputs_max(n_seq) - n_seq) * engine.n_vocab * 4
    # llama.cpp logs MiB to two decimals
    assert abs(planned.kv - allocated.kv) <= 0.002 * planned.kv + 2**20 / 100, (planned, allocated)
    assert abs(planned.weights - allocated.weights) <= 0.1 * allocated.weights, (planned, allocated)
    assert abs(planned.drafter - allocated.drafter) <= 0.1 * max(allocated.drafter, 1), (planned, allocated)
    assert abs(planned.total - (allocated.total + grown)) <= 0.1 * (allocated.total + grown), (planned, allocated)
    assert "KV cache" in planned.describe()


@pytest.mark.parametrize("n_ctx, n_seq, n_ubatch", [(4096, 1, 512), (16384, 4, 128)])
def test_the_plan_is_what_llama_cpp_allocates(real_vocab, n_ctx, n_seq, n_ubatch):
    """The tiny pair over Gemma 4's real vocabulary: its 262k-row logits weigh as in the real
    models (the synthetic vocabulary's toy widths would test only the margins)."""
    e = Engine.load(real_vocab["target"], real_vocab[0.7], LoadOptions(n_ctx=n_ctx, n_seq=n_seq, n_batch=n_ubatch,
                                                           n_ubatch=n_ubatch, n_threads=1, cache_ram_mib=0))
    try:
        check_plan(e, n_seq)
    finally:
        e.close()
