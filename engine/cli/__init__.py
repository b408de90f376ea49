"""Command line: the one table of `tandem`'s commands (usable without Qt).

`tandem` alone opens the desktop window (the app passes it in as `window`); `tandem COMMAND`
runs one of `COMMANDS`. Bad arguments and bad files give one line on stderr and exit code 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable

from ..errors import TandemError
from ..bench.edit_suite import SUITE_CTX
from ..generation import AUTO, DEFAULT_PARALLEL, MAX_DRAFT, SPEC_NONE, SPECS, choose_spec

EXIT_USAGE = 2
# the default context of each sequence: `tandem serve --parallel N` gets N times this, shared
# (a request reserves its prompt and max_tokens of it while it runs)
CTX_PER_SEQUENCE = 4096
# tandem serve's least default context: coding agents' first request is large (Claude Code's
# ~20k tokens with its tools, Codex's ~6k) and asks for up to 32000 tokens back
SERVE_MIN_CTX = 32768


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not usage + message
        sys.stderr.write(f"tandem: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(EXIT_USAGE)


class _Version(argparse.Action):
    """`tandem --version`: Tandem's version, llama-cpp-python's, and whether its build offloads to a GPU."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, **{k: v for k, v in kw.items() if k == "help"})

    def __call__(self, parser, namespace, values, option_string=None):
        from .. import __version__
        from ..local.llama import supports_gpu_offload, version

        print(f"tandem {__version__} · llama-cpp-python {version()} · GPU offload: "
              + ("yes" if supports_gpu_offload() else "no (CPU build)"))
        parser.exit()


def _positive(kind=int):
    def conv(s):
        try:
            v = kind(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number > 0, got {s!r}") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {s}")
        return v
    return conv


def _port(s):
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a port number, got {s}") from None
    if not 1 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 1 and 65535, got {s}")
    return v


def _draft_length(s):
    """AUTO (chosen every step) or a fixed number of drafted tokens, 1..MAX_DRAFT."""
    from ..generation import check_draft_length

    try:
        return check_draft_length(s if s == AUTO else int(s))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be '{AUTO}' or a number from 1 to {MAX_DRAFT}, got {s}") from None


def _add_load_args(p, remote: bool = True):
    """The model options; `remote`: also --server and its --api-key (generate, bench)."""
    p.add_argument("--model", "-m", help="target GGUF (Gemma 4 for MTP; any llama.cpp model for baseline)"
                   + ("; with --server, the served model's name (optional when the server serves one)" if remote
                      else ""))
    if remote:
        p.add_argument("--server", metavar="URL", help="decode on an OpenAI-compatible server (llama-server, "
                       "vLLM, SGLang, Ollama), e.g. http://127.0.0.1:8080/v1; Tandem streams and measures")
        p.add_argument("--api-key", help="the server's API key (default: $TANDEM_API_KEY)")
    else:
        p.set_defaults(server=None)
    p.add_argument("--drafter", "-d", help="gemma-4 assistant (MTP drafter) GGUF")
    p.add_argument("--ctx", type=_positive(), default=None,
                   help="context size in tokens (default 4096; tandem serve: 4096 for each --parallel request and "
                        "at least 32768, for coding agents' long prompts; the requests decoding together share it)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: physical cores)")
    p.add_argument("--gpu-layers", type=int, default=0, help="target layers on the GPU (-1 = all)")
    p.add_argument("--drafter-gpu-layers", type=int, default=0, help="drafter layers on the GPU (-1 = all)")
    p.add_argument("--no-flash-attn", action="store_true", help="disable flash attention (both contexts)")
    p.add_argument("--verbose", action="store_true", help="show llama.cpp's log")


