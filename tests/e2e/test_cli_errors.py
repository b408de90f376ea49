"""Bad files and bad arguments from the CLI: one line on stderr, exit status 2, no traceback
(the same files in this process: tests/engine/test_errors.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ..support.bad_files import CASES, model_path


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "engine", *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("target,drafter,exc,words", CASES)
def test_cli_bad_files_one_line_exit_2(target, drafter, exc, words, tiny, bad):
    t = model_path(target, tiny, bad)
    args = ["generate", "--model", t, "--max-tokens", "4"]
    if drafter:
        args += ["--drafter", model_path(drafter, tiny, bad)]
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
    ["generate", "--gpu-layers", "most", "--model", "{target}", "hello"],
    ["generate", "--drafter-gpu-layers", "-2", "--model", "{target}", "hello"],
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
