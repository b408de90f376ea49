"""Where a pair loads when the user leaves the context or GPU layers to Tandem
(engine/models/fit.py): the memory plan against the memory free, in llama.cpp's order (every
layer on the GPU, else a smaller context, else fewer layers), and what the user set is kept.
Budgets are set against the plan's own sums, so each case sits on one side of a boundary."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.models.fit import ALL, AUTO, GPU_MARGIN, MIN_AUTO_CTX, place, wanted_context
from engine.models.gguf_info import GGUFInfo
from engine.models.memory_plan import plan_for_files

GB = 10**9
# the 26B-A4B's header as it matters to the plan: 30 layers, five sliding to one full, a
# 1024-token window, 8 KV heads, 262k vocabulary; Q4_K_M-sized weights
TARGET = GGUFInfo(path=Path("26b.gguf"), arch="gemma4", name="26b", file_size=int(16.9 * GB),
                  tensor_bytes=int(16.8 * GB), n_vocab=262144, n_embd=2816, n_embd_out=0, n_layer=30,
                  context_length=262144, swa_pattern=tuple((i + 1) % 6 != 0 for i in range(30)),
                  n_head=(16,) * 30, n_head_kv=(8,) * 30, head_dim=(512, 512), head_dim_swa=(256, 256),
                  n_swa=1024)
DRAFTER = GGUFInfo(path=Path("d.gguf"), arch="gemma4-assistant", name="d", file_size=int(0.4 * GB),
                   tensor_bytes=int(0.4 * GB), n_vocab=262144, n_embd=1024, n_embd_out=2816, n_layer=4,
                   context_length=262144)


def placed(gpu_free, ram_free=64 * GB, n_ctx=AUTO, layers=AUTO, drafter_layers=AUTO, n_seq=1, target=TARGET):
    return place(target, DRAFTER, n_ctx, layers, drafter_layers, n_seq, 512, gpu_free, ram_free, "RTX 4090")


def total(n_ctx, n_seq=1):
    return plan_for_files(TARGET, DRAFTER, n_ctx, n_seq).total


def test_a_gpu_that_holds_the_pair_at_the_wanted_context_gets_every_layer():
    p = placed(gpu_free=total(32768) + GPU_MARGIN + 1)
    assert (p.n_ctx, p.target_gpu_layers, p.drafter_gpu_layers) == (32768, ALL, ALL)
    assert p.note.startswith("Chose every layer on RTX 4090 (the pair needs") and "a context of 32,768 tokens (the default" \
        in p.note


def test_a_smaller_gpu_gets_a_smaller_context_before_fewer_layers():
    p = placed(gpu_free=total(8192) + GPU_MARGIN + 1)
    assert (p.n_ctx, p.target_gpu_layers) == (8192, ALL)
    assert "a context of 8,192 tokens (at 32,768 the pair needs" in p.note


def test_a_gpu_too_small_for_the_least_context_gets_as_many_layers_as_fit():
    p = placed(gpu_free=int(total(MIN_AUTO_CTX) * 0.6))
    assert p.n_ctx == MIN_AUTO_CTX and 0 < p.target_gpu_layers < TARGET.n_layer
    assert p.drafter_gpu_layers == ALL  # the small drafter goes first
    # the layers placed fit the budget by the plan's own per-layer share
    plan = p.plan
    per_layer = plan.weights / (TARGET.n_layer + 1) + plan.kv / TARGET.n_layer
    on_gpu = plan.compute + plan.drafter + p.target_gpu_layers * per_layer
    assert on_gpu <= p.plan.total * 0.6 - GPU_MARGIN < on_gpu + per_layer
    assert f"{p.target_gpu_layers} of 30 layers on RTX 4090" in p.note and "the rest on the CPU" in p.note


def test_no_gpu_puts_everything_on_the_cpu_at_the_wanted_context():
    p = placed(gpu_free=0)
    assert (p.n_ctx, p.target_gpu_layers, p.drafter_gpu_layers) == (32768, 0, 0)
    assert p.note.startswith("Chose the CPU (no GPU that llama.cpp can use; the pair needs")


def test_short_system_memory_shrinks_the_context_and_says_when_even_the_least_does_not_fit():
    assert placed(gpu_free=0, ram_free=total(16384) + 1).n_ctx == 16384
    p = placed(gpu_free=0, ram_free=total(MIN_AUTO_CTX) - 1)
    assert p.n_ctx == MIN_AUTO_CTX and "expect swapping" in p.note


def test_what_the_user_asked_for_that_cannot_be_is_said():
    from dataclasses import replace

    p = placed(gpu_free=0, n_ctx=100000, layers=ALL, drafter_layers=0, target=replace(TARGET, context_length=32768))
    assert (p.n_ctx, p.target_gpu_layers) == (32768, ALL)
    assert p.note == ("No GPU that llama.cpp can use: the GPU layers asked for run on the CPU; a context of 32,768 "
                      "tokens, not the 100,000 asked for: the model was trained for 32,768")
    assert p.warnings == ("No GPU that llama.cpp can use: the GPU layers asked for run on the CPU",
                          "A context of 32,768 tokens, not the 100,000 asked for: the model was trained for 32,768")
    # left to us and held at the trained length: that is the reason given, not the memory
    p = placed(gpu_free=0, ram_free=10**15, n_seq=16, target=replace(TARGET, context_length=32768))
    assert "a context of 32,768 tokens (the model's trained length; 65,536 wanted for 16 sequences)" in p.note


def test_what_the_user_set_is_kept():
    p = placed(gpu_free=total(32768) * 2, n_ctx=65536, layers=12, drafter_layers=0)
    assert (p.n_ctx, p.target_gpu_layers, p.drafter_gpu_layers, p.note) == (65536, 12, 0, "")
    # a context given and layers left to us: the layers fit that context, which never shrinks
    p = placed(gpu_free=total(8192) + GPU_MARGIN + 1, n_ctx=131072)
    assert p.n_ctx == 131072 and 0 < p.target_gpu_layers < TARGET.n_layer and "context" not in p.note


@pytest.mark.parametrize("n_seq, want", [(1, 32768), (8, 32768), (16, 65536)])
def test_the_wanted_context_grows_with_the_sequences(n_seq, want):
    assert wanted_context(n_seq) == want
    assert placed(gpu_free=0, ram_free=10**15, n_seq=n_seq).n_ctx == want


def test_the_context_never_passes_the_models_trained_length():
    from dataclasses import replace

    p = placed(gpu_free=0, target=replace(TARGET, context_length=8192))
    assert p.n_ctx == 8192
