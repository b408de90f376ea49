"""`tandem generate`: one prompt's reply, streamed (thinking to stderr, the answer to stdout)
or as one JSON object; on a local pair or a server."""

from __future__ import annotations

import json
import sys

from ..generation import SPEC_NONE, choose_spec
from .loading import load, output_constraint

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

    constraint = output_constraint(args)  # a bad schema or grammar: one line, before loading
    media = [load_media(p) for p in args.image + args.audio]  # bad files: one line, before loading
    if media and args.raw:
        raise ValueError("--raw takes text only: pictures and sounds go into a chat message")
    engine = load(args)
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
    backend = load(args)
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
