"""A local stand-in for the Hugging Face Hub: a real HTTP server on 127.0.0.1 that serves
files the way the Hub does (file list API, HEAD with size and etag, ranged GET: open or closed), plus
switches to misbehave: gated repos, a connection dropped half-way, corrupted bytes, a
size too large for the disk, slow transfers."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class Hub:
    def __init__(self):
        self.repos: dict[str, dict[str, bytes]] = {}
        self.gated: set[str] = set()
        self.drop_once: set[str] = set()  # "repo/path": first full GET stops half-way
        self.corrupt: set[str] = set()  # served bytes differ from the listed sha256
        self.fake_size: dict[str, int] = {}  # listed size override
        self.delay_per_chunk = 0.0
        self.header_override: dict[str, dict[str, str]] = {}  # "repo/path": hostile response headers
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range)
        self._srv = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._srv.daemon_threads = True
        self._thread = threading.Thread(target=self._srv.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._srv.server_address[1]}"

    def add(self, repo: str, path: str, data: bytes) -> None:
        self.repos.setdefault(repo, {})[path] = data

    def start(self) -> "Hub":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._srv.shutdown()
        self._srv.server_close()

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _send_json(self, obj, code=200):
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _error(self, code, error_code, message):
                body = json.dumps({"error": message}).encode()
                self.send_response(code)
                self.send_header("X-Error-Code", error_code)
                self.send_header("X-Error-Message", message)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _route(self):
                url = urlparse(self.path)
                parts = [unquote(p) for p in url.path.strip("/").split("/")]
                hub.requests.append((self.command, url.path, self.headers.get("Range")))
                if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "tree":
                    return self._tree("/".join(parts[2:4]), "/".join(parts[6:]))
                if len(parts) >= 5 and parts[2] == "resolve":
                    return self._file("/".join(parts[:2]), "/".join(parts[4:]))
                self._error(404, "EntryNotFound", "no such route")

            def _check_repo(self, repo) -> bool:
                if repo in hub.gated:
                    self._error(403, "GatedRepo", f"Access to model {repo} is restricted.")
                    return False
                if repo not in hub.repos:
                    self._error(404, "RepoNotFound", f"Repository {repo} not found")
                    return False
                return True

            def _tree(self, repo, prefix):
                if not self._check_repo(repo):
                    return
                items, folders = [], set()
                for path, data in sorted(hub.repos[repo].items()):
                    if prefix and not path.startswith(prefix):
                        continue
                    if "/" in path:
                        folders.add(path.rsplit("/", 1)[0])
                    size = hub.fake_size.get(f"{repo}/{path}", len(data))
                    items.append({"type": "file", "path": path, "size": size,
                                  "oid": hashlib.sha1(data).hexdigest(),
                                  "lfs": {"oid": hashlib.sha256(data).hexdigest(), "size": size, "pointerSize": 134}})
                items += [{"type": "directory", "path": f, "oid": hashlib.sha1(f.encode()).hexdigest()} for f in folders]
                self._send_json(items)

            def _file(self, repo, path):
                if not self._check_repo(repo):
                    return
                data = hub.repos[repo].get(path)
                if data is None:
                    return self._error(404, "EntryNotFound", f"{path} not found in {repo}")
                key = f"{repo}/{path}"
                sha = hashlib.sha256(data).hexdigest()
                if key in hub.corrupt:
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                start, end = 0, len(data) - 1  # a range's last byte, as HTTP counts it
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes="):
                    first, _, last = rng[6:].partition("-")
                    start = int(first or 0)
                    end = min(int(last), end) if last else end
                ranged = bool(rng) and (start or end < len(data) - 1)
                body = data[start:end + 1]
                self.send_response(206 if ranged else 200)
                headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{sha}"'} | hub.header_override.get(key, {})
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(len(body)))
                if ranged:
                    self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
                self.end_headers()
                if self.command == "HEAD":
                    return
                if key in hub.drop_once and not start:
                    hub.drop_once.discard(key)
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                for i in range(0, len(body), 64 * 1024):
                    if hub.delay_per_chunk:
                        time.sleep(hub.delay_per_chunk)
                    try:
                        self.wfile.write(body[i:i + 64 * 1024])
                    except (BrokenPipeError, ConnectionResetError):
                        return

            do_GET = do_HEAD = _route

        return Handler