def _add_sampling_args(p):
    from ..sampling import SamplingParams

    d = SamplingParams()  # the defaults, as the app's
    p.add_argument("--temperature", "-t", type=float, default=d.temperature, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=d.top_k)
    p.add_argument("--top-p", type=float, default=d.top_p)
    p.add_argument("--min-p", type=float, default=d.min_p)
    p.add_argument("--repeat-penalty", type=float, default=d.repeat_penalty)
    p.add_argument("--seed", type=int, default=None)


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="tandem", description="Tandem: Gemma 4 with MTP speculative decoding. With no command, "
                 "opens the desktop window (with --model/--drafter: that pair).",
                 epilog="`tandem COMMAND --help` tells more about each command.")
    ap.add_argument("-V", "--version", action=_Version, help="the version, the llama.cpp build and GPU offload")
    ap.add_argument("--model", "-m", metavar="GGUF", help="the window: load this target GGUF")
    ap.add_argument("--drafter", "-d", metavar="GGUF", help="the window: its MTP drafter GGUF")
    ap.add_argument("--smoke-test", metavar="PROMPT", help=argparse.SUPPRESS)  # bundle checks
    sub = ap.add_subparsers(dest="command", parser_class=_Parser, title="commands", metavar="COMMAND")

    g = sub.add_parser("generate", help="generate a reply to one prompt")
    _add_load_args(g)
    _add_sampling_args(g)
    g.add_argument("--no-mtp", action="store_true", help="baseline decoding even with a drafter (as --spec none)")
    g.add_argument("--spec", choices=SPECS, default=AUTO,
                   help="where drafts come from: mtp (the drafter), lookup (text already in the prompt or "
                        "reply: any model), none (baseline), auto (every source the model has; default)")
    g.add_argument("--draft-max", type=_draft_length, default=AUTO,
                   help=f"tokens drafted per step (1-{MAX_DRAFT}; caps lookup's proposals too), or 'auto' to "
                        "choose every step from measured costs and acceptance (default auto)")
    g.add_argument("--max-tokens", type=_positive(), default=256)
    g.add_argument("--raw", action="store_true", help="no chat template: complete the text as is")
    g.add_argument("--system", help="system prompt")
    g.add_argument("--thinking", action="store_true", help="enable Gemma 4 thinking mode")
    g.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    g.add_argument("--json-schema", metavar="FILE", help="the reply is JSON that matches this JSON schema")
    g.add_argument("--grammar", metavar="FILE", help="the reply follows this GBNF grammar (llama.cpp's syntax)")
    g.add_argument("--image", action="append", default=[], metavar="PATH",
                   help="a picture for the model to read (PNG, JPEG, WebP, GIF, BMP); repeat for more")
    g.add_argument("--audio", action="append", default=[], metavar="PATH",
                   help="a sound for the model to hear (WAV, MP3, FLAC; Gemma 4 E2B and E4B)")
    g.add_argument("--mmproj", metavar="GGUF", help="the vision/audio projector (default: the mmproj-*.gguf "
                   "next to the model)")
    g.add_argument("prompt")

    b = sub.add_parser("bench", help="baseline vs drafting (MTP, lookup) side by side on the same prompts")
    _add_load_args(b)
    b.add_argument("--prompts", help="JSONL file of prompts (default: the built-in set)")
    b.add_argument("--max-tokens", type=_positive(), default=128)
    b.add_argument("--draft-max", type=_draft_length, nargs="+", default=[AUTO, 1, 2, 3, 4],
                   help="draft lengths to compare with baseline, 'auto' among them (default auto 1 2 3 4)")
    b.add_argument("--spec", choices=SPECS, nargs="+", default=None,
                   help="draft sources to compare with baseline (default: mtp if a drafter is loaded, lookup, "
                        "and auto, which chooses between them every step)")
    b.add_argument("--suite", choices=["default", "edits"], default="default",
                   help="built-in prompts: a mix (default), or code edits and prose (what lookup speeds up; "
                        f"its files need a context of at least {SUITE_CTX} tokens, which it takes)")
    b.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    b.add_argument("--json-schema", metavar="FILE", help="also run every prompt constrained to this JSON schema, "
                   "and compare (what constrained decoding costs)")
    b.add_argument("--grammar", help=argparse.SUPPRESS)  # _constraint reads both
    b.add_argument("--baseline-server", metavar="URL", help="with --server: the same model served without a "
                   "drafter, the baseline to compare with")
    b.add_argument("--concurrency", type=_positive(), nargs="+", metavar="N",
                   help="with --server: N clients at once (e.g. 1 2 4 8): aggregate tok/s and the slowest "
                        "client's time, drafting on and (tandem serve, or --baseline-server) off")

    sv = sub.add_parser("serve", help="serve the model as a local OpenAI-compatible API (for editors)")
    _add_load_args(sv, remote=False)
    sv.add_argument("--api-key", help="the key clients must send (Authorization: Bearer KEY); default: none")
    sv.add_argument("--host", nargs="+", default=["127.0.0.1"], metavar="HOST", help="addresses to listen on "
                    "(default 127.0.0.1: this computer only; any other needs --api-key)")
    sv.add_argument("--port", type=_port, default=8080)
    sv.add_argument("--draft-max", type=_draft_length, default=AUTO,
                    help="draft length for requests that do not choose (default auto)")
    sv.add_argument("--cors", metavar="ORIGIN", nargs="+", help="allow browser pages from these origins: exact "
                    "origins, * for any, localhost for any page of this computer (default: none)")
    sv.add_argument("--parallel", type=_positive(), default=DEFAULT_PARALLEL,
                    help="requests decoded together, in one batch per step (default 4)")
    sv.add_argument("--queue", type=_positive(), default=4, help="requests that may wait beyond those (default 4)")
    sv.add_argument("--name", nargs="+", metavar="NAME", help="the model name clients see (default: the file's "
                    "name); more names: its aliases, which /v1/models lists too")
    sv.add_argument("--tags", nargs="+", default=[], metavar="TAG", help="labels /v1/models lists for the model")

    mm = sub.add_parser("models", help="list, download, import or verify Gemma 4 models")
    msub = mm.add_subparsers(dest="models_command", parser_class=_Parser, required=True)
    msub.add_parser("list", help="the catalog, what fits this machine, and your models")
    d = msub.add_parser("download", help="download a Gemma 4 model and its MTP drafter")
    d.add_argument("name", help="a name from `tandem models list` (e.g. gemma-4-e4b), or a repository "
                                "as owner/name[:QUANT] (e.g. ggml-org/gemma-4-E4B-it-GGUF:Q4_K_M)")
    d.add_argument("--quant", default="Q4_K_M", help="quantization (default Q4_K_M)")
    d.add_argument("--dir", help="download into this folder instead of the Hugging Face cache")
    d.add_argument("--no-vision", action="store_true", help="leave out the picture reader (mmproj projector)")
    i = msub.add_parser("import", help="add GGUF files from disk (finds the matching drafter)")
    i.add_argument("path", help="a target GGUF, or a folder of them")
    msub.add_parser("verify", help="check that your models are present and pair")

    m = sub.add_parser("make-test-models", help="write a synthetic Gemma 4 target + MTP drafter")
    m.add_argument("outdir")
    m.add_argument("--size", choices=["tiny", "e2b"], default="tiny")
    m.add_argument("--agreement", type=float, default=1.0, help="how often the drafter agrees, 0..1")
    m.add_argument("--vocab", choices=["synthetic", "gemma4"],
                   help="synthetic: a small character-level vocabulary (tiny's default); gemma4: Gemma 4's real "
                        "tokenizer and chat template, from the pinned llama-cpp-python sdist (e2b's default)")
    return ap


