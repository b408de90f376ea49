"""Chat templates rendered in a child process with bounded time, memory and output.

A chat template is Jinja code from a model file, i.e. from outside. Jinja's sandbox stops
attribute tricks but not work: a nested `range(100000)` renders for minutes and a template
that builds 500 MB of text takes tens of GB. Python cannot interrupt such a render in a
thread, so it runs in a small helper process (started once, reused): the parent waits with a
deadline and a stop check, and kills the helper when either fires; the helper caps its own
address space and the length of what it writes.

Run as `python -m engine.gemma4.template_sandbox` (the bundle: `tandem --template-worker`), it is
the helper: one JSON request per line on stdin, one JSON answer per line on stdout.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from typing import Callable

from ..errors import TemplateError

TIMEOUT_S = 10.0  # real templates render in milliseconds
MEMORY_LIMIT = 2 << 30  # bytes of address space for the helper
BASE_OUTPUT_CHARS = 1 << 20  # plus 4x the size of the messages: see max_output_chars


class RenderCancelled(TemplateError):
    """The render was stopped by the caller (the user pressed Stop or closed the window)."""


def max_output_chars(messages: list[dict]) -> int:
    """A prompt is the messages plus markup: anything far longer is a runaway template."""
    return BASE_OUTPUT_CHARS + 4 * sum(len(m.get("content", "")) + len(m.get("reasoning_content") or "")
                                       + len(json.dumps(m.get("tool_calls") or "")) for m in messages)


# ---- the helper process ------------------------------------------------------------------
def _environment():
    from jinja2 import TemplateError as JinjaTemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise JinjaTemplateError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, autoescape=False)
    env.globals["raise_exception"] = raise_exception
    return env


def _render(env, cache: dict, req: dict) -> str:
    from jinja2 import TemplateError as JinjaTemplateError

    source = req["source"]
    tmpl = cache.get(source)
    if tmpl is None:
        if len(cache) > 8:
            cache.clear()
        tmpl = cache[source] = env.from_string(source)
    out, n, limit = [], 0, req["max_chars"]
    # generate() yields the output piece by piece, so a runaway is stopped at the limit
    for piece in tmpl.generate(**req["variables"]):
        n += len(piece)
        if n > limit:
            raise JinjaTemplateError(f"it produced more than {limit:,} characters")
        out.append(piece)
    return "".join(out)


def worker_main() -> int:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    except (ImportError, ValueError, OSError):  # Windows has no rlimits; the deadline still holds
        pass
    from jinja2 import TemplateError as JinjaTemplateError

    env, cache = _environment(), {}
    for line in sys.stdin.buffer:
        try:
            req = json.loads(line)
            answer = {"text": _render(env, cache, req)}
        except JinjaTemplateError as e:
            answer = {"error": f"the model's chat template failed: {e}"}
        except MemoryError:
            answer = {"error": f"the model's chat template needed more than {MEMORY_LIMIT >> 20} MiB of memory"}
        except Exception as e:  # sandbox SecurityError, type errors inside the template, ...
            answer = {"error": f"the model's chat template failed: {type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


# ---- the parent side ---------------------------------------------------------------------
def _helper_command() -> list[str]:
    if getattr(sys, "frozen", False):  # a PyInstaller bundle: its executable takes the flag
        return [sys.executable, "--template-worker"]
    return [sys.executable, "-m", "engine.gemma4.template_sandbox"]


class _Helper:
    def __init__(self):
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen(_helper_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)  # the helper exited

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(5)
        except Exception:
            pass


class SandboxedRenderer:
    """Renders templates in the helper process; one request at a time."""

    def __init__(self, timeout_s: float = TIMEOUT_S):
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._helper: _Helper | None = None

    def render(self, source: str, variables: dict, max_chars: int,
               should_stop: Callable[[], bool] | None = None) -> str:
        with self._lock:
            if self._helper is None or not self._helper.alive():
                self._helper = _Helper()
            helper = self._helper
            try:
                helper.proc.stdin.write(json.dumps({"source": source, "variables": variables,
                                                    "max_chars": max_chars}).encode() + b"\n")
                helper.proc.stdin.flush()
            except OSError:
                self._discard()
                raise TemplateError("the chat template helper could not be started") from None
            deadline = time.monotonic() + self.timeout_s
            while True:
                try:
                    line = helper.lines.get(timeout=0.05)
                    break
                except queue.Empty:
                    if should_stop is not None and should_stop():
                        self._discard()
                        raise RenderCancelled("stopped while the chat template was rendering") from None
                    if time.monotonic() > deadline:
                        self._discard()
                        raise TemplateError(f"the model's chat template took longer than {self.timeout_s:g} s "
                                            "to render; it was stopped") from None
            if line is None:
                self._discard()
                raise TemplateError("the model's chat template crashed its renderer (out of memory?)")
            answer = json.loads(line)
            if "error" in answer:
                raise TemplateError(answer["error"])
            return answer["text"]

    def _discard(self) -> None:
        if self._helper is not None:
            self._helper.kill()
            self._helper = None

    def close(self) -> None:
        with self._lock:
            self._discard()


_shared: SandboxedRenderer | None = None
_shared_lock = threading.Lock()


def shared_renderer() -> SandboxedRenderer:
    """One helper for the whole process: engines render one prompt at a time anyway."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = SandboxedRenderer()
        return _shared


if __name__ == "__main__":
    sys.exit(worker_main())
