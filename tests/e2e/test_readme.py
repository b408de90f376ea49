"""The README and the docs/ pages are executable: every command in their code blocks runs here,
through the installed `tandem` console script (the one beside this Python, as the user types
it), with the synthetic models standing in for downloads and a local hub standing in for
Hugging Face.

The blocks are read from the pages themselves (tests/support/docs.py): a command (or a block) a
page gains without a runner here fails `test_every_readme_block_is_run`, naming it, so this file
grows with the pages.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest

from ..support import docs
from ..support.hubserver import Hub
from ..support.llamaserver import free_port

pytestmark = pytest.mark.slow  # every command of the pages, through the installed console script
ROOT = Path(__file__).resolve().parents[2]
TANDEM = Path(sys.executable).parent / "tandem"  # the console script pip installed
ENGINE_REPO = "ggml-org/gemma-4-E4B-it-GGUF"

# Not Tandem's to run here, each with the reason: other programs' commands shown for context,
# and the two set-up commands, which are what CI runs before this test (.ci/run).
ELSEWHERE = {
    "bash packaging/install.sh && .venv/bin/tandem": "the set-up; .ci/run installs the same way "
                                                      "(the window it opens: test_window_starts)",
    "bash packaging/install.sh --dev && .venv/bin/python -m pytest -q -n auto": "the test command: this run "
                                                                              "(.ci/run's last line)",
    ".venv/bin/python -m pytest": "the fast lane: this run less the tests marked slow",
    "llama-server": "llama.cpp's server (tests/e2e/test_remote.py runs it with the synthetic pair)",
    "vllm serve": "vLLM (needs a GPU; its response shapes are replayed in tests/e2e/test_remote.py)",
    "apt-get install": "Debian's packages for Xvfb",
    "sudo apt-get install": "the window's X11 libraries: tests/unit/test_display_libs.py checks the list and "
                            "that tandem names a missing one",
    "xvfb-run": "the screenshots script (a developer tool; the window itself: tests/app/test_app.py)",
    "export ANTHROPIC_BASE_URL=http://127.0.0.1:8080 ANTHROPIC_API_KEY=none": "Claude Code's environment: "
                                                                            "tests/e2e/test_coding_agents.py",
    "export ANTHROPIC_MODEL=gemma-4 ANTHROPIC_DEFAULT_HAIKU_MODEL=gemma-4": "Claude Code's environment: "
                                                                          "tests/e2e/test_coding_agents.py",
    "export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1": "Claude Code's environment: tests/e2e/test_coding_agents.py",
    "claude": "Claude Code itself (from npm): tests/e2e/test_coding_agents.py runs it with the environment above",
}
SHELL = ("sh", "bash", "shell", "console")  # a fence of commands; an indented block is commands too
# the pages' other blocks, by language and the heading (or bold lead-in) above them: where each runs
OTHER_BLOCKS = {
    ("python", "**OpenAI Agents SDK**"): "test_agents_sdk_set_up, below",
    ("python", "# The Python API"): "test_python_api_example, below",
    ("toml", "**Codex CLI**"): "tests/e2e/test_coding_agents.py: Codex reads it as its config.toml",
    ("json", "**opencode**"): "tests/e2e/test_coding_agents.py: opencode reads it as its opencode.json",
}


def readme_blocks() -> list[tuple[str, str, list[str]]]:
    """The pages' code blocks as (language, the heading or bold lead-in above, lines): fenced
    ones, and indented ones (language "sh"), which start after a blank line; an indented line
    right after text is a list item's continuation, not code."""
    blocks, anchor, fence, indented, prev = [], "", None, False, ""
    for line in docs.text().splitlines():
        if fence is not None:
            if line.startswith("```"):
                blocks.append(fence)
                fence = None
            else:
                fence[2].append(line)
        elif line.startswith("```"):
            fence = (line[3:].strip(), anchor, [])
        elif line.startswith("    ") and line.strip() and (indented or not prev.strip()):
            if not indented:
                blocks.append(("sh", anchor, []))
            blocks[-1][2].append(line[4:])
            indented = True
        elif line.strip():
            indented = False
            lead = re.match(r"#+ .*|\*\*[^*]+\*\*", line)
            anchor = lead.group(0) if lead else anchor
        prev = line
    return blocks