def _remote(url, args, model=None):
    import os

    from ..backends.remote import RemoteBackend

    return RemoteBackend(url, args.api_key or os.environ.get("TANDEM_API_KEY"), model)


def _load(args):
    from ..local.engine import Engine
    from ..local.runtime import LoadOptions

    if args.server:
        if args.drafter:
            raise ValueError("--drafter is for local models; a server's drafter is set when the server starts")
        return _remote(args.server, args, args.model)
    if not args.model:
        raise ValueError("--model is required: a GGUF file (or --server URL to use a server)")

    n_seq = getattr(args, "parallel", 1)
    default_ctx = max(CTX_PER_SEQUENCE * n_seq, SERVE_MIN_CTX if args.command == "serve" else 0)
    opts = LoadOptions(n_ctx=args.ctx or default_ctx, n_threads=args.threads,
                       target_gpu_layers=args.gpu_layers,
                       drafter_gpu_layers=args.drafter_gpu_layers, flash_attn=not args.no_flash_attn,
                       verbose=args.verbose, n_seq=n_seq)
    mmproj = getattr(args, "mmproj", None)
    if not mmproj and (getattr(args, "image", None) or getattr(args, "audio", None)):
        from ..models.pairing import find_projector

        found = find_projector(args.model)
        if found is None:
            raise ValueError(f"pictures and sounds need the model's projector: no mmproj-*.gguf next to "
                             f"{args.model}; give it with --mmproj")
        mmproj = str(found)
    return Engine.load(args.model, args.drafter, opts, mmproj=mmproj)


