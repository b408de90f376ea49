"""The memory-fit calculator, speed estimates and recommendations against hand-computed cases,
the catalog and the machine's facts: no model files."""

from __future__ import annotations

import pytest

from engine.models.catalog import CatalogModel, Source, find, load_catalog, memory_needed
from engine.models.memory_plan import compute_bytes, kv_cache_bytes
from engine.models.hardware import Machine, gpu_bandwidth
from engine.models.recommend import USABLE_TPS, check_fit, estimate_tps, recommend


SHAPE = {"n_layer": 10, "kv_layers": 6, "swa_every": 3, "n_swa": 100, "n_head_kv": 2,
         "head_dim_swa": 64, "head_dim_full": 128, "n_embd": 512, "n_vocab": 1000}


def test_kv_cache_by_hand():
    # 6 layers with KV: full at i = 2, 5; SWA at 0, 1, 3, 4.
    # SWA cells = pad256(100 + 512) = 768 (< n_ctx 4096); full cells = 4096.
    # SWA layer: 2 (K,V) * 768 * 2 heads * 64 * 2 bytes = 393,216 -> 4 layers = 1,572,864
    # full layer: 2 * 4096 * 2 * 128 * 2 = 4,194,304 -> 2 layers = 8,388,608
    assert kv_cache_bytes(SHAPE, 4096) == 1_572_864 + 8_388_608
    # a short context caps the sliding cells too: n_ctx 512 -> every layer 512 cells
    # SWA: 2*512*2*64*2 = 262,144 x4 = 1,048,576; full: 2*512*2*128*2 = 524,288 x2 = 1,048,576
    assert kv_cache_bytes(SHAPE, 512) == 2_097_152
    # four sequences share one unified cache: the sliding layers keep each one's window,
    # pad256(4 * 100 + 512) = 1024 cells: 2*1024*2*64*2 = 524,288 x4 = 2,097,152
    assert kv_cache_bytes(SHAPE, 4096, n_seq=4) == 2_097_152 + 8_388_608
    # a size whose full-attention layers have their own KV head count (1 instead of 2)
    assert kv_cache_bytes({**SHAPE, "n_head_kv_full": 1}, 4096) == 1_572_864 + 8_388_608 // 2


def test_compute_buffers_by_hand():
    # logits rows (48 for one sequence, 1000 floats each) twice, the f16 mask 4096 x 512, 64
    # rows of 512 floats per token of the micro-batch; the drafter's one logits row twice
    assert compute_bytes(SHAPE, 4096) == 2 * 48 * 4000 + 4096 * 512 * 2 + 64 * 512 * 512 * 4 + 2 * 4000
    assert compute_bytes(SHAPE, 4096, n_seq=3, drafter=False) == 2 * 66 * 4000 + 4096 * 512 * 2 + 64 * 512 * 512 * 4


def _model(name, size, active=1.0, shape=SHAPE):
    return CatalogModel(name, name.title(), "", 8192, 2, {"Q4_K_M": size}, (Source(f"r/{name}"),), 100_000_000, shape,
                        active_fraction=active)


def test_fit_and_recommendation_by_hand():
    small, big = _model("small", 1_000_000_000), _model("big", 5_000_000_000)
    need_small = 1_000_000_000 + 100_000_000 + kv_cache_bytes(SHAPE, 4096) + compute_bytes(SHAPE, 4096)
    assert memory_needed(small, "Q4_K_M", 4096) == need_small == 1_181_656_640  # 1e9 + 1e8 + 9,961,472 + 71,695,168
    gpu = dict(ram_budget=32e9, cpu_bandwidth=20e9, gpu_bandwidth=500e9)
    r = recommend(Machine(gpu_budget=6_000_000_000, **gpu), [small, big], n_ctx=4096)
    assert r.model is big and not r.spills  # 5.0e9 + 1e8 + 9.96e6 + 7.17e7 = 5.18e9 <= 6e9
    r = recommend(Machine(gpu_budget=5_000_000_000, **gpu), [small, big], n_ctx=4096)
    assert r.model is small and not r.spills
    r = recommend(Machine(gpu_budget=1_000_000_000, **gpu), [small, big], n_ctx=4096)
    assert r.model is small and r.spills and "slower than plain decoding" in r.explain()
    assert check_fit(big, "Q4_K_M", Machine(gpu_budget=5_000_000_000, **gpu), 4096).spills


def test_speed_estimates_by_hand():
    cpu = Machine(ram_budget=20e9, cpu_bandwidth=13e9)
    e2b_like = _model("e2b", 3_100_000_000, active=0.55)
    # CPU: 13e9 B/s / (3.1e9 * 0.55 B per token) = 7.62 tok/s
    assert estimate_tps(e2b_like, "Q4_K_M", cpu) == pytest.approx(13e9 / 1.705e9)
    # GPU that holds it all: 0.7 * 1008e9 / 7.38e9 = 95.6 tok/s
    dense = _model("dense", 7_380_000_000)
    rtx = Machine(ram_budget=32e9, cpu_bandwidth=20e9, gpu_budget=20_000_000_000, gpu_bandwidth=1008e9)
    assert estimate_tps(dense, "Q4_K_M", rtx) == pytest.approx(0.7 * 1008e9 / 7.38e9)
    # a GPU short of memory: KV (8192 ctx) + drafter + buffers take 1e8 + kv + compute first,
    # the rest of its 6e9 holds that share of the weights; the remainder is read at CPU speed
    small_gpu = Machine(ram_budget=32e9, cpu_bandwidth=20e9, gpu_budget=6_000_000_000, gpu_bandwidth=1008e9)
    other = 100_000_000 + kv_cache_bytes(SHAPE, 8192) + compute_bytes(SHAPE, 8192)
    share = (6e9 - other) / 7.38e9
    seconds = 7.38e9 * share / (0.7 * 1008e9) + 7.38e9 * (1 - share) / 20e9
    assert estimate_tps(dense, "Q4_K_M", small_gpu) == pytest.approx(1 / seconds)
    assert estimate_tps(dense, "Q4_K_M", small_gpu) < 0.2 * estimate_tps(dense, "Q4_K_M", rtx)
    # the MoE reads only its active share: 0.17 of its bytes
    moe = _model("moe", 16_800_000_000, active=0.17)
    assert estimate_tps(moe, "Q4_K_M", rtx.__class__(ram_budget=32e9, cpu_bandwidth=20e9, gpu_budget=24e9,
                                                       gpu_bandwidth=1008e9)) == pytest.approx(0.7 * 1008e9 / (16.8e9 * 0.17))


