"""A local HTTP server that replays recorded OpenAI-compatible responses: vLLM's shapes (model
list with max_model_len, SSE chunks, the final usage chunk with per-request speculative
decoding metrics, Prometheus counters) and a server that reports no draft statistics at all
(Ollama's shape). Real sockets and real SSE framing; only the engine behind them is absent."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORDS = ["The", " sky", " is", " blue", " because", " air", " scatters", " short", " waves", "."]


def _chunk(model, delta, finish=None, **extra):
    return {"id": "chatcmpl-rec", "object": "chat.completion.chunk", "created": 1764500000, "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **extra}


class RecordedServer:
    """kind: "vllm" (per-request spec metrics + /metrics) or "ollama" (no draft statistics);
    `stall_s`: how long the server says nothing before its first chunk (a slow server);
    `cut_after`: the server dies after that many words (the connection ends, no finish reason)."""

    def __init__(self, kind: str = "vllm", model: str = "google/gemma-4-31B-it", api_key: str | None = None,
                 stall_s: float = 0.0, cut_after: int | None = None):
        self.kind, self.model, self.api_key, self.stall_s, self.cut_after = kind, model, api_key, stall_s, cut_after
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": [0, 0, 0, 0]}
        self.requests: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _json(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self):
                if owner.api_key and self.headers.get("Authorization") != f"Bearer {owner.api_key}":
                    self._json(401, {"error": {"message": "Unauthorized", "type": "invalid_request_error"}})
                    return False
                return True

            def do_GET(self):
                if self.path == "/v1/models" and self._authorized():
                    entry = {"id": owner.model, "object": "model", "created": 1764500000,
                             "owned_by": "vllm" if owner.kind == "vllm" else "library"}
                    if owner.kind == "vllm":
                        entry.update(root=owner.model, parent=None, max_model_len=32768)
                    self._json(200, {"object": "list", "data": [entry]})
                elif self.path == "/metrics" and owner.kind == "vllm":
                    c = owner.counters
                    lines = ["# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
                             "# TYPE vllm:spec_decode_num_drafts_total counter",
                             f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{owner.model}"}} {c["drafts"]}.0',
                             f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="{owner.model}"}} '
                             f'{c["draft_tokens"]}.0',
                             f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="{owner.model}"}} '
                             f'{c["accepted"]}.0']
                    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name='
                              f'"{owner.model}",position="{i}"}} {v}.0' for i, v in enumerate(c["per_pos"])]
                    data = ("\n".join(lines) + "\n").encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                else:
                    self._json(404, {"detail": "Not Found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path != "/v1/chat/completions":
                    self._json(404, {"detail": "Not Found"})
                    return
                if not self._authorized():
                    return
                owner.requests.append(body)
                if body.get("model") != owner.model:
                    self._json(404, {"error": {"message": f"The model `{body.get('model')}` does not exist.",
                                               "type": "NotFoundError", "code": 404}})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                self.wfile.flush()
                time.sleep(owner.stall_s)
                n = min(int(body.get("max_tokens") or 10), len(WORDS))
                events = [_chunk(owner.model, {"role": "assistant", "content": ""})]
                events += [_chunk(owner.model, {"content": w}) for w in WORDS[:n]]
                events.append(_chunk(owner.model, {}, "length" if n < len(WORDS) else "stop"))
                usage = {"prompt_tokens": 12, "total_tokens": 12 + n, "completion_tokens": n}
                final = {"id": "chatcmpl-rec", "object": "chat.completion.chunk", "created": 1764500000,
                         "model": owner.model, "choices": [], "usage": usage}
                if owner.kind == "vllm":
                    # 3 drafts of 4 tokens: 4, 2 and 1 accepted -> histogram over 0..4 accepted
                    final["metrics"] = {"speculative_decoding": {
                        "num_draft_tokens": 12, "num_accepted_draft_tokens": 7, "draft_acceptance_rate": 7 / 12,
                        "mean_acceptance_length": (7 + 3) / 3, "acceptance_histogram": [0, 1, 1, 0, 1]}}
                    c = owner.counters
                    c["drafts"] += 3
                    c["draft_tokens"] += 12
                    c["accepted"] += 7
                    for i, v in enumerate([3, 2, 1, 1]):
                        c["per_pos"][i] += v
                events.append(final)
                if owner.cut_after is not None:  # the role chunk, some words, then the connection ends
                    events = events[:1 + owner.cut_after]
                    self.close_connection = True
                for ev in events:
                    self.wfile.write(f"data: {json.dumps(ev)}\n\n".encode())
                    self.wfile.flush()
                    time.sleep(0.005)
                if owner.cut_after is None:
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True  # a stalled reply must not hold up the test's end
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