def cmd_generate(args) -> int:
    from ..generation import GenerationConfig
    from ..sampling import SamplingParams

    sp = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                        min_p=args.min_p, repeat_penalty=args.repeat_penalty)
    sp.validate()
    try:
        spec = choose_spec(args.spec, drafting=not args.no_mtp)
    except ValueError:  # argparse took only SPECS: the two flags disagree
        raise ValueError(f"--no-mtp turns drafting off and --spec {args.spec} asks for it: give one of them") from None
    if spec == "mtp" and not args.server and not args.drafter:  # said before loading (the engine would refuse)
        raise ValueError("--spec mtp needs a drafter (--drafter, the model's gemma-4 assistant); "
                         "--spec lookup or auto drafts without one")
    if args.server:
        if args.image or args.audio or args.json_schema or args.grammar:
            raise ValueError("--image, --audio, --json-schema and --grammar are for local models for now")
        return _generate_remote(args, sp, spec)
    from ..local.media import load_media

    constraint = _constraint(args)  # a bad schema or grammar: one line, before loading
    media = [load_media(p) for p in args.image + args.audio]  # bad files: one line, before loading
    if media and args.raw:
        raise ValueError("--raw takes text only: pictures and sounds go into a chat message")
    engine = _load(args)
    try:
        cfg = GenerationConfig(max_tokens=args.max_tokens, spec=spec, draft_max=args.draft_max, sampling=sp,
                               seed=args.seed, **constraint)
        if args.raw:
            prompt = engine.tokenize(args.prompt, add_special=True, parse_special=False)
        else:
            msgs = ([{"role": "system", "content": args.system}] if args.system else [])
            msgs.append({"role": "user", "content": args.prompt, **({"media": media} if media else {})})
            prompt = engine.format_chat(msgs, enable_thinking=args.thinking)

        def stream(ev):
            if not args.json:
                _show(ev.thinking, ev.answer)

        res = engine.run(prompt, cfg, on_event=stream)
        _print_result(args, res.answer, res.thinking, res.stats, tokens=res.tokens, drafted=res.drafted,
                      engine=engine.engine_name)
    finally:
        engine.close()
    return 0


# C0 controls but newline and tab, DEL and C1: model text must not drive the terminal (escape
# sequences can move the cursor, retitle the window, or worse)
_TERMINAL_UNSAFE = {c: "\ufffd" for c in [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)]}


def _show(thinking: str, answer: str) -> None:
    """Streamed text: thinking to stderr, the answer to stdout; on a terminal, without control characters."""
    for stream, text in ((sys.stderr, thinking), (sys.stdout, answer)):
        if text:
            stream.write(text.translate(_TERMINAL_UNSAFE) if stream.isatty() else text)
            stream.flush()


