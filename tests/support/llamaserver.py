"""A real llama-server (built from the llama.cpp sources vendored in the pinned
llama-cpp-python sdist, cached like the wheel) on 127.0.0.1, for the remote-backend tests."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx2 as httpx

ROOT = Path(__file__).resolve().parents[2]


def server_binary() -> str:
    """Build (once, cached) and return the path of llama-server."""
    out = subprocess.run(["bash", str(ROOT / "packaging" / "build-llama-server.sh")], capture_output=True,
                         text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"building llama-server failed:\n{out.stderr[-3000:]}")
    return out.stdout.strip().splitlines()[-1]


def steering_flags(target) -> tuple[str, ...]:
    """llama-server's own --logit-bias flags that let a random-weight test model finish a
    forced call. llama-server's Gemma 4 grammar forces `<|tool_call>call:NAME{` but lets the
    arguments' keys be any text, where random weights wander until the token limit: "{}" made
    likely writes the (empty) arguments of a tool without parameters; thinking and a new turn
    made unlikely keep the grammar's optional thought out. The server decodes and parses as it
    always does. (Each flag counts, whatever llama-server's warning about repeated flags says.)"""
    from engine.testmodels.vocab import gguf_metadata

    tokens = gguf_metadata(target, strings=("tokenizer.ggml.tokens",))["tokenizer.ggml.tokens"][1]
    ids = {t: i for i, t in enumerate(tokens) if t in ("{}", "<|channel>", "<|turn>")}
    return ("--logit-bias", f"{ids['{}']}+30", "--logit-bias", f"{ids['<|channel>']}-100",
            "--logit-bias", f"{ids['<|turn>']}-100")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    def __init__(self, binary: str, target, drafter=None, api_key: str | None = None, n_max: int = 3,
                 log: Path | None = None, extra: tuple[str, ...] = ()):
        """`extra`: more of llama-server's own flags (--no-jinja, --logit-bias, ...)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        args = [binary, "-m", str(target), "--host", "127.0.0.1", "--port", str(self.port), "-c", "2048",
                "-t", "2", "-np", "1", "--metrics", "--no-webui", "--no-warmup"]
        if drafter:
            args += ["--model-draft", str(drafter), "--spec-type", "draft-mtp", "--spec-draft-n-max", str(n_max)]
        if api_key:
            args += ["--api-key", api_key]
        args += list(extra)
        self.log = log
        self.proc = subprocess.Popen(args, stdout=open(log, "wb") if log else subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT, env={**os.environ, "LLAMA_ARG_N_GPU_LAYERS": "0"})
        self._wait_ready(api_key)

    def _wait_ready(self, api_key, timeout=120.0):
        t = time.time()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        while time.time() - t < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({self.proc.returncode}): "
                                   + (self.log.read_text(errors="replace")[-3000:] if self.log else ""))
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", headers=headers, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("llama-server did not become ready")

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5).text

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
