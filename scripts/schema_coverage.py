"""Real-world JSON schemas, Tandem against llama-server: the JSONSchemaBench sample in
tests/data/jsonschemabench/ sent to `tandem serve` and to llama-server (built from the vendored
llama.cpp, --jinja, the same model file), one greedy chat request per schema and server with
response_format json_schema, and a side-by-side count of what came back:

  valid    a 200 that ended ("stop") with JSON that validates (`jsonschema`, formats checked)
  cut      a 200 that ran to max_tokens ("length"): not judged
  refused  a 400 (its reason is listed)
  invalid  a 200 that ended with JSON that does not parse or does not validate
  error    anything else (a 5xx, a dropped connection, a timeout)

Then every schema whose outcome differs between the two, and what each refusal was about, so a
keyword that one server refuses and the other silently ignores shows. Without -m it writes
the tiny synthetic Gemma 4 pair with Gemma 4's real tokenizer and template (random weights):
with the tests' synthetic vocabulary llama-server refuses every schema ("Failed to initialize
samplers"), so nothing would be compared. Both servers run on one thread by default: on a
busy two-core machine llama.cpp's threads wait on each other and a reply can take 10-25 times
as long (this measures coverage, not speed).

    .venv/bin/python scripts/schema_coverage.py [-m MODEL.gguf] [-d DRAFTER.gguf] [--max-tokens 256]
        [--only tandem|llama] [--llama-server BIN] [--json OUT.json] [--show N]
    .venv/bin/python scripts/schema_coverage.py --resample GIT_DIR   # rewrite the sample (see below)

The sample (tests/data/jsonschemabench/README.md): from each folder of JSONSchemaBench's data/,
the files in order of the SHA-256 of their names, skipping files over 32 KB, files absent from
the checkout and repeats of a content already taken, the first 8.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2 as httpx
import jsonschema

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "jsonschemabench"
PER_FOLDER = 8
MAX_BYTES = 32 * 1024
KINDS = ("valid", "cut", "refused", "invalid", "error")
PROMPT = "Give an example as JSON."


# ---- the sample -------------------------------------------------------------------------------
def resample(git_dir: str, out: Path = DATA) -> int:
    """Rewrite the sample from a JSONSchemaBench git directory (its HEAD)."""
    def git(*a):
        return subprocess.run(["git", "--git-dir", git_dir, *a], capture_output=True, check=True).stdout

    by: dict[str, list] = {}
    for line in git("ls-tree", "-r", "-l", "HEAD", "data/").decode().splitlines():
        meta, path = line.split("\t", 1)
        _, _, blob, size = meta.split()
        if not size.isdigit() or not path.endswith(".json"):  # "BAD": not in the checkout
            continue
        _, folder, name = path.split("/")
        by.setdefault(folder, []).append((hashlib.sha256(name.encode()).hexdigest(), name, blob, int(size)))
    for old in out.glob("*/*.json"):
        old.unlink()
    n = 0
    for folder, files in sorted(by.items()):
        seen, taken = set(), 0
        for _, name, blob, size in sorted(files):
            if taken == PER_FOLDER:
                break
            if size > MAX_BYTES or blob in seen:
                continue
            seen.add(blob)
            taken += 1
            (out / folder).mkdir(parents=True, exist_ok=True)
            (out / folder / name).write_bytes(git("cat-file", "blob", blob))
        n += taken
        print(f"{folder}: {taken}")
    print(f"{n} schemas from {git('rev-parse', 'HEAD').decode().strip()} into {out}")
    return 0


def schemas() -> list[Path]:
    return sorted(DATA.glob("*/*.json"))


# ---- servers ------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd: list[str], port: int, log: Path, timeout: float = 300) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            env={**os.environ, "LLAMA_ARG_N_GPU_LAYERS": "0", "PYTHONUNBUFFERED": "1"})
    t = time.time()
    while time.time() - t < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[0]} exited ({proc.returncode}):\n{log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"{cmd[0]} did not start")


def same_template(model, folder: Path) -> list[str]:
    """llama-server's arguments for Tandem's chat template where the GGUF has none (Gemma 3
    270M's package: Tandem falls back to Gemma's turns, llama-server to ChatML), so both
    servers see the same prompt."""
    import gguf

    if "tokenizer.chat_template" in gguf.GGUFReader(str(model)).fields:
        return []
    from engine.gemma4.chat import FALLBACK_TEMPLATE

    path = folder / "template.jinja"
    path.write_text(FALLBACK_TEMPLATE)
    return ["--chat-template-file", str(path)]


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ---- one schema, one server ----------------------------------------------------------------------
def validator(schema):
    """A validator of the schema's own draft, formats checked (jsonschema skips them unless asked)."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def judge(url: str, schema, max_tokens: int) -> dict:
    """{"kind": one of KINDS, "why": a line, "seconds": ...}"""
    body = {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens,
            "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "example", "schema": schema}}}
    t = time.time()
    try:
        r = httpx.post(f"{url}/chat/completions", json=body, timeout=600)
    except httpx.HTTPError as e:
        return {"kind": "error", "why": f"{type(e).__name__}: {e}"[:300], "seconds": time.time() - t}
    out = {"seconds": round(time.time() - t, 2), "status": r.status_code}
    try:
        reply = r.json()
    except ValueError:
        return {**out, "kind": "error", "why": f"HTTP {r.status_code}, not JSON: {r.text[:200]}"}
    if r.status_code == 400:
        err = reply.get("error")
        why = err.get("message") if isinstance(err, dict) else str(err)
        return {**out, "kind": "refused", "why": " ".join(str(why).split())[:400]}
    if r.status_code != 200:
        return {**out, "kind": "error", "why": f"HTTP {r.status_code}: {r.text[:300]}"}
    choice = reply["choices"][0]
    text = choice["message"].get("content") or ""
    out["content"] = text
    if choice.get("finish_reason") == "length":
        return {**out, "kind": "cut", "why": f"{len(text)} characters"}
    try:
        value = json.loads(text)
    except ValueError as e:
        return {**out, "kind": "invalid", "why": f"not JSON ({e}): {text[:120]!r}"}
    try:
        validator(schema).validate(value)
    except jsonschema.ValidationError as e:
        return {**out, "kind": "invalid", "why": f"{e.message[:200]} (at /{'/'.join(map(str, e.absolute_path))}, "
                                                  f"schema /{'/'.join(map(str, e.absolute_schema_path))})"}
    return {**out, "kind": "valid", "why": ""}


# ---- the report ----------------------------------------------------------------------------------
def table(results: dict[str, dict[str, dict]], names: list[str]) -> str:
    servers = list(results)
    labels = {"valid": "valid JSON (ended, validates)", "cut": "cut at max_tokens", "refused": "refused (400)",
              "invalid": "**invalid output under 200**", "error": "errors (5xx, no reply)"}
    lines = ["| schemas: " + str(len(names)) + " | " + " | ".join(servers) + " |",
             "|---|" + "---|" * len(servers)]
    for kind in KINDS:
        counts = [sum(1 for n in names if results[s][n]["kind"] == kind) for s in servers]
        lines.append(f"| {labels[kind]} | " + " | ".join(map(str, counts)) + " |")
    secs = [sum(results[s][n].get("seconds", 0) for n in names) for s in servers]
    lines.append("| time, all requests | " + " | ".join(f"{x:.0f} s" for x in secs) + " |")
    folders = sorted({n.split("/")[0] for n in names})
    lines += ["", "valid / cut / refused / invalid / error, by collection:", "",
              "| collection | " + " | ".join(servers) + " |", "|---|" + "---|" * len(servers)]
    for f in folders:
        mine = [n for n in names if n.startswith(f + "/")]
        cells = ["/".join(str(sum(1 for n in mine if results[s][n]["kind"] == k)) for k in KINDS) for s in servers]
        lines.append(f"| {f} ({len(mine)}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def differences(results: dict[str, dict[str, dict]], names: list[str]) -> str:
    servers = list(results)
    lines = []
    for n in names:
        kinds = [results[s][n]["kind"] for s in servers]
        if len(set(kinds)) > 1 or any(k in ("refused", "invalid", "error") for k in kinds):
            lines.append(f"- {n}: " + "; ".join(f"{s}: {results[s][n]['kind']}"
                                               + (f" ({results[s][n]['why']})" if results[s][n]["why"]
                                                  and results[s][n]["kind"] != "cut" else "")
                                               for s in servers))
    return "\n".join(lines) or "(none)"


def refused_by_one(results: dict[str, dict[str, dict]], names: list[str]) -> str:
    """Schemas one server refused and another answered (200): what the other did with the
    keyword (ignored it, if its answer ended and still validates only by luck)."""
    servers = list(results)
    lines = []
    for s in servers:
        for n in names:
            if results[s][n]["kind"] != "refused":
                continue
            others = [(o, results[o][n]["kind"]) for o in servers if o != s and results[o][n].get("status") == 200]
            if others:
                lines.append(f"- {s} refused {n} ({results[s][n]['why'][:160]}); "
                             + "; ".join(f"{o} answered: {k}" for o, k in others))
    return "\n".join(lines) or "(none)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", help="a GGUF (default: the tiny synthetic pair with Gemma 4's tokenizer)")
    ap.add_argument("-d", "--drafter", help="Tandem's MTP drafter (llama-server runs without one)")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads per server (default 1; 0: all cores)")
    ap.add_argument("--only", choices=["tandem", "llama"])
    ap.add_argument("--llama-server", help="the binary (default: built from the vendored sources)")
    ap.add_argument("--filter", default="", help="only schemas whose name (folder/file) contains this")
    ap.add_argument("--json", help="write every outcome (and reply) here")
    ap.add_argument("--resample", metavar="GIT_DIR", help="rewrite the sample from a JSONSchemaBench git directory")
    args = ap.parse_args()
    if args.resample:
        return resample(args.resample)
    names = [f"{p.parent.name}/{p.name}" for p in schemas() if args.filter in f"{p.parent.name}/{p.name}"]
    if not names:
        print(f"no schemas under {DATA}", file=sys.stderr)
        return 1
    model, drafter = args.model, args.drafter
    if not model:
        from engine.testmodels import make_test_models

        model, drafter = make_test_models(Path(tempfile.gettempdir()) / "tandem-schema-coverage", "tiny", 0.7,
                                          vocab="gemma4")
    threads = args.threads or (os.cpu_count() or 2)
    logs = Path(tempfile.mkdtemp(prefix="schema-coverage-"))
    servers: dict[str, tuple[list[str], int]] = {}
    if args.only != "llama":
        port = free_port()
        cmd = [str(Path(sys.executable).parent / "tandem"), "serve", "-m", str(model), "--port", str(port),
               "--ctx", str(args.ctx), "--parallel", "1", "--threads", str(threads)]
        servers["tandem serve"] = (cmd + (["-d", str(drafter), "--draft-max", "3"] if drafter else []), port)
    if args.only != "tandem":
        binary = args.llama_server or subprocess.run(
            ["bash", str(ROOT / "packaging" / "build-llama-server.sh")], capture_output=True, text=True,
            check=True).stdout.strip().splitlines()[-1]
        port = free_port()
        servers["llama-server"] = ([binary, "-m", str(model), "--jinja", "--host", "127.0.0.1", "--port", str(port),
                                    "-c", str(args.ctx), "-t", str(threads), "-np", "1", "--no-webui", "-ngl", "0"]
                                   + same_template(model, logs), port)
    results: dict[str, dict[str, dict]] = {}
    for name, (cmd, port) in servers.items():  # one server at a time: they share 2 cores
        proc = start(cmd, port, logs / f"{name.split()[0]}.log")
        try:
            results[name] = {}
            for i, n in enumerate(names):
                schema = json.loads((DATA / n).read_text())
                results[name][n] = judge(f"http://127.0.0.1:{port}/v1", schema, args.max_tokens)
                print(f"[{name} {i + 1}/{len(names)}] {n}: {results[name][n]['kind']} "
                      f"({results[name][n].get('seconds', 0):.1f} s)", file=sys.stderr, flush=True)
        finally:
            stop(proc)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print(f"{Path(model).name}: {len(names)} JSONSchemaBench schemas, greedy, max_tokens {args.max_tokens}, "
          f"prompt {PROMPT!r} (server logs: {logs})\n")
    print(table(results, names))
    if len(results) > 1:
        print("\nrefused by one server, answered by the other:\n")
        print(refused_by_one(results, names))
    print("\nwhere the servers differ, or any refused, invalid or failed:\n")
    print(differences(results, names))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
