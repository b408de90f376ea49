#!/usr/bin/env python3
"""Run llama.cpp's own server tests (tools/server/tests/unit) against llama-server and against
`tandem serve`, on the same local model (the synthetic Gemma 4 pair with the real chat template),
and print per file how many pass on each, and the tests that pass on llama-server but not on
Tandem with the first line of their failure; those that need what Tandem chose not to build
(DELIBERATE: CORS as loose as llama-server's, other models' templates, per-slot contexts, ...)
are listed apart, with the reason.

    .venv/bin/python scripts/llama_server_tests.py                  # the default files, both servers
    .venv/bin/python scripts/llama_server_tests.py --files test_basic.py test_tokenize.py
    .venv/bin/python scripts/llama_server_tests.py --servers tandem -k anthropic
    .venv/bin/python scripts/llama_server_tests.py --tandem-rev HEAD  # tandem as committed

The tests come from the pinned llama-cpp-python sdist (pip download, extracted once into
~/.cache/tandem/llama-src, as packaging/build-llama-server.sh does); they run in their own venv
there (pytest, openai 2.x, requests, ...), one server at a time. The tests start "llama-server"
from $LLAMA_SERVER_BIN_PATH: scripts/llama_server_shim.py, which starts the real one or tandem
serve with our model instead of the Hugging Face models they name, llama-server with --jinja
(its built-in templates do not know Gemma 4's; tandem always uses the model's Jinja template).
Tests marked slow are left out unless --slow, as tests.sh does. Tests that check the text of
llama.cpp's tiny story model fail on both: the comparison is test by test. Nothing is downloaded
from Hugging Face: tests that need it fail on both.

This file is also the pytest plugin (-p llama_server_tests) that skips the tests' model
download at session start (ServerPreset.load_all).
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import shutil
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# as engine.testmodels.llama_src_cache(), which also holds the sdist (its version as packaging/build-llama-server.sh)
CACHE = Path(os.environ.get("TANDEM_LLAMA_SRC", Path.home() / ".cache" / "tandem" / "llama-src"))
TEST_REQS = ["pytest", "pytest-timeout", "requests", "openai~=2.14.0", "filelock", "wget",
             "prometheus-client"]
DEFAULT_FILES = ["test_basic.py", "test_tokenize.py", "test_security.py", "test_compat_anthropic.py",
                 "test_compat_oai_responses.py", "test_chat_completion.py", "test_completion.py",
                 "test_tool_call.py", "test_template.py", "test_metrics.py", "test_stream.py",
                 "test_ctx_shift.py", "test_ignore_eos.py"]


# llama-server's tests that need what Tandem chose not to build (fnmatch patterns on
# "file::test"), with the reason; the report names them apart from the gaps still to close
DELIBERATE = {  # the first pattern that matches gives the reason
    "test_security.py::test_cors_proxy_*": "the web UI's CORS/MCP proxy: Tandem has no web UI and fetches no URLs",
    "test_security.py::test_cors_*": "CORS: pages from other origins get a 403 unless --cors allows them "
                                     "(stricter than llama-server, by choice)",
    "test_template.py::*": "another model's template (--chat-template-file, --reasoning): Tandem renders the "
                           "model's own",
    "test_chat_completion.py::test_chat_template_*": "the prompt rendered with another model's template "
                                                     "(--chat-template-file): Tandem renders the model's own",
    "test_chat_completion.py::test_context_size_exceeded*": "per-slot n_ctx: Tandem's sequences share one context",
    "test_chat_completion.py::test_verbose_debug": "__verbose, a dump of the request's internals (a debug aid): "
                                                   "verbose: true is refused by name",
    "test_chat_completion.py::test_return_progress*": "prompt_progress chunks while a prompt is read (llama-server's "
                                                      "web UI shows them; no agent or SDK reads them): "
                                                      "return_progress is refused by name",
    "test_compat_oai_responses.py::test_responses_stream_with_llama_telemetry": "prompt_progress chunks (see "
                                                                                "test_return_progress)",
    "test_chat_completion.py::test_invalid_chat_completion_req[[]messages7[]]": "two assistant messages at the end: "
        "llama-server continues a final assistant message (a prefill) and so refuses two; Tandem closes every "
        "assistant turn and the model's template renders consecutive ones as one turn",
    "test_compat_anthropic.py::test_anthropic_thinking_history_in_template": "<think> tags of another model's "
        "template (--chat-template-file Qwen3): the model's own renders the reasoning (Gemma 4: its thought channel)",
    "test_ctx_shift.py::test_ctx_shift_disabled_long_prompt": "per-slot n_ctx: Tandem's sequences share one context",
    "test_basic.py::test_server_props": "per-slot n_ctx: Tandem's sequences share one context",
    "test_basic.py::test_server_slots": "per-slot n_ctx (and /slots is always on: no --slots/--no-slots)",
    "test_metrics.py::test_metrics_disabled": "/metrics is always on (counters only; no --metrics flag)",
    "test_compat_anthropic.py::test_anthropic_vision_format_accepted": "a picture for a model without a projector is "
                                                                       "a 400 naming it (llama-server: a 500)",
    "test_compat_anthropic.py::test_anthropic_tool_result_with_image": "a picture for a model without a projector is "
                                                                       "a 400 naming it (llama-server: a 500)",
    "test_stream.py::*": "router mode's resumable streams (X-Conversation-Id, /v1/stream): Tandem serves one "
                         "model, no router",
}


def deliberate(key: tuple[str, str]) -> str | None:
    name = f"{key[0]}::{key[1]}"
    return next((why for pattern, why in DELIBERATE.items() if fnmatch.fnmatchcase(name, pattern)), None)


# ---- the pytest plugin (runs inside the tests' venv) ----

def pytest_configure(config):
    """No model downloads at session start: the shim always serves our local model."""
    sys.path.insert(0, os.getcwd())
    import utils  # tools/server/tests/utils.py (conftest.py does `from utils import *`)

    utils.ServerPreset.load_all = staticmethod(lambda: None)


# ---- the runner ----

def tests_dir() -> Path:
    sys.path.insert(0, str(ROOT))
    from engine.testmodels import llama_src  # the sdist fetched and extracted as the test models' vocabulary is

    return llama_src("vendor/llama.cpp/tools/server/tests")


def tests_python() -> Path:
    venv = CACHE / "venv"
    py = venv / "bin" / "python"
    marker = venv / ".tandem-reqs"
    if not (py.exists() and marker.exists() and marker.read_text() == "\n".join(TEST_REQS)):
        print("making the tests' venv (once)...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *TEST_REQS], check=True)
        marker.write_text("\n".join(TEST_REQS))
    return py


def llama_server_bin() -> str:
    out = subprocess.run(["bash", str(ROOT / "packaging" / "build-llama-server.sh")], capture_output=True,
                         text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def models() -> tuple[str, str]:
    sys.path.insert(0, str(ROOT))
    from engine.testmodels import make_test_models

    t, d = make_test_models(CACHE / "models", "tiny", 0.7, template="gemma4")
    return str(t), str(d)


def snapshot(rev: str, out: Path) -> Path:
    """The repository at `rev` (git archive) and a `tandem` that runs it with this venv."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], capture_output=True,
                         text=True, check=True).stdout.strip()
    snap = out / f"tandem-{sha}"
    snap.mkdir()
    arch = subprocess.run(["git", "-C", str(ROOT), "archive", sha], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(snap)], input=arch, check=True)
    exe = out / "tandem"
    exe.write_text(f"#!/bin/sh\nPYTHONPATH='{snap}' exec '{sys.executable}' -m app.main \"$@\"\n")
    exe.chmod(0o755)
    print(f"tandem from {rev} ({sha})", file=sys.stderr)
    return exe


