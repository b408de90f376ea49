"""The terminal coding agents themselves (from npm, pinned) against the installed-style
`tandem serve`, each configured exactly as docs/agents.md says (only the port changes):

* Claude Code, with docs/agents.md's environment: its real first request (~17k tokens: its whole
  default system prompt in system blocks, its 24 default tools, thinking, a system message
  mid-conversation, x-api-key) goes through the Messages API, into tandem serve's default
  context, and its stream comes back, as do those of its 3 retries of a reply cut short;
* Codex CLI, with docs/agents.md's `~/.codex/config.toml`: its real first request (~8k tokens: its
  instructions, tools, reasoning and include fields) goes through the Responses API, first
  into a context too small for it (Codex reads the 400 as its own "ran out of room" error),
  then into one that leaves a little room, whose stream it reads to the end;
* opencode, with docs/agents.md's `opencode.json` (`@ai-sdk/openai-compatible`): its title and
  agent requests go through chat completions and their streams come back; with docs/agents.md's
  other provider package, `@ai-sdk/openai`, through the Responses API.

All three run on the tiny pair over Gemma 4's real tokenizer (`real_vocab`), where
their prompts tokenize as on a real Gemma 4 and fit its context. The random weights never end
a reply by themselves, so every test bounds the reply: Claude Code and opencode by the output
limit they ask for, set by their own options; Codex, which asks for none, by the room its
context leaves. Each agent is a native program shipped in an npm package: it is installed once
into Tandem's cache (under a minute); a machine without npm, or that cannot reach the npm
registry, skips its test saying so. Each agent is kept offline (no telemetry, update checks,
model lists or plugin installs) by its own documented options.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import httpx2 as httpx
import pytest

from ..support.once import once
from ..support.serve import Serve

pytestmark = pytest.mark.slow  # real agents on real-vocabulary models: minutes
CLAUDE_CODE = "@anthropic-ai/claude-code@2.1.197"
CODEX = "@openai/codex@0.171.0"
OPENCODE = "opencode-ai@1.18.33"
AGENTS = Path(__file__).resolve().parents[2] / "docs" / "agents.md"


def install(package: str) -> Path:
    """The package's bin folder, installed once into ~/.cache/tandem/agents."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"npm is not installed: {package} comes from the npm registry")
    where = Path.home() / ".cache" / "tandem" / "agents" / package.replace("/", "+")
    with once(f"agent-{package.replace('/', '+')}"):
        return _installed(npm, package, where)


