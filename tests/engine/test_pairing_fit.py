"""Pairing local files by their headers (synthetic model files), and the library's import and verify
(the memory-fit calculator: tests/unit/test_fit.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

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
