#!/usr/bin/env python3
"""A stand-in for the llama-server binary that llama.cpp's server tests start
(tools/server/tests/utils.py runs $LLAMA_SERVER_BIN_PATH with llama-server's arguments).

It reads the arguments the tests pass and execs one of two servers on the same local model:
  SHIM_SERVER=llama   the real llama-server (SHIM_LLAMA_BIN), with -m SHIM_TARGET and the MTP
                      drafter SHIM_DRAFTER (--spec-type draft-mtp) in place of the tests' model,
                      and always --jinja (as tandem serve: the model's own chat template)
  SHIM_SERVER=tandem  `tandem serve -m SHIM_TARGET -d SHIM_DRAFTER` (SHIM_TANDEM: the tandem
                      executable), mapping the options it has and leaving out the rest
The tests' model options (--hf-repo, --hf-file, --model, --model-url, --models-dir, ...) are
always replaced: no model is downloaded. Used by scripts/llama_server_tests.py.
"""

from __future__ import annotations

import os
import sys

# llama-server options the tests pass that take no value (utils.py: ServerProcess.start);
# every other option takes exactly one
FLAGS = {"--offline", "--cont-batching", "--embedding", "--reranking", "--metrics", "--kv-unified",
         "--swa-full", "--slots", "--no-slots", "--verbose", "--context-shift", "--no-ui",
         "--no-models-autoload", "--jinja", "--no-jinja", "--no-mmproj", "--no-cache-idle-slots",
         "--ui-mcp-proxy", "--backend_sampling", "--no-webui", "--no-warmup", "--cont-batching"}

# the tests' model: replaced by ours (for llama-server; tandem gets only what it maps)
MODEL_OPTS = {"--model", "-m", "--model-url", "-mu", "--hf-repo", "-hf", "-hfr", "--hf-file", "-hff",
              "--model-draft", "-md", "--spec-type", "--models-dir", "--models-max", "--models-preset",
              "--mmproj-url", "--mmproj", "-mm", "--lora", "--no-models-autoload", "--offline",
              "--no-mmproj"}


def parse(argv: list[str]) -> list[tuple[str, str | None]]:
    """[(option, value or None)] in order; a stray positional comes as ("", value)."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("-") and "=" in a and a.startswith("--"):
            k, v = a.split("=", 1)
            out.append((k, v))
        elif a in FLAGS or not a.startswith("-"):
            out.append((a, None) if a.startswith("-") else ("", a))
        elif i + 1 < len(argv):
            out.append((a, argv[i + 1]))
            i += 1
        else:
            out.append((a, None))
        i += 1
    return out


def llama_args(opts, target: str, drafter: str | None) -> list[str]:
    # --jinja always: llama-server's built-in (non-Jinja) templates do not know Gemma 4's ("this
    # custom template is not supported"), and tandem serve always applies the model's Jinja template
    args = [os.environ["SHIM_LLAMA_BIN"], "-m", target, "--jinja"]
    if drafter:
        args += ["--model-draft", drafter, "--spec-type", "draft-mtp"]
    for k, v in opts:
        if k in MODEL_OPTS or k in ("--jinja", "--no-jinja") or not k:
            continue
        args.append(k)
        if v is not None:
            args.append(v)
    return args


def tandem_args(opts, target: str, drafter: str | None) -> list[str]:
    args = [os.environ.get("SHIM_TANDEM", "tandem"), "serve", "-m", target]
    if drafter:
        args += ["-d", drafter]
    mapped = {"--port": "--port", "--ctx-size": "--ctx", "-c": "--ctx",
              "--parallel": "--parallel", "-np": "--parallel", "--api-key": "--api-key",
              "--threads": "--threads", "-t": "--threads", "--spec-draft-n-max": "--draft-max"}
    # llama-server's comma lists: tandem's options take several values
    lists = {"--host": "--host", "--tags": "--tags", "--alias": "--name", "-a": "--name"}
    for k, v in opts:
        if k in mapped and v is not None:
            args += [mapped[k], v]
        elif k in lists and v:
            values = [x.strip() for x in v.split(",") if x.strip()]
            if lists[k] == "--name":  # llama-server's id is the first alias in sorted order (a std::set)
                values.sort()
            args += [lists[k], *values]
        elif k == "--cors-origins" and v:
            args += ["--cors", *[o.strip() for o in v.split(",") if o.strip()]]
        elif k == "--verbose":
            args.append("--verbose")
    return args


def main() -> None:
    which = os.environ.get("SHIM_SERVER", "llama")
    target = os.environ["SHIM_TARGET"]
    drafter = os.environ.get("SHIM_DRAFTER") or None
    opts = parse(sys.argv[1:])
    args = llama_args(opts, target, drafter) if which == "llama" else tandem_args(opts, target, drafter)
    print("shim: " + " ".join(args), flush=True)
    if which == "llama":
        os.environ.setdefault("LLAMA_ARG_N_GPU_LAYERS", "0")
    os.execv(args[0], args)


if __name__ == "__main__":
    main()