def _installed(npm: str, package: str, where: Path) -> Path:
    if not (where / "node_modules" / ".bin").is_dir():
        where.mkdir(parents=True, exist_ok=True)
        r = subprocess.run([npm, "install", "--prefix", str(where), "--no-audit", "--no-fund", package],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            shutil.rmtree(where, ignore_errors=True)
            pytest.skip(f"npm could not install {package}: {r.stderr.strip()[-300:]}")
    return where / "node_modules" / ".bin"


def readme_environment(section_start: str) -> dict:
    """The `export NAME=value` lines of the agents page's block after `section_start`."""
    text = AGENTS.read_text("utf-8")
    block = text[text.index(section_start):].split("```sh", 1)[1].split("```", 1)[0]
    env = {}
    for line in block.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("export "):
            env.update(re.findall(r"(\w+)=(\S+)", line))
    return env


def readme_block(section_start: str, language: str) -> str:
    """The agents page's first ```language block after `section_start`."""
    text = AGENTS.read_text("utf-8")
    return text[text.index(section_start):].split(f"```{language}\n", 1)[1].split("```", 1)[0]


def agent_environment(home: Path, drop: tuple[str, ...]) -> dict:
    """This process's environment less the variables named by `drop`, in a fresh HOME."""
    home.mkdir()
    return {**{k: v for k, v in os.environ.items() if not k.startswith(drop)}, "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_CACHE_HOME": str(home / ".cache"), "XDG_STATE_HOME": str(home / ".local" / "state")}


def server_log(server: Serve) -> str:
    server.stop()
    return server.proc.stdout.read().decode(errors="replace")


def test_claude_code_runs_a_turn_through_the_messages_api(real_vocab, tmp_path):
    bin_dir = install(CLAUDE_CODE)
    # the server's own default context (32768 tokens), which Claude Code's first request (~17k) has to fit
    server = Serve(real_vocab, ctx=None)
    try:
        props = httpx.get(f"http://127.0.0.1:{server.port}/props").json()
        assert props["default_generation_settings"]["n_ctx"] == 32768  # its default
        env = readme_environment("**Claude Code**")
        assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8080"  # as docs/agents.md writes it
        env["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{server.port}"
        env = {**agent_environment(tmp_path / "home", ("ANTHROPIC", "CLAUDE")), **env,
               # offline by its own options: docs/agents.md's (no telemetry, error reports or
               # updates) and no auto-updater; the random weights never end a reply by themselves
               "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "8"}
        # its whole default prompt and tools; a permission mode that never asks, and so denies
        # any tool not allowed by a rule (none is), not that this model calls one
        r = subprocess.run([str(bin_dir / "claude"), "-p", "say hi", "--permission-mode", "dontAsk",
                            "--verbose", "--output-format", "stream-json"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
                           stdin=subprocess.DEVNULL)
    finally:
        log = server_log(server)
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    # the tools it declared: its ~20 default ones, none taken away
    init = next(e for e in events if e["type"] == "system" and e.get("subtype") == "init")
    assert len(init["tools"]) >= 20 and {"Bash", "Read", "Edit", "Write"} <= set(init["tools"]), init["tools"]
    # the reply stops at the 8 tokens Claude Code asked for: it read the whole stream, to
    # message_delta's stop_reason "max_tokens", and asks the same turn to go on 3 times (its
    # fixed number of "Output token limit hit" retries, each on the cached prompt and the
    # replies before), so 4 requests, all streamed to the end; then says so in its own words
    # (a malformed stream is another error; minutes of text would be a success)
    replies = [e["message"] for e in events if e["type"] == "assistant" and e["message"]["model"] != "<synthetic>"]
    assert len(replies) == 4 and log.count("Anthropic messages (stream): 8 tokens") == 4, log[-2000:]
    assert log.count("Anthropic messages") == 4, log[-2000:]  # and nothing refused or broken off
    # the prompt as the server counted it (its message_start's usage): Claude Code's whole system
    # prompt and its tools' declarations (~17k tokens in Gemma 4's vocabulary; ~3k without the tools)
    prompt = replies[0]["usage"]["input_tokens"] + replies[0]["usage"]["cache_read_input_tokens"]
    assert prompt > 10000, replies[0]["usage"]
    result = events[-1]
    assert r.returncode == 1 and result["type"] == "result" and result["is_error"], r.stdout[-2000:] + r.stderr[-2000:]
    assert "response exceeded the 8 output token maximum" in result["result"], result


def run_codex(bin_dir: Path, port: int, tmp_path: Path, home: str, ask: str) -> subprocess.CompletedProcess:
    """`codex exec ASK` with docs/agents.md's config.toml (only the port changed) in a fresh
    home, and TANDEM_API_KEY=none as docs/agents.md runs it."""
    config = readme_block("**Codex CLI**", "toml")
    assert tomllib.loads(config)["model_providers"]["tandem"]["base_url"] == "http://127.0.0.1:8080/v1"
    env = agent_environment(tmp_path / home, ("OPENAI", "CODEX"))
    codex_home = tmp_path / home / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(config.replace("127.0.0.1:8080", f"127.0.0.1:{port}"), "utf-8")
    env.update(CODEX_HOME=str(codex_home), TANDEM_API_KEY="none")
    work = tmp_path / "work"  # the same each time: its path is in the prompt
    work.mkdir(exist_ok=True)
    env["PWD"] = str(work)
    # offline by its own options: no analytics, no update check, no retries of a failed stream
    return subprocess.run([str(bin_dir / "codex"), "exec", "--skip-git-repo-check", "--sandbox", "read-only",
                           "-c", "analytics.enabled=false", "-c", "check_for_update_on_startup=false",
                           "-c", "model_providers.tandem.stream_max_retries=0",
                           "-c", "model_providers.tandem.request_max_retries=0", ask],
                          cwd=work, env=env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)


def test_codex_runs_a_turn_through_the_responses_api(real_vocab, tmp_path):
    bin_dir = install(CODEX)
    # Codex sends no max_output_tokens (nor a way to set one): a reply goes on until the model
    # ends or the context is full. So its prompt is first sent into a context too small for it,
    # which also measures it, and then into one that leaves only a few tokens of room.
    server = Serve(real_vocab, "--ctx", "4096")
    try:
        r = run_codex(bin_dir, server.port, tmp_path, "home1", "say hi")
    finally:
        log = server_log(server)
    m = re.search(r"OpenAI responses: 400: the conversation is (\d+) tokens but the context holds 4096", log)
    assert m, log[-2000:]
    out = r.stdout + r.stderr
    # Tandem's 400 reads as OpenAI's context_length_exceeded, which Codex names in its words
    assert r.returncode == 1 and "Codex ran out of room in the model's context window" in out, out[-2000:]

    # contexts are rounded up to a multiple of 256 tokens: `pad` more " hi" (a token each in
    # Gemma 4's vocabulary) bring the prompt to 16 tokens short of one, the room left for the reply
    prompt = int(m.group(1))
    pad = -(prompt + 16) % 256
    server = Serve(real_vocab, "--ctx", str(prompt + pad + 16))
    try:
        r = run_codex(bin_dir, server.port, tmp_path, "home2", "say hi" + " hi" * pad)
    finally:
        log = server_log(server)
    cut = re.findall(r"OpenAI responses \(stream\): (\d+) tokens", log)
    answered = re.findall(r"OpenAI responses( \(stream\))?: (\d+ tokens|\d{3}: )", log)
    assert len(cut) == 1 and len(answered) == 1, log[-2000:]  # one request, no retry
    # docs/agents.md's config leaves Codex's hosted web_search on (its default): left out, not a 400
    assert "hosted tools left out (web_search)" in log, log[-2000:]
    # the reply stops when the context is full: Codex read the whole stream, its text deltas up
    # to response.incomplete (reason max_output_tokens), printed the text and says so in its
    # own words (a malformed stream is another error; a completed one would be exit 0)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "ERROR: Incomplete response returned, reason: max_output_tokens" in out, out[-2000:]
    assert r.stderr.split("\ncodex\n", 1)[1].split("\nERROR:", 1)[0].strip(), out[-2000:]  # its text
    used = int(re.search(r"tokens used\n([\d,]+)", r.stderr).group(1).replace(",", ""))
    assert used == prompt + pad + int(cut[0]) and int(cut[0]) <= 17, out[-2000:]  # response.incomplete's usage


@pytest.mark.parametrize("npm, api", [("@ai-sdk/openai-compatible", "OpenAI chat"),  # docs/agents.md's
                                      ("@ai-sdk/openai", "OpenAI responses")],  # and its other
                         ids=["chat-completions", "responses"])
def test_opencode_runs_a_turn_through_chat_completions_or_responses(real_vocab, tmp_path, npm, api):
    bin_dir = install(OPENCODE)
    config = json.loads(readme_block("**opencode**", "json"))
    provider = config["provider"]["tandem"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"]["baseURL"] == "http://127.0.0.1:8080/v1"
    provider["npm"] = npm
    server = Serve(real_vocab, "--ctx", "32768")
    try:
        provider["options"]["baseURL"] = f"http://127.0.0.1:{server.port}/v1"
        work = tmp_path / "work"
        work.mkdir()
        (work / "opencode.json").write_text(json.dumps(config, indent=2), "utf-8")  # the project's
        env = agent_environment(tmp_path / "home", ("OPENCODE", "OPENAI"))
        env["PWD"] = str(work)  # opencode's project is $PWD's, not its working directory's
        # offline by its own options: no update check, model list from models.dev, plugins
        # (nor their npm install), LSP downloads or sharing
        env.update(OPENCODE_DISABLE_AUTOUPDATE="1", OPENCODE_DISABLE_MODELS_FETCH="1", OPENCODE_PURE="1",
                   OPENCODE_DISABLE_DEFAULT_PLUGINS="1", OPENCODE_DISABLE_LSP_DOWNLOAD="1",
                   OPENCODE_DISABLE_SHARE="1")
        # the random weights never end a reply: the model's output limit (max_tokens) comes down
        # from docs/agents.md's 8192 to 24, merged over the config by opencode's own variable
        env["OPENCODE_CONFIG_CONTENT"] = json.dumps(
            {"provider": {"tandem": {"models": {"gemma-4": {"limit": {"context": 32768, "output": 24}}}}}})
        r = subprocess.run([str(bin_dir / "opencode"), "run", "--print-logs", "say hi"], cwd=work, env=env,
                           capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    finally:
        log = server_log(server)
    # its title request (the small model) and its agent's turn, both streamed to the end
    assert log.count(f"{api} (stream): 24 tokens") == 2 == log.count("OpenAI "), r.stderr[-6000:]
    # the turn's text printed, and nothing said of an error (the reply ends at max_tokens, which
    # opencode takes as an answer: finish_reason "length", or status "incomplete")
    out = r.stdout + r.stderr
    assert r.returncode == 0 and r.stdout.strip() and not re.search(r"level=ERROR|Error: ", r.stderr), out[-6000:]