def test_recommendation_prefers_usable_speed_over_size():
    cat = load_catalog()
    # CPU only, 2 cores like CI: a bigger model fits in 20 GB but crawls; E2B is the fastest
    r = recommend(Machine(ram_budget=20e9, cpu_bandwidth=13e9), cat)
    assert r.model.name == "gemma-4-e2b" and r.tps < USABLE_TPS and "slow" in r.explain()
    # a 16 GB laptop CPU with more bandwidth: E2B or E4B at a usable speed, never the 12B that fits
    r = recommend(Machine(ram_budget=12.8e9, cpu_bandwidth=40e9), cat)
    assert r.model.name in ("gemma-4-e2b", "gemma-4-e4b") and r.tps >= USABLE_TPS
    assert check_fit(find("gemma-4-12b", cat), "Q4_K_M", Machine(ram_budget=12.8e9, cpu_bandwidth=40e9)).tps < USABLE_TPS
    # a 64 GB workstation CPU: the MoE reads only its active experts (2.9 GB a token), so it is
    # faster there than E4B (3.5 GB) and better: it is the pick, with the note on MTP
    r = recommend(Machine(ram_budget=51e9, cpu_bandwidth=60e9), cat)
    assert r.model.name == "gemma-4-26b-a4b" and "mixture-of-experts" in r.explain()
    # an RTX 4090 (24 GB): the 31B with an 8K context needs 24.4 GB; the MoE is the pick
    r = recommend(Machine(ram_budget=64e9, cpu_bandwidth=40e9, gpu_budget=21.6e9, gpu_bandwidth=1008e9), cat)
    assert r.model.name == "gemma-4-26b-a4b"
    # an RTX 5090 (32 GB): the 31B fits and runs fast
    r = recommend(Machine(ram_budget=64e9, cpu_bandwidth=40e9, gpu_budget=28.8e9, gpu_bandwidth=1792e9), cat)
    assert r.model.name == "gemma-4-31b" and r.tps > 30
    # a 12 GB RTX 3060: the 12B
    r = recommend(Machine(ram_budget=32e9, cpu_bandwidth=30e9, gpu_budget=11e9, gpu_bandwidth=360e9), cat)
    assert r.model.name == "gemma-4-12b"
    moe = check_fit(find("gemma-4-26b-a4b", cat), "Q4_K_M", Machine(ram_budget=64e9, cpu_bandwidth=40e9,
                                                                     gpu_budget=22e9, gpu_bandwidth=1008e9))
    assert "mixture-of-experts" in moe.explain()


def test_gpu_bandwidth_table():
    assert gpu_bandwidth("NVIDIA GeForce RTX 4070 Ti SUPER") == (504e9, True)
    assert gpu_bandwidth("NVIDIA GeForce RTX 4070") == (504e9, True)
    assert gpu_bandwidth("Apple M1 Max") == (400e9, True)
    assert gpu_bandwidth("Apple M1") == (68e9, True)
    assert gpu_bandwidth("Some Future GPU") == (300e9, False)


def test_catalog_is_complete():
    names = {m.name for m in load_catalog()}
    assert names == {"gemma-4-e2b", "gemma-4-e4b", "gemma-4-12b", "gemma-4-26b-a4b", "gemma-4-31b"}
    for m in load_catalog():
        assert "Q4_K_M" in m.quants and m.target_sources() and 1 <= m.draft_max <= 8
        assert m.shape["n_swa"] == (512 if m.name in ("gemma-4-e2b", "gemma-4-e4b") else 1024)
        assert m.context_length == (131072 if m.name in ("gemma-4-e2b", "gemma-4-e4b") else 262144)


def test_machine_facts_come_from_psutil():
    import os

    import psutil

    from engine.models.hardware import system_ram
    from engine.models.hardware import physical_cores

    avail, total = system_ram()
    assert 0 < avail <= total and abs(total - psutil.virtual_memory().total) < 2**20
    assert 1 <= physical_cores() <= (os.cpu_count() or 1)


def test_tandem_threads_sets_what_automatic_means(monkeypatch):
    import os

    from engine.errors import EngineError
    from engine.local.runtime import THREADS_ENV, automatic_threads
    from engine.models.hardware import physical_cores

    monkeypatch.delenv(THREADS_ENV, raising=False)
    assert automatic_threads() == physical_cores()
    monkeypatch.setenv(THREADS_ENV, "1")
    assert automatic_threads() == 1
    for bad in ("two", "0", "-1", str((os.cpu_count() or 1) + 1)):
        monkeypatch.setenv(THREADS_ENV, bad)
        with pytest.raises(EngineError, match=f"TANDEM_THREADS must be a whole number.*{bad!r}"):
            automatic_threads()