def readme_commands() -> list[str]:
    """Every command of the pages' shell blocks, continuation lines joined, comments dropped."""
    out, pending = [], ""
    for lang, _, lines in readme_blocks():
        if lang not in SHELL:
            continue
        for line in lines:
            text = (pending + " " + line.strip()) if pending else line.strip()
            if text.endswith("\\"):
                pending = text[:-1].strip()
                continue
            pending = ""
            text = re.sub(r"(^|\s+)#.*$", "", text).strip()
            if text:
                out.append(text)
    return out


def _elsewhere(cmd: str) -> bool:
    return any(cmd == k or cmd.startswith(k + " ") for k in ELSEWHERE)


@pytest.fixture(scope="module")
def place(tmp_path_factory, tiny):
    """A user's folder: a fresh home (settings, library, Hugging Face cache), the synthetic
    files under the names the pages use, and a local hub serving a published layout."""
    home = tmp_path_factory.mktemp("home")
    work = home / "work"
    work.mkdir()
    t, d = Path(tiny["target"]), Path(tiny[1.0])
    (home / "models").mkdir()
    shutil.copy(t, home / "models" / "gemma-4-E4B-it-Q4_K_M.gguf")
    shutil.copy(d, home / "models" / "gemma-4-E4B-it-assistant-Q8_0.gguf")
    for name in ("gemma-4-E4B-it-Q4_K_M.gguf", "gemma-4-E4B-it-assistant-Q8_0.gguf"):
        shutil.copy(home / "models" / name, work / name)
    from PIL import Image

    Image.new("RGB", (64, 48), (200, 120, 40)).save(work / "photo.png")
    hub = Hub()
    hub.add(ENGINE_REPO, "gemma-4-E4B-it-Q4_K_M.gguf", t.read_bytes())
    hub.add(ENGINE_REPO, "mtp-gemma-4-E4B-it-Q8_0.gguf", d.read_bytes())
    hub.add(ENGINE_REPO, "README.md", b"# card\n")
    hub.start()
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_DATA_HOME": str(home / ".local/share"), "XDG_CACHE_HOME": str(home / ".cache"),
           "XDG_STATE_HOME": str(home / ".local/state"), "TANDEM_DATA_DIR": str(home / "tandem-data"),
           "HF_ENDPOINT": hub.url, "HF_HOME": str(home / "hf"), "QT_QPA_PLATFORM": "offscreen"}
    env.pop("HF_HUB_OFFLINE", None)
    yield {"home": home, "work": work, "env": env}
    hub.stop()


