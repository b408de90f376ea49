"""Reading a model repository's file names: quantizations, drafters, precision order, the target."""

from __future__ import annotations

import pytest

from engine.models.repo_files import has_quant, is_drafter_name, pick_target, precision_rank


@pytest.mark.parametrize("path,quant,expected", [
    ("gemma-4-E2B-it-Q4_K_M.gguf", "Q4_K_M", True),
    ("gemma-4-31B_q4_0-it.gguf", "Q4_0", True),
    ("gemma-4-E2B-it-Q4_0_4_4.gguf", "Q4_0", False),
    ("gemma-4-E2B-it-Q4_K_M.gguf", "Q4_K", False),
    ("gemma-4-E2B-it-UD-Q4_K_M.gguf", "Q4_K_M", True),
])
def test_quant_in_names(path, quant, expected):
    assert has_quant(path, quant) is expected


def test_drafter_names_and_precision():
    assert is_drafter_name("mtp-gemma-4-E2B-it-Q8_0.gguf") and is_drafter_name("MTP/gemma-4-E2B-it-Q8_0-MTP.gguf")
    assert is_drafter_name("gemma-4-12B-it-assistant-F16.gguf")
    assert not is_drafter_name("mmproj-gemma-4-E2B-it-f16.gguf") and not is_drafter_name("gemma-4-E2B-it-Q8_0.gguf")
    assert not is_drafter_name("MTP/README.md")
    order = sorted(["x-mtp-Q4_0.gguf", "x-mtp-BF16.gguf", "x-mtp-Q8_0.gguf", "x-mtp-F16.gguf"], key=precision_rank)
    assert order == ["x-mtp-Q8_0.gguf", "x-mtp-F16.gguf", "x-mtp-BF16.gguf", "x-mtp-Q4_0.gguf"]

    class F:
        def __init__(self, path):
            self.path = path
    files = [F("gemma-4-E2B-it-Q4_K_M-00001-of-00002.gguf"), F("mmproj-Q4_K_M.gguf"),
             F("mtp-gemma-4-E2B-it-Q4_K_M.gguf"), F("sub/gemma-4-E2B-it-Q4_K_M.gguf")]
    assert pick_target(files, "Q4_K_M").path == "sub/gemma-4-E2B-it-Q4_K_M.gguf"
    assert pick_target(files[:3], "Q4_K_M") is None
