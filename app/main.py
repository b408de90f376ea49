"""`tandem` entry point: the engine CLI's one command table; with no command, the window opens."""

from __future__ import annotations

import sys


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--template-worker"]:  # the bundle's chat-template helper process
        from engine.gemma4.template_sandbox import worker_main

        return worker_main()
    from engine.cli import main as cli_main

    def window(args) -> int:
        from app.ui.gui import run_gui

        return run_gui(args)

    return cli_main(argv, window=window)


if __name__ == "__main__":
    sys.exit(main())