def free_port(start: int) -> int:
    for p in range(start, start + 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
                return p
            except OSError:
                continue
    raise RuntimeError("no free port")


def run_suite(server: str, files: list[str], args, env_base: dict, out: Path) -> dict:
    """pytest for one server; {(file, test): (outcome, first line of the message)}."""
    xml = out / f"{server}.xml"
    log = out / f"{server}.log"
    env = {**env_base, "SHIM_SERVER": server, "PORT": str(free_port(args.port))}
    cmd = [str(env_base["_TESTS_PY"]), "-m", "pytest", "-p", "no:cacheprovider", "-p", "llama_server_tests",
           "--timeout", str(args.timeout), "-rA", "-q", f"--junitxml={xml}",
           *[f"unit/{f}" for f in files]]
    if args.k:
        cmd += ["-k", args.k]
    if not args.slow:
        cmd += ["-m", "not slow"]  # as llama.cpp's tests.sh without SLOW_TESTS=1
    t = time.time()
    print(f"[{server}] running {len(files)} files (log: {log})...", file=sys.stderr, flush=True)
    with open(log, "w") as f:
        subprocess.run(cmd, cwd=env_base["_TESTS_DIR"], env=env, stdout=f, stderr=subprocess.STDOUT)
    print(f"[{server}] done in {time.time() - t:.0f} s", file=sys.stderr, flush=True)
    return parse_junit(xml)


def parse_junit(xml: Path) -> dict:
    res = {}
    if not xml.exists():
        return res
    for tc in ET.parse(xml).getroot().iter("testcase"):
        file = tc.get("classname", "").split(".")[-1] + ".py"
        outcome, msg = "passed", ""
        for child in tc:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                text = child.get("message") or child.text or ""
                msg = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
                break
        res[(file, tc.get("name", ""))] = (outcome, msg)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", nargs="+", default=DEFAULT_FILES, help="test files in tools/server/tests/unit")
    ap.add_argument("--servers", nargs="+", default=["llama", "tandem"], choices=["llama", "tandem"])
    ap.add_argument("-k", help="pytest -k expression")
    ap.add_argument("--slow", action="store_true",
                    help="also the tests marked slow (test_tool_call's ~200 real-model cases: ~2x longer)")
    ap.add_argument("--tandem-rev", metavar="REV",
                    help="run tandem serve from this commit (git archive), not the working tree")
    ap.add_argument("--timeout", type=int, default=120, help="per test, seconds")
    ap.add_argument("--port", type=int, default=28080, help="first port to try for the servers")
    ap.add_argument("--out", default=str(CACHE / "runs" / "last"), help="logs and junit XML")
    ap.add_argument("--no-drafter", action="store_true", help="both servers without the MTP drafter")
    args = ap.parse_args()

    tdir = tests_dir()
    py = tests_python()
    target, drafter = models()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    shim = out / "llama-server"  # the "binary" the tests start
    shim.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{ROOT / 'scripts' / 'llama_server_shim.py'}' \"$@\"\n")
    shim.chmod(0o755)
    tandem = Path(sys.executable).parent / "tandem"
    if args.tandem_rev:
        tandem = snapshot(args.tandem_rev, out)
    env = {**os.environ, "LLAMA_SERVER_BIN_PATH": str(shim), "SHIM_TARGET": target,
           "SHIM_DRAFTER": "" if args.no_drafter else drafter, "SHIM_LLAMA_BIN": llama_server_bin(),
           "SHIM_TANDEM": str(tandem if tandem.exists() else "tandem"),
           "PYTHONPATH": str(ROOT / "scripts"), "LLAMA_CACHE": str(out / "llama-cache"),
           "_TESTS_PY": str(py), "_TESTS_DIR": str(tdir)}
    env.pop("DEBUG_EXTERNAL", None)

    results = {s: run_suite(s, args.files, args, env, out) for s in args.servers}
    report(results, args.files, args.servers)
    return 0


def report(results: dict, files: list[str], servers: list[str]) -> None:
    names = {"llama": "llama-server", "tandem": "tandem"}
    w = max(len(f) for f in files) + 2
    print(f"\n{'file':<{w}}{'tests':>6}" + "".join(f"{names[s]:>14}" for s in servers))
    tot = {s: 0 for s in servers}
    ntot = 0
    for f in files:
        keys = {k for s in servers for k in results[s] if k[0] == f}
        ntot += len(keys)
        row = f"{f:<{w}}{len(keys):>6}"
        for s in servers:
            n = sum(1 for k in keys if results[s].get(k, ("missing",))[0] == "passed")
            tot[s] += n
            row += f"{n:>14}"
        print(row)
    print(f"{'total':<{w}}{ntot:>6}" + "".join(f"{tot[s]:>14}" for s in servers))
    if servers == ["llama", "tandem"]:
        for title, a, b in (("pass on llama-server, not on tandem", "llama", "tandem"),
                            ("pass on tandem, not on llama-server", "tandem", "llama")):
            diff = sorted(k for k, v in results[a].items()
                          if v[0] == "passed" and results[b].get(k, ("missing", ""))[0] != "passed")
            chosen = [k for k in diff if b == "tandem" and deliberate(k)]
            print(f"\n{title}: {len(diff)}" + (f" ({len(chosen)} need what Tandem chose not to build)"
                                                if chosen else ""))
            for k in diff:
                if k not in chosen:
                    o, msg = results[b].get(k, ("missing", ""))
                    print(f"  {k[0]}::{k[1]}  [{o}] {msg[:300]}")
            for k in chosen:
                print(f"  {k[0]}::{k[1]}  [chosen not to build] {deliberate(k)}")


if __name__ == "__main__":
    sys.exit(main())
