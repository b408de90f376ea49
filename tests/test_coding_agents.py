"""Claude Code itself (from npm, pinned) against the installed-style `tandem serve`, with the
README's environment: its real first request (system blocks, tools, thinking, a system message
mid-conversation, x-api-key) goes through the Messages API and its stream comes back.

Claude Code is a native program shipped in an npm package: it is installed once into Tandem's
cache (about a minute); a machine without npm, or that cannot reach the npm registry, skips
this test saying so. Codex and opencode were run by hand (their prompts, tokenized by the test
model's character-level vocabulary, overflow its 32k context; see the README for their
configuration).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from .test_serve import Serve

CLAUDE_CODE = "@anthropic-ai/claude-code@2.1.197"
README = Path(__file__).resolve().parents[1] / "README.md"


def install(package: str) -> Path:
    """The package's bin folder, installed once into ~/.cache/tandem/agents."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: Claude Code comes from the npm registry")
    where = Path.home() / ".cache" / "tandem" / "agents" / package.replace("/", "+")
    if not (where / "node_modules" / ".bin").is_dir():
        where.mkdir(parents=True, exist_ok=True)
        r = subprocess.run([npm, "install", "--prefix", str(where), "--no-audit", "--no-fund", package],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            shutil.rmtree(where, ignore_errors=True)
            pytest.skip(f"npm could not install {package}: {r.stderr.strip()[-300:]}")
    return where / "node_modules" / ".bin"


def readme_environment(section_start: str) -> dict:
    """The `export NAME=value` lines of the README's block after `section_start`."""
    text = README.read_text("utf-8")
    block = text[text.index(section_start):].split("```sh", 1)[1].split("```", 1)[0]
    env = {}
    for line in block.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("export "):
            env.update(re.findall(r"(\w+)=(\S+)", line))
    return env


def test_claude_code_runs_a_turn_through_the_messages_api(gemma4_tools, tmp_path):
    bin_dir = install(CLAUDE_CODE)
    server = Serve(gemma4_tools, "--ctx", "32768")
    try:
        env = readme_environment("**Claude Code**")
        assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8080"  # as the README writes it
        env["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{server.port}"
        home = tmp_path / "home"
        home.mkdir()
        env = {**{k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "CLAUDE"))}, **env,
               "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "DISABLE_AUTOUPDATER": "1",
               "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "64"}  # the test model never ends by itself soon
        # a short system prompt and no tools: the test model's vocabulary is character-level,
        # so Claude Code's whole prompt (~70k characters) would not fit its context
        r = subprocess.run([str(bin_dir / "claude"), "-p", "say hi", "--tools", "", "--system-prompt", "Be brief."],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
                           stdin=subprocess.DEVNULL)
    finally:
        server.stop()
    log = server.proc.stdout.read().decode(errors="replace")
    assert "Anthropic messages (stream): 64 tokens" in log, log[-2000:]
    # the random weights never end a reply soon, so the reply stops at the 64 tokens Claude Code
    # asked for: it read the whole stream, to message_delta's stop_reason "max_tokens", and says
    # so in its own words (a malformed stream is another error; minutes of text would be exit 0)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "response exceeded the 64 output token maximum" in out, out[-2000:]
