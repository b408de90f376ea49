"""`tandem` entry point: engine subcommands go to the engine CLI, otherwise the window opens."""

from __future__ import annotations

import sys

ENGINE_COMMANDS = {"generate", "bench", "make-test-models", "models"}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--template-worker"]:  # the bundle's chat-template helper process
        from engine.template_sandbox import worker_main

        return worker_main()
    if argv and argv[0] in ENGINE_COMMANDS:
        from engine.cli import main as engine_main

        return engine_main(argv)
    if argv and argv[0] in ("-V", "--version"):
        from engine import __version__

        print(f"tandem {__version__}")
        return 0
    from .gui import run_gui

    return run_gui(argv)


if __name__ == "__main__":
    sys.exit(main())