def _constraint(args) -> dict:
    """--json-schema / --grammar as GenerationConfig fields, checked (a schema made a grammar)."""
    from pathlib import Path

    from ..local.grammar import MAX_GRAMMAR_BYTES, MAX_SCHEMA_BYTES, GrammarError, from_gbnf, from_json_schema

    if args.json_schema and args.grammar:
        raise ValueError("--json-schema and --grammar: give one of them")
    path = args.json_schema or args.grammar
    if not path:
        return {}
    limit = MAX_SCHEMA_BYTES if args.json_schema else MAX_GRAMMAR_BYTES
    if Path(path).stat().st_size > limit:
        raise GrammarError(f"{path} is larger than {limit // 1024} KB")
    text = Path(path).read_text("utf-8")
    return {"grammar": from_json_schema(text) if args.json_schema else from_gbnf(text)}


def _print_result(args, text: str, thinking: str, stats, **extra) -> None:
    """The end of `generate`: one JSON object, or the footer line after the streamed text."""
    if args.json:
        print(json.dumps({"text": text, "thinking": thinking, **{k: extra.pop(k) for k in ("tokens", "drafted")},
                          "finish_reason": stats.finish_reason, "stats": stats.to_dict(), **extra}))
    else:
        sys.stdout.write("\n")
        print(f"[{stats.footer()} · finish: {stats.finish_reason}]", file=sys.stderr)


def _generate_remote(args, sp, spec: str) -> int:
    """generate on a server: the same output (and JSON keys) as a local run, plus the engine."""
    from ..generation import GenerationConfig

    if args.raw:
        raise ValueError("--raw needs a local model: servers apply their own chat template")
    backend = _load(args)
    try:
        if spec == SPEC_NONE and not backend.can_switch_mtp:
            raise ValueError(f"{backend.engine_name} drafts or not as it was started: for a baseline, use a "
                             "server started without a drafter (tandem serve switches per request)")
        msgs = ([{"role": "system", "content": args.system}] if args.system else [])
        msgs.append({"role": "user", "content": args.prompt})
        # the drafting choice reaches servers that take it per request (tandem serve); others ignore it
        cfg = GenerationConfig(max_tokens=args.max_tokens, sampling=sp, seed=args.seed, draft_max=args.draft_max,
                               spec=spec)
        answer, thinking, ev = [], [], None
        for ev in backend.chat(msgs, cfg, enable_thinking=args.thinking):
            answer.append(ev.answer)
            thinking.append(ev.thinking)
            if not args.json:
                _show(ev.thinking, ev.answer)
        _print_result(args, "".join(answer), "".join(thinking), ev.stats, tokens=[], drafted=[],
                      engine=backend.engine_name, server=backend.base_url, model=backend.model)
    finally:
        backend.close()
    return 0


def cmd_bench(args) -> int:
    from ..bench.side_by_side import LEGEND, format_table, grammar_cost, load_prompts, run_bench

    if args.server:
        return _bench_remote(args)
    if args.concurrency:
        raise ValueError("--concurrency measures a server: give --server URL (start one with tandem serve)")
    constraint = _constraint(args)
    if args.suite == "edits" and not args.prompts:
        from ..bench.edit_suite import edit_groups

        groups = edit_groups()
        prompts = [p for group in groups.values() for p in group]
        args.ctx = max(args.ctx or 0, SUITE_CTX)
    else:
        prompts = load_prompts(args.prompts)
        groups = {"": prompts}
    engine = _load(args)
    try:
        t = engine.rt.target_info
        d = engine.rt.drafter_info
        print(f"target  {t.path.name} ({t.arch}, {t.file_size / 2**20:.1f} MiB)\n"
              + (f"drafter {d.path.name} ({d.arch}, {d.file_size / 2**20:.1f} MiB)\n" if d else
                 "drafter none: lookup is the draft source\n")
              + f"threads {engine.rt.n_threads}, ctx {engine.n_ctx}, {len(prompts)} prompts, "
              f"max {args.max_tokens} tokens, greedy\n", flush=True)

        def progress(s):
            print(f"\r  {s:<30}", end="", file=sys.stderr, flush=True)

        results = {}
        for title, group in groups.items():
            res = results[title or "all"] = run_bench(engine, group, args.draft_max, args.max_tokens,
                                                      progress=progress, specs=args.spec)
            print("\r", end="", file=sys.stderr)
            print((f"{title} ({len(group)} prompts):\n" if title else "") + format_table(res, legend=False) + "\n")
            if constraint:
                res["json_schema"] = run_bench(engine, group, args.draft_max, args.max_tokens, progress=progress,
                                               grammar=constraint["grammar"], specs=args.spec)
                print("\r", end="", file=sys.stderr)
                print("constrained to " + args.json_schema + ":\n" + format_table(res["json_schema"], legend=False)
                      + "\n\n"
                      + grammar_cost(res, res["json_schema"]))
        print(LEGEND)
        m = _peak_memory(engine)
        if m["peak_rss_mib"]:
            print(f"\nmemory: peak {m['peak_rss_mib']:.0f} MiB resident; model files {m['files_mib']:.0f} MiB; "
                  f"beyond the mapped files {m['anon_mib']:.0f} MiB (KV cache, compute buffers, "
                  "weights repacked for the CPU, Python)")
        if args.json:
            out = results["all"] if len(results) == 1 else results
            out["memory"] = m
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(out, f, indent=2)
    finally:
        engine.close()
    return 0