def run(place, cmd: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`cmd` as a page writes it, with `.venv/bin/tandem` the installed console script."""
    args = shlex.split(cmd)
    assert args[0] == ".venv/bin/tandem", cmd
    r = subprocess.run([str(TANDEM), *args[1:]], cwd=place["work"], env=place["env"], capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, f"{cmd}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return r


def concrete(cmd: str, **values) -> str:
    """A line of a page made runnable: [optional parts] kept, placeholders replaced."""
    cmd = re.sub(r"\[([^\]]*)\]", r"\1", cmd).replace("~/", "$HOME/")
    cmd = cmd.replace("$HOME/", values.pop("home", "") + "/")
    for k, v in values.items():
        cmd = re.sub(rf"(?<![\w./-]){re.escape(k)}(?![\w-])", v, cmd)
    return cmd


class Served:
    """`tandem serve` started as a page says, until stopped."""

    def __init__(self, place, cmd: str):
        args = shlex.split(cmd)
        self.proc = subprocess.Popen([str(TANDEM), *args[1:]], cwd=place["work"], env=place["env"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        port = args[args.index("--port") + 1]
        self.url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 120
        while True:
            assert self.proc.poll() is None, self.proc.stdout.read()
            try:
                openai.OpenAI(base_url=self.url, api_key="none", max_retries=0, timeout=2).models.list()
                return
            except openai.APIConnectionError:
                assert time.monotonic() < deadline, "tandem serve did not start listening"
                time.sleep(0.3)

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGINT)  # Ctrl+C, as a user stops it
        out, _ = self.proc.communicate(timeout=60)
        return out


def test_every_readme_block_is_run():
    """Each command of the pages' shell blocks is run below, or named in ELSEWHERE with the
    reason; each other block is named in OTHER_BLOCKS (the Python ones are the blocks the tests
    below run); and nothing here names a command no page has any longer."""
    commands = readme_commands()
    missing = [c for c in commands if not _elsewhere(c) and c not in RUNNERS]
    assert not missing, "commands of the pages no test here runs:\n" + "\n".join(missing)
    others = [(lang, anchor) for lang, anchor, _ in readme_blocks() if lang not in SHELL]
    unknown = [b for b in others if b not in OTHER_BLOCKS]
    assert not unknown, f"blocks of the pages no test here knows: {unknown}"
    for lang, anchor, lines in readme_blocks():
        if lang == "python":
            assert "\n".join(lines) + "\n" == python_block(anchor), anchor  # the block its test runs
    stale = [c for c in [*RUNNERS, *ELSEWHERE] if c not in IN_PROSE
             and not any(c == x or x.startswith(c + " ") for x in commands)]
    assert not stale, f"commands here no page has any longer: {stale}"
    assert len(commands) >= 15  # the blocks were read at all
    test_command = next(c for c in commands if "pytest" in c and "install.sh" in c)
    assert (ROOT / ".ci" / "run").read_text().rstrip().splitlines()[-1] == test_command  # CI runs what it says


def _streamed(r, work) -> bool:
    return bool(r.stdout.strip()) and "tok/s" in r.stderr


def _json_reply(mode: str):
    def check(r, work) -> bool:
        out = json.loads(r.stdout)
        return bool(out["text"]) and out["finish_reason"] in ("stop", "length") and out["stats"]["mode"] == mode
    return check


def _suite_rows(out: str) -> bool:
    """The edit suite's two groups, each with a row per draft source and no mismatch."""
    groups = re.split(r"^(?=\S.*\(\d+ prompts\):$)", out, flags=re.M)
    tables = {g.splitlines()[0]: g for g in groups if "prompts):" in g.splitlines()[0]}
    if set(tables) != {"code edits (4 prompts):", "prose and explaining code (2 prompts):"}:
        return False
    for table in tables.values():
        rows = [line.split() for line in table.splitlines() if line.split()[:1] in (["mtp"], ["lookup"], ["hybrid"])]
        if [row[0] for row in rows] != ["mtp", "lookup", "hybrid"] or any(row[-1] != "0" for row in rows):
            return False
    return True


# The Use section, in its order (test models, replies, JSON, bench), each command with what its
# output must show (r: the finished process, work: the folder it ran in); auto drafts with MTP and lookup
USE = {
    ".venv/bin/tandem --help": lambda r, work: all(re.search(rf"^\s+{name}\s+\S", r.stdout, re.M) for name in (
        "generate", "bench", "serve", "models", "make-test-models")),
    ".venv/bin/tandem --version": lambda r, work: r.stdout.startswith("tandem "),
    ".venv/bin/tandem make-test-models models --size tiny --agreement 0.8": lambda r, work: all(
        (work / "models" / name).exists() for name in ("tiny-target.gguf", "tiny-drafter-a0.8.gguf")),
    '.venv/bin/tandem generate --model models/tiny-target.gguf --drafter models/tiny-drafter-a0.8.gguf "Hello"':
        _streamed,
    '.venv/bin/tandem generate -m T.gguf -d D.gguf --no-mtp --json "Hello"': _json_reply("baseline"),
    ".venv/bin/tandem bench --model T.gguf --drafter D.gguf --draft-max auto 1 2 3 4 --json bench.json":
        lambda r, work: "speed-up" in r.stdout and bool(json.loads((work / "bench.json").read_text())["mtp"]),
    '.venv/bin/tandem generate -m T.gguf --spec lookup "Hello"': _streamed,
    ".venv/bin/tandem bench -m T.gguf -d D.gguf --suite edits --draft-max 3": lambda r, work: _suite_rows(r.stdout),
    '.venv/bin/tandem generate -m T.gguf -d D.gguf [--mmproj P.gguf] --image photo.png --json "What is this?"':
        _json_reply("hybrid"),
}
def _downloaded_pair(r) -> bool:
    """The target and its drafter were downloaded: the output names both files, and they are there."""
    paths = dict(re.findall(r"^(target|drafter):\s+(\S+)$", r.stdout, re.M))
    return set(paths) == {"target", "drafter"} and all(Path(p).is_file() for p in paths.values())


# the Models section, in its order, each with what its output (or the folder) must show
MODELS = {
    ".venv/bin/tandem models list": lambda r, work: "gemma-4-e4b" in r.stdout,
    ".venv/bin/tandem models download gemma-4-e4b --quant Q4_K_M [--dir FOLDER]":
        lambda r, work: (work / "downloaded" / "gemma-4-E4B-it-Q4_K_M.gguf").exists(),
    ".venv/bin/tandem models download ggml-org/gemma-4-E4B-it-GGUF:Q4_K_M": lambda r, work: _downloaded_pair(r),
    ".venv/bin/tandem models import ~/models/gemma-4-E4B-it-Q4_K_M.gguf":
        lambda r, work: "assistant" in r.stdout,  # its drafter was found beside it
    ".venv/bin/tandem models verify": lambda r, work: "gemma-4-E4B-it-Q4_K_M" in r.stdout,
}
SERVE = ".venv/bin/tandem serve -m gemma-4-E4B-it-Q4_K_M.gguf -d gemma-4-E4B-it-assistant-Q8_0.gguf [--port 8080]"
REMOTE = [
    '.venv/bin/tandem generate --server http://gpu-box:8080/v1 [--api-key K] [--model NAME] --json "Hello"',
    ".venv/bin/tandem bench --server http://gpu-box:8080/v1 --baseline-server http://gpu-box:8081/v1",
]
LOAD = ".venv/bin/tandem bench --server http://127.0.0.1:8080/v1 --concurrency 1 2 4 8"
LOAD_SCRIPT = (".venv/bin/python scripts/bench_concurrency.py -m 26b-a4b-target.gguf -d 26b-a4b-drafter-a1.gguf "
               "--levels 1 4 8 --fixed 1 2 3 --threads 2 --rounds 3 --json docs/figures/concurrency_26b_a4b.json")
GPU_BENCH = 'LLAMA_SDIST=llama_cpp_python-0.3.36.tar.gz bash scripts/gpu_bench.sh [--sizes "e4b 12b 26b-a4b 31b"] [--out gpu-bench]'
GPU_BENCH_CPU = 'bash scripts/gpu_bench.sh --cpu [--sizes "e4b 26b-a4b"]'
CLUSTER = (".venv/bin/tandem models cluster gemma-4-E4B-it-assistant-Q8_0.gguf [--clusters N] [--top-k K] "
           "[--out FILE]")
HEAD_SCRIPT = ".venv/bin/python scripts/bench_draft_head.py [--sizes e2b e4b] --json docs/figures/draft_head.json"
SPEED_SCRIPT = (".venv/bin/python scripts/bench_speed.py -m e2b-target.gguf -d e2b-drafter-a1.gguf "
                "-d e2b-drafter-a0.35.gguf --json docs/figures/speed_e2b.json")
GRAMMAR_SCRIPTS = [
    ".venv/bin/python scripts/bench_grammar.py -m gemma-3-270m-q4_k_m.gguf --json-schema "
    "resources/prompts/schemas/film.json --json docs/figures/grammar_gemma3.json",
    ".venv/bin/python scripts/bench_grammar.py -m e2b-target.gguf -d e2b-drafter-a1.gguf --json-schema "
    "resources/prompts/schemas/film.json resources/prompts/schemas/inventory.json --rounds 1 --max-tokens 96 "
    "--json docs/figures/grammar_e2b.json"]
APIS_SCRIPT = (".venv/bin/python scripts/bench_apis.py -m e2b-target.gguf -d e2b-drafter-a1.gguf --threads 2 "
               "--json docs/figures/apis.json")
RUNNERS = {*USE, *MODELS, SERVE, *REMOTE, LOAD, LOAD_SCRIPT, CLUSTER, GPU_BENCH, GPU_BENCH_CPU, HEAD_SCRIPT, SPEED_SCRIPT,
           *GRAMMAR_SCRIPTS, APIS_SCRIPT}
IN_PROSE = {LOAD}  # run too, though a page names it in its text (as URL), not in a block


def test_use_section(place):
    for cmd, shows in USE.items():
        r = run(place, concrete(cmd, **{"T.gguf": "models/tiny-target.gguf", "D.gguf": "models/tiny-drafter-a0.8.gguf",
                                        "P.gguf": "models/mmproj-tiny.gguf"}))
        assert shows(r, place["work"]), f"{cmd}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"


def test_models_section(place):
    for cmd, shows in MODELS.items():
        r = run(place, concrete(cmd, FOLDER=str(place["work"] / "downloaded"), home=str(place["home"])))
        assert shows(r, place["work"]), f"{cmd}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"


def test_serve_section_and_clients_of_it(place):
    """`tandem serve` as a page starts it; the openai SDK lists the model and chats; the
    remote commands of "Bigger models" talk to it; Ctrl+C stops it."""
    port = str(free_port())
    server = Served(place, concrete(SERVE, **{"8080": port}))
    try:
        c = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=60)
        assert [m.id for m in c.models.list().data] == ["gemma-4-E4B-it-Q4_K_M"]
        r = c.chat.completions.create(model="gemma-4-E4B-it-Q4_K_M", max_tokens=16,  # fixed k: auto may pause
                                      messages=[{"role": "user", "content": "Hello"}],
                                      extra_body={"tandem": {"draft_max": 3}})
        assert r.choices[0].message.content and r.model_extra["timings"]["draft_n"] > 0
        for cmd in REMOTE:
            line = concrete(cmd, **{"http://gpu-box:8080/v1": server.url, "http://gpu-box:8081/v1": server.url,
                                    "K": "none", "NAME": "gemma-4-E4B-it-Q4_K_M"})
            out = run(place, line).stdout
            if "--json" in line:
                assert json.loads(out)["engine"] == "tandem"
            else:
                assert "speed-up" in out
        out = run(place, concrete(LOAD, **{"http://127.0.0.1:8080/v1": server.url}) + " --max-tokens 16").stdout
        rows = [line.split() for line in out.splitlines() if line.startswith("tandem ")]
        assert len(rows) == 8 and all(r[-2] == "0" for r in rows), out  # 4 levels, drafting on and off; no errors
    finally:
        out = server.stop()
    assert "Serving gemma-4-E4B-it-Q4_K_M" in out and server.proc.returncode in (0, -signal.SIGINT, 130)


