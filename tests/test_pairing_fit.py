"""Pairing local files by their headers, and the memory-fit calculator against hand-computed cases."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.models.catalog import COMPUTE_OVERHEAD, CatalogModel, check_fit, kv_cache_bytes, load_catalog, memory_needed, recommend
from engine.models.library import Library
from engine.models.pairing import find_drafter
from engine.testmodels import make_test_models


@pytest.fixture(scope="module")
def layouts(tmp_path_factory, tiny):
    root = tmp_path_factory.mktemp("layouts")
    t, d = Path(tiny["target"]), Path(tiny[1.0])
    _, wide = make_test_models(root / "gen-wide", "tiny", 1.0, n_embd=96)
    underscore = root / "underscore.gguf"
    underscore.write_bytes(d.read_bytes().replace(b"gemma4-assistant", b"gemma4_assistant"))

    def place(name, files):
        base = root / name
        for rel, src in files.items():
            (base / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, base / rel)
        return base

    return {
        "same": place("same", {"gemma-4-it-Q4_K_M.gguf": t, "gemma-4-it-assistant.gguf": d}),
        "mtp": place("mtp", {"model/gemma-4-it-Q4_K_M.gguf": t, "model/MTP/gemma-4-it-MTP.gguf": d}),
        "parent": place("parent", {"sub/gemma-4-it-Q4_K_M.gguf": t, "drafter.gguf": d}),
        "wrong": place("wrong", {"gemma-4-it-Q4_K_M.gguf": t, "a-wide.gguf": wide, "b-underscore.gguf": underscore,
                                 "c-notes.gguf": root / "gen-wide" / "tiny-custom-target.gguf"}),
        "wrong_then_right": place("wr", {"gemma-4-it-Q4_K_M.gguf": t, "a-wide.gguf": wide, "z-good.gguf": d}),
    }


@pytest.mark.parametrize("layout,target,expected", [
    ("same", "gemma-4-it-Q4_K_M.gguf", "gemma-4-it-assistant.gguf"),
    ("mtp", "model/gemma-4-it-Q4_K_M.gguf", "model/MTP/gemma-4-it-MTP.gguf"),
    ("parent", "sub/gemma-4-it-Q4_K_M.gguf", "drafter.gguf"),
    ("wrong_then_right", "gemma-4-it-Q4_K_M.gguf", "z-good.gguf"),
])
def test_finds_the_matching_drafter(layouts, layout, target, expected):
    found, reasons = find_drafter(layouts[layout] / target)
    assert found == layouts[layout] / expected
    if layout == "wrong_then_right":
        assert any("width 96" in r for r in reasons)


def test_explains_why_files_do_not_pair(layouts):
    found, reasons = find_drafter(layouts["wrong"] / "gemma-4-it-Q4_K_M.gguf")
    assert found is None
    text = "\n".join(reasons)
    assert "width 96" in text and "gemma4_assistant" in text and "underscore" in text


def test_library_import_and_verify(layouts, tmp_path):
    lib = Library(tmp_path / "models.json")
    t = layouts["same"] / "gemma-4-it-Q4_K_M.gguf"
    d, _ = find_drafter(t)
    lib.add("mine", t, d, "import")
    assert [p for _, p in lib.verify()] == [None]
    lib.add("broken", layouts["wrong"] / "gemma-4-it-Q4_K_M.gguf", layouts["wrong"] / "a-wide.gguf", "import")
    problems = dict((e.name, p) for e, p in lib.verify())
    assert problems["mine"] is None and "width" in problems["broken"]


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


def test_fit_and_recommendation_by_hand():
    small = CatalogModel("s", "Small", "", 8192, 2, "r/s", "*{quant}*", {"Q4_K_M": 1_000_000_000}, [], 100_000_000, SHAPE)
    big = CatalogModel("b", "Big", "", 8192, 4, "r/b", "*{quant}*", {"Q4_K_M": 5_000_000_000}, [], 300_000_000, SHAPE)
    need_small = 1_000_000_000 + 100_000_000 + kv_cache_bytes(SHAPE, 4096) + COMPUTE_OVERHEAD
    assert memory_needed(small, "Q4_K_M", 4096) == need_small == 1_424_534_272  # 1e9 + 1e8 + 9,961,472 + 300 MiB
    r = recommend(6_000_000_000, "GPU", 4096, [small, big])
    assert r.model is big and not r.spills  # 5.0e9 + 3e8 + 9.96e6 + 3.15e8 = 5.62e9 <= 6e9
    r = recommend(5_500_000_000, "GPU", 4096, [small, big])
    assert r.model is small and not r.spills
    r = recommend(1_000_000_000, "GPU", 4096, [small, big])
    assert r.model is small and r.spills and "slower than plain decoding" in r.explain()
    assert check_fit(big, "Q4_K_M", 5_000_000_000, "GPU", 4096).spills


def test_catalog_is_complete():
    names = {m.name for m in load_catalog()}
    assert names == {"gemma-4-e2b", "gemma-4-e4b", "gemma-4-12b", "gemma-4-26b-a4b", "gemma-4-31b"}
    for m in load_catalog():
        assert "Q4_K_M" in m.quants and m.drafter_sources and 1 <= m.draft_max <= 8
        assert "{quant}" in m.target_pattern