def _bench_load(args) -> int:
    """Several clients at once: tandem serve with drafting on and off (per request), or a server
    and its --baseline-server."""
    from ..bench.load import load_table, measure_levels

    mtp = _load(args)  # checks the server and finds its model
    try:
        model, engine_name, url, can_switch = mtp.model, mtp.engine_name, mtp.base_url, mtp.can_switch_mtp
    finally:
        mtp.close()
    sides = {f"{engine_name} drafting": (url, {"tandem": {"draft_max": args.draft_max[0]}} if can_switch else None)}
    if args.baseline_server:
        base = _remote(args.baseline_server, args, model)
        sides[f"{base.engine_name} baseline server"] = (base.base_url, None)
        base.close()
    elif can_switch:
        sides[f"{engine_name} no drafting"] = (url, {"tandem": {"mtp": False}})
    print(f"{model} at {url}: {args.max_tokens} tokens per client, greedy\n", flush=True)
    rows = {}
    for name, (base, extra) in sides.items():
        if sys.stderr.isatty():  # progress for the one watching (a log would keep the carriage returns)
            print(f"\r  {name}{'':<20}", end="", file=sys.stderr, flush=True)
        rows[name] = measure_levels(base, args.concurrency, args.max_tokens, args.api_key, model, extra)
    if sys.stderr.isatty():
        print("\r", end="", file=sys.stderr)
    print(load_table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({k: [{**vars(r), "tps": r.tps} for r in v] for k, v in rows.items()}, f, indent=2)
    return 0


def _bench_remote(args) -> int:
    """bench on servers: the MTP server (--server) against the same model served without a
    drafter (--baseline-server), since servers choose speculation per server."""
    from ..bench.side_by_side import format_table, load_prompts, run_remote_bench

    if args.concurrency:
        return _bench_load(args)

    if len(args.draft_max) > 1 and args.draft_max != [AUTO, 1, 2, 3, 4]:  # the default means "as the server does"
        raise ValueError("bench on a server compares one draft length: give one --draft-max (servers other "
                         "than tandem serve use the one they were started with)")
    prompts = load_prompts(args.prompts)
    mtp = _load(args)
    try:
        if not args.baseline_server and not mtp.can_switch_mtp:
            raise ValueError("bench on a server needs --baseline-server URL: the same model served without a "
                             "drafter (servers cannot switch drafting per request; tandem serve can)")
        # tandem serve switches drafting per request: one server is both sides
        base = _remote(args.baseline_server, args, args.model or mtp.model) if args.baseline_server else mtp
        try:
            print(f"MTP      {mtp.engine_name} at {mtp.base_url}, model {mtp.model}\n"
                  f"baseline {base.engine_name} at {base.base_url}, model {base.model}\n"
                  f"{len(prompts)} prompts, max {args.max_tokens} tokens, greedy\n", flush=True)
            # servers compare one draft length: the first given goes to tandem serve; other
            # servers use the one they were started with
            res = run_remote_bench(mtp, base, prompts, args.max_tokens,
                                   progress=lambda s: print(f"\r  {s:<30}", end="", file=sys.stderr, flush=True),
                                   draft_max=args.draft_max[0])
            print("\r", end="", file=sys.stderr)
            print(format_table(res))
            if args.json:
                with open(args.json, "w", encoding="utf-8") as f:
                    json.dump(res, f, indent=2)
        finally:
            if base is not mtp:
                base.close()
    finally:
        mtp.close()
    return 0


def _peak_memory(engine) -> dict:
    """Peak resident memory, and the part of it that is not the mapped model files (KV cache,
    compute buffers, weights repacked for the CPU, Python): Linux /proc figures."""
    status = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmHWM", "RssAnon", "RssFile"):
                    status[k] = int(v.split()[0]) / 1024  # kB -> MiB
    except OSError:
        pass
    files = engine.rt.target_info.file_size + (engine.rt.drafter_info.file_size if engine.rt.drafter_info else 0)
    return {"peak_rss_mib": status.get("VmHWM", 0.0), "anon_mib": status.get("RssAnon", 0.0),
            "mapped_files_mib": status.get("RssFile", 0.0), "files_mib": files / 2**20}


def cmd_serve(args) -> int:
    from pathlib import Path

    from ..serve import check_host, run

    hosts = list(dict.fromkeys(args.host))
    for host in hosts:  # before loading anything
        check_host(host, args.api_key)
        _check_port_free(host, args.port)
    engine = _load(args)
    try:
        name, *aliases = args.name or [Path(args.model).stem]
        where = " and ".join(f"http://{f'[{h}]' if ':' in h else h}:{args.port}/v1" for h in hosts)
        print(f"Serving {name} ({'MTP with ' + Path(args.drafter).name if engine.has_mtp else 'no drafter'}) "
              f"at {where}", flush=True)
        run(engine, name, hosts, args.port, args.api_key, args.cors, args.queue, args.draft_max,
            aliases=aliases, tags=args.tags)
    finally:
        engine.close()
    return 0


def _check_port_free(host: str, port: int) -> None:
    """One line before loading anything, instead of 'Serving at …' and then uvicorn's error."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        raise ValueError(f"cannot listen on {host}: {e.strerror or e}") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            s.bind(addr)
        except OSError as e:
            raise ValueError(f"cannot listen on {host}:{port}: {e.strerror or e} (another server there? "
                             "choose another --port)") from None


def cmd_make_test_models(args) -> int:
    from ..testmodels import VocabUnavailable, make_test_models

    try:
        target, drafter = make_test_models(args.outdir, args.size, args.agreement, vocab=args.vocab)
    except VocabUnavailable as e:
        raise ValueError(f"{e} (--vocab synthetic needs no download)") from None
    tag = target.name.removesuffix("-target.gguf")
    print(f"target:    {target}\ndrafter:   {drafter}\nprojector: {target.parent / f'mmproj-{tag}.gguf'}")
    return 0


def cmd_models(args) -> int:
    from ..models import cli as models_cli

    return models_cli.run(args)


COMMANDS = {"generate": cmd_generate, "bench": cmd_bench, "serve": cmd_serve, "make-test-models": cmd_make_test_models,
            "models": cmd_models}


def main(argv=None, window: Callable[[argparse.Namespace], int] | None = None) -> int:
    """Run `tandem` with `argv`; without a command, `window(args)` opens the app (when given)."""
    ap = build_parser()
    args = ap.parse_args(argv)
    if not args.command:
        if window is not None:
            return window(args)
        ap.print_help()
        return EXIT_USAGE
    try:
        return COMMANDS[args.command](args)
    except (TandemError, ValueError, OSError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        sys.stderr.write(f"tandem: error: {msg}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("tandem: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