def test_load_benchmark_script(place, tiny, llama_server_bin):
    """The speed page's side-by-side load benchmark, on the tiny pair: tandem serve and llama-server,
    drafting on and off, each level's replies checked against the prompt's reply alone."""
    out = place["work"] / "concurrency.json"
    args = shlex.split(concrete(LOAD_SCRIPT, **{"26b-a4b-target.gguf": str(tiny["target"]),
                                                "26b-a4b-drafter-a1.gguf": str(tiny[1.0]),
                                                "docs/figures/concurrency_26b_a4b.json": str(out)}))
    assert args[:2] == [".venv/bin/python", "scripts/bench_concurrency.py"]
    # shorter here: two levels, one round, 8 tokens (the later options win)
    r = subprocess.run([sys.executable, str(ROOT / args[1]), *args[2:], "--levels", "1", "2", "--max-tokens", "8",
                        "--rounds", "1", "--llama-server", llama_server_bin, "--ctx", "2048"], cwd=place["work"],
                       env=place["env"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [line for line in r.stdout.splitlines() if line.startswith(("Tandem serve", "llama-server"))]
    assert len(rows) == 14, r.stdout  # auto, k=1..3 and no drafter; llama-server's two; at 2 levels
    assert all(line.split()[-1] in ("1/1", "2/2") for line in rows), r.stdout  # as alone
    sys.path.insert(0, str(ROOT))
    from scripts.bench_concurrency import markdown

    table = markdown(json.loads(out.read_text("utf-8")))  # the file the pages' table comes from
    assert table.count("\n") == 8 and "| Tandem serve, MTP k=3 |" in table


@pytest.mark.timeout(1200)  # three llama-servers on a 262k vocabulary and a k-means of its head, beside other tests
def test_draft_head_benchmark_script(place, clustered, llama_server_bin, tmp_path):
    """The speed page's clustered-head benchmark as it runs, on the tiny pair with a clustered head in
    place of the sizes' pairs (--pair), 8 tokens: both heads and llama-server's three, one table."""
    out = tmp_path / "draft_head.json"
    args = shlex.split(concrete(HEAD_SCRIPT, **{"docs/figures/draft_head.json": str(out)}))
    assert args[:2] == [".venv/bin/python", "scripts/bench_draft_head.py"]
    r = subprocess.run([sys.executable, str(ROOT / args[1]), *args[2:], "--pair", "tiny", str(clustered["target"]),
                        str(clustered["ordered"]), "--max-tokens", "8", "--llama-server", llama_server_bin],
                       cwd=place["work"], env=place["env"], capture_output=True, text=True, timeout=1100)
    assert r.returncode == 0, r.stderr[-3000:]
    sys.path.insert(0, str(ROOT))
    from scripts.bench_draft_head import markdown

    data = json.loads(out.read_text("utf-8"))
    got = data["pairs"]["tiny"]
    assert got["full"]["head"].startswith("full") and got["clustered"]["head"].startswith("clustered: 32 of 2,048")
    assert got["own"]["head"] == got["clustered"]["head"]  # Tandem's own, of the same shape
    assert got["full"]["identical"] == got["clustered"]["identical"] == got["own"]["identical"] == \
        got["clustered"]["prompts"]
    assert set(got["llama-server"]) == {"none", "draft-mtp k=3", "draft-mtp k=8"}
    assert markdown(data) in r.stdout and markdown(data).count("\n") == 5
    assert "| tiny | Tandem's own k-means, clustered: 32 of 2,048" in markdown(data)


def test_cluster_command(place):
    """`tandem models cluster` as the speed page writes it: the drafter written again with
    Tandem's own clustered head, which the patched llama.cpp then drafts with."""
    r = run(place, concrete(CLUSTER, N="4", K="2", FILE="own-head.gguf"))
    made = Path(re.search(r"^drafter: (\S+)$", r.stdout, re.M).group(1))
    assert made == place["work"] / "own-head.gguf"
    assert "4 clusters" in r.stderr and "pass 6 of 6" in r.stderr
    r = run(place, '.venv/bin/tandem generate -m gemma-4-E4B-it-Q4_K_M.gguf -d own-head.gguf --draft-head clustered '
                   '--draft-max 3 --json "Hello"')
    assert json.loads(r.stdout)["stats"]["draft_head"] == "clustered: 2 of 4 clusters (256 of 512 tokens)"
    again = run(place, concrete(CLUSTER, N="4", K="2", FILE="own-head.gguf").replace(
        "gemma-4-E4B-it-assistant-Q8_0.gguf", "own-head.gguf"))
    assert "has a clustered head already" in again.stdout
    # the same options again: the file made before; other options: made again with them
    assert "(made before)" in run(place, concrete(CLUSTER, N="4", K="2", FILE="own-head.gguf")).stdout
    r = run(place, concrete(CLUSTER, N="4", K="1", FILE="own-head.gguf"))
    assert "(made before)" not in r.stdout and "pass 6 of 6" in r.stderr
    r = _tandem(place, *shlex.split(concrete(CLUSTER, N="4", K="9", FILE="own-head.gguf"))[1:])
    assert r.returncode == 2 and "--top-k must be between 1 and the 4 clusters (got 9)" in r.stderr, r.stderr
    r = _tandem(place, *shlex.split(concrete(CLUSTER, N="3", K="1", FILE="x.gguf"))[1:])
    assert r.returncode == 2 and "--clusters must divide the 512 tokens evenly (got 3)" in r.stderr, r.stderr


def test_speed_page_scripts(place, tiny, tmp_path):
    """The speed page's one-reply, schema and API benchmarks as it runs them, on the tiny pair for
    every model named (8 tokens, one round): each writes its figures file, and the page's table of
    that file is what it printed."""
    sys.path.insert(0, str(ROOT))
    files = {"e2b-target.gguf": str(tiny["target"]), "gemma-3-270m-q4_k_m.gguf": str(tiny["target"]),
             "e2b-drafter-a1.gguf": str(tiny[1.0]), "e2b-drafter-a0.35.gguf": str(tiny[0.0])}
    shorter = {"bench_speed.py": ["--max-tokens", "8", "--draft-max", "auto", "2"],
               "bench_grammar.py": ["--max-tokens", "8", "--rounds", "1"],
               "bench_apis.py": ["--max-tokens", "8", "--rounds", "1"]}
    for cmd in [SPEED_SCRIPT, *GRAMMAR_SCRIPTS, APIS_SCRIPT]:
        args = shlex.split(concrete(cmd, **files))
        out = tmp_path / Path(args[-1]).name
        args[-1] = str(out)
        assert args[:2] == [".venv/bin/python", args[1]] and args[1].startswith("scripts/")
        r = subprocess.run([sys.executable, str(ROOT / args[1]), *args[2:], *shorter[Path(args[1]).name]],
                           cwd=ROOT, env=place["env"], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{cmd}\n{r.stderr[-3000:]}"
        data = json.loads(out.read_text("utf-8"))
        table = importlib.import_module("scripts." + Path(args[1]).stem).markdown(data)
        assert table in r.stdout and table.count("\n") >= 2, r.stdout
        assert data["command"].startswith(args[1]) and data["commit"]


def test_gpu_benchmark_script(place, llama_server_bin, tmp_path):
    """The GPU script as a page runs it, on the CPU (--cpu) with the tiny pair: it writes the
    pair, measures both servers and prints one table. The GPU line itself is checked for what
    this machine can check: without a GPU build and no wheel to install, it says so in one line."""
    env = {**place["env"], "LLAMA_SERVER": llama_server_bin}
    line = concrete(GPU_BENCH_CPU, **{'"e4b 26b-a4b"': "tiny"}) + f" --tokens 8 --levels '1 2' --out {tmp_path / 'cpu'}"
    r = subprocess.run(line, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [x for x in r.stdout.splitlines() if x.startswith("| tiny |")]
    assert len(rows) == 2 and all(len(x.split("|")) == 11 for x in rows), r.stdout
    assert (tmp_path / "cpu" / "tiny.json").exists() and (tmp_path / "cpu" / "table.md").read_text() in r.stdout
    if "GPU offload: no" in subprocess.run([str(ROOT / ".venv" / "bin" / "tandem"), "--version"],
                                           capture_output=True, text=True).stdout:
        gpu = concrete(GPU_BENCH, **{"llama_cpp_python-0.3.36.tar.gz": str(tmp_path / "none.tar.gz"),
                                     "gpu-bench": str(tmp_path / "gpu")})
        r = subprocess.run(gpu.replace("LLAMA_SDIST=" + str(tmp_path / "none.tar.gz"), "LLAMA_SDIST="), shell=True,
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and "give LLAMA_WHEEL (a CUDA build) or LLAMA_SDIST" in r.stderr, r.stderr


def python_block(section: str) -> str:
    """The first ```python block after the heading (or lead-in) `section` of any page."""
    text = docs.text()
    return text[text.index(section):].split("```python\n", 1)[1].split("```", 1)[0]


def test_python_api_example(place, tiny):
    """The Python API page's Python block, with the synthetic pair for its file names."""
    block = python_block("# The Python API")
    code = block.replace('"target.gguf"', repr(str(tiny["target"]))).replace('"drafter.gguf"', repr(str(tiny[1.0])))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "tok/s" in r.stdout


# an agent's run with the pages' set-up: the synthetic model's reply never ends by itself, and
# the SDK takes a reply cut at max_output_tokens as an error (as OpenAI's), so stop strings end it
AGENT_RUN = """
import asyncio
from agents import Agent, ModelSettings, Runner
stops = ["\\n", "0", "!", "a", "e", "5", "x"]
agent = Agent(name="helper", instructions="Be brief.", model="gemma-4",
              model_settings=ModelSettings(max_tokens=120, extra_body={"stop": stops}))
print("ANSWER", repr(asyncio.run(Runner.run(agent, "Say hi")).final_output))
"""


def test_agents_sdk_set_up(tools_server):
    """The Coding agents section's Agents SDK block, as written (the server's address put in),
    then an agent on its default model (the Responses API) answers."""
    block = python_block("**OpenAI Agents SDK**")
    assert "http://127.0.0.1:8080/v1" in block
    code = block.replace("http://127.0.0.1:8080/v1", tools_server.url) + AGENT_RUN
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0 and "ANSWER '" in r.stdout, r.stderr[-2000:]


def test_window_starts(place):
    """`tandem`, the first command of the README: the window opens (offscreen) and stays up,
    on a first run with nothing loaded."""
    p = subprocess.Popen([str(TANDEM)], cwd=place["work"], env=place["env"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        out = p.communicate(timeout=8)[0]  # returns only if it ends (a crash) within the 8 s
        pytest.fail(f"the window ended, exit {p.returncode}:\n{out[-2000:]}")
    except subprocess.TimeoutExpired:
        pass  # still up
    finally:
        p.terminate()
        p.communicate(timeout=30)
    logs = list((place["home"] / ".local/state").rglob("tandem.log")) or list(place["home"].rglob("tandem.log"))
    assert logs and "starting Tandem" in logs[0].read_text()


def test_each_command_has_its_help(place):
    """`tandem COMMAND --help`, for every command `tandem --help` lists."""
    from engine.cli import COMMANDS

    for name in [*COMMANDS, "models list", "models download", "models import", "models verify", "models cluster"]:
        r = run(place, f".venv/bin/tandem {name} --help")
        assert r.stdout.startswith(f"usage: tandem {name}"), name
    bad = subprocess.run([str(TANDEM), "nonsense"], cwd=place["work"], env=place["env"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "invalid choice: 'nonsense'" in bad.stderr and len(bad.stderr.splitlines()) == 1


def _tandem(place, *args, env=None, timeout=120):
    return subprocess.run([str(TANDEM), *map(str, args)], cwd=place["work"], env=env or place["env"],
                          capture_output=True, text=True, timeout=timeout)


def test_serve_refuses_a_bad_or_busy_port_in_one_line_before_saying_it_serves(place, tiny):
    import socket

    r = _tandem(place, "serve", "-m", tiny["target"], "--port", "99999")
    assert r.returncode == 2 and "between 1 and 65535" in r.stderr and "Serving" not in r.stdout
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        r = _tandem(place, "serve", "-m", tiny["target"], "--port", busy.getsockname()[1])
    assert r.returncode == 2 and "cannot listen on 127.0.0.1" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "Serving" not in r.stdout and "Traceback" not in r.stderr
    assert "--server" not in _tandem(place, "serve", "--help").stdout  # serve serves; it does not connect


def test_the_window_without_a_display_says_so_in_one_line(place):
    env = {k: v for k, v in place["env"].items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    r = _tandem(place, env=env)
    assert r.returncode == 2 and "no display" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_version_names_the_llama_cpp_build(place):
    out = _tandem(place, "--version").stdout
    assert out.startswith("tandem ") and "llama-cpp-python 0.3.36" in out and "GPU offload" in out


def test_generate_keeps_control_characters_off_the_terminal(place, tiny):
    """Model text with ESC and NUL, streamed to a terminal (a pty): shown as U+FFFD, never raw."""
    import pty

    out, sub = pty.openpty()
    cmd = [str(TANDEM), "generate", "-m", str(tiny["target"]), "--max-tokens", "60", "Give me a person as JSON"]
    p = subprocess.Popen(cmd, cwd=place["work"], env=place["env"], stdout=sub, stderr=subprocess.DEVNULL)
    os.close(sub)
    data = b""
    while True:
        try:
            chunk = os.read(out, 4096)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    p.wait(60)
    os.close(out)
    raw = subprocess.run(cmd, cwd=place["work"], env=place["env"], capture_output=True, timeout=60).stdout
    assert any(b < 0x20 and b not in (9, 10, 13) for b in raw)  # the model does write control bytes (to a pipe, as is)
    assert not any(b < 0x20 and b not in (9, 10, 13) for b in data) and "\ufffd".encode() in data


def test_generate_no_mtp_on_tandem_serve(place, tiny):
    port = free_port()
    server = Served(place, f".venv/bin/tandem serve -m {tiny['target']} -d {tiny[1.0]} --port {port}")
    try:
        base = json.loads(run(place, f'.venv/bin/tandem generate --server {server.url} --no-mtp --json "Hi"').stdout)
        mtp = json.loads(run(place, f'.venv/bin/tandem generate --server {server.url} --draft-max 3 --json "Hi"').stdout)
        assert base["stats"]["draft_tokens"] == 0 < mtp["stats"]["draft_tokens"] and base["text"] == mtp["text"]
    finally:
        server.stop()
