"""What the commands share: the model (a local pair or a server) loaded from the arguments, and
the output constraint they name."""

from __future__ import annotations


def remote(url, args, model=None):
    """A server's backend, its key from --api-key or $TANDEM_API_KEY."""
    import os

    from ..backends.remote import RemoteBackend

    return RemoteBackend(url, args.api_key or os.environ.get("TANDEM_API_KEY"), model)


def load(args):
    """The backend the arguments name: a server (--server), or the local pair, loaded."""
    from ..local.engine import Engine
    from ..local.options import AUTO, LoadOptions
    from ..models.fit import CTX_PER_SEQUENCE

    if args.server:
        if args.drafter:
            raise ValueError("--drafter is for local models; a server's drafter is set when the server starts")
        return remote(args.server, args, args.model)
    if not args.model:
        raise ValueError("--model is required: a GGUF file (or --server URL to use a server)")

    n_seq = getattr(args, "parallel", 1)
    serve = args.command == "serve"
    # tandem serve's context, when not given, is chosen from the memory plan (engine/models/fit.py);
    # a benchmark's or one generation's is 4096 for each sequence (a request reserves its prompt
    # and max_tokens of it while it runs)
    opts = LoadOptions(n_ctx=args.ctx or (AUTO if serve else CTX_PER_SEQUENCE * n_seq), n_threads=args.threads,
                       target_gpu_layers=args.gpu_layers,
                       drafter_gpu_layers=args.drafter_gpu_layers, flash_attn=not args.no_flash_attn,
                       draft_head=args.draft_head,
                       verbose=args.verbose, n_seq=n_seq,
                       # the prompt cache beyond the slots: tandem serve's, in memory and on disk
                       # (a benchmark or a one-off generation measures and reads from cold)
                       cache_ram_mib=args.cache_ram if serve else 0,
                       cache_disk_mib=0 if not serve or args.no_disk_cache else -1)
    mmproj = getattr(args, "mmproj", None)
    if not mmproj and (getattr(args, "image", None) or getattr(args, "audio", None)):
        from ..models.pairing import find_projector

        found = find_projector(args.model)
        if found is None:
            raise ValueError(f"pictures and sounds need the model's projector: no mmproj-*.gguf next to "
                             f"{args.model}; give it with --mmproj")
        mmproj = str(found)
    import sys

    def clustering(label: str, frac: float) -> bool:  # the one part of a load that can take minutes
        if label.startswith("drafter (clustering"):
            print(f"tandem: clustering the drafter's head (once for this file): {frac * 100:.0f} %",
                  file=sys.stderr, flush=True)
        return True

    engine = Engine.load(args.model, args.drafter, opts, clustering, mmproj=mmproj)
    if not serve:  # tandem serve prints the whole placement; here what was asked and cannot be
        for line in engine.placement.warnings:
            print(f"tandem: {line}", file=sys.stderr)
    return engine


def output_constraint(args) -> dict:
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
