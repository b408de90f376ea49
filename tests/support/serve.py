"""`tandem serve` as a real process on 127.0.0.1 (for the tests that talk to it over HTTP)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx2 as httpx

from .llamaserver import free_port


class Serve:
    def __init__(self, tiny, *extra, drafter=True, command=None, ctx: int | None = 8192):
        """`ctx` None: the server's own default context."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        args = (command or [sys.executable, "-m", "engine"]) + ["serve", "-m", str(tiny["target"]), "--port", str(self.port),
                *(["--ctx", str(ctx)] if ctx else []), *extra] + (["-d", str(tiny[0.7])] if drafter else [])
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        t = time.time()
        while time.time() - t < 120:
            if self.proc.poll() is not None:
                raise RuntimeError(self.proc.stdout.read().decode(errors="replace")[-3000:])
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("tandem serve did not start")

    def health(self) -> dict:
        return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=5).json()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
