"""Command line: the one table of `tandem`'s commands (usable without Qt).

`tandem` alone opens the desktop window (the app passes it in as `window`); `tandem COMMAND`
runs one of `COMMANDS`, each in its own module (generate.py, bench.py, serve.py; parser.py
declares every command's options, loading.py what they share). Bad arguments and bad files
give one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from ..errors import TandemError
from .bench import cmd_bench
from .generate import cmd_generate
from .parser import EXIT_USAGE, build_parser
from .serve import cmd_serve

__all__ = ["COMMANDS", "EXIT_USAGE", "build_parser", "main"]


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
