"""A real HTTP server on loopback for the http step's tests (a threaded http.server): it records every
request it gets and answers by path, like a partner's API would, with the misbehaviours the tests need.

    /ok              200 JSON {"ok": true, "got": <the JSON body>}
    /text            200 text/plain
    /status/<n>      that status (JSON {"status": n})
    /flaky/<n>       500 for the first n requests with the same Idempotency-Key, then 200
    /apply-then-drop applies the effect once per Idempotency-Key (kept in `applied`), then closes the
                     connection without an answer the first time it sees a key; 200 after that
    /slow            answers after 3 s
    /big             200 with 1 MiB of JSON
    /redirect?to=URL 302 to URL
    /echo-auth       200 JSON echoing the Authorization and X-Api-Key headers (a careless server)
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["Loopback", "Seen"]


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Loopback:
    server: ThreadingHTTPServer
    seen: list[Seen] = field(default_factory=list)
    applied: Counter[str] = field(default_factory=Counter)  # effects applied, by idempotency key
    keys: Counter[str] = field(default_factory=Counter)  # requests seen, by idempotency key
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @classmethod
    def start(cls) -> Loopback:
        holder: dict[str, Loopback] = {}

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: Any) -> None:
                pass

            def _answer(self, status: int, body: Any, ctype: str = "application/json", **extra: str) -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                for k, v in extra.items():
                    self.send_header(k.replace("_", "-"), v)
                self.end_headers()
                self.wfile.write(data)

            def _handle(self) -> None:
                lb = holder["lb"]
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                key = self.headers.get("Idempotency-Key", "")
                parts = urlsplit(self.path)
                with lb.lock:
                    lb.seen.append(Seen(self.command, self.path, dict(self.headers.items()), body))
                    lb.keys[key] += 1
                    count = lb.keys[key]
                path = parts.path
                if path == "/ok":
                    is_json = "json" in self.headers.get("Content-Type", "")
                    got = json.loads(body) if body and is_json else None
                    self._answer(200, {"ok": True, "got": got})
                elif path == "/text":
                    self._answer(200, b"plain words", "text/plain")
                elif path.startswith("/status/"):
                    n = int(path.rsplit("/", 1)[1])
                    self._answer(n, {"status": n})
                elif path.startswith("/flaky/"):
                    n = int(path.rsplit("/", 1)[1])
                    self._answer(500 if count <= n else 200, {"try": count})
                elif path == "/apply-then-drop":
                    with lb.lock:
                        if lb.applied[key] == 0:
                            lb.applied[key] += 1  # the effect: once per key, as an idempotent API does
                    if count == 1:
                        self.close_connection = True
                        self.connection.close()  # applied, but the answer is lost
                        return
                    self._answer(200, {"applied": lb.applied[key]})
                elif path == "/slow":
                    time.sleep(3)
                    self._answer(200, {"slow": True})
                elif path == "/big":
                    self._answer(200, {"data": "x" * (1 << 20)})
                elif path == "/redirect":
                    to = parse_qs(parts.query)["to"][0]
                    self._answer(302, {}, Location=to)
                elif path == "/echo-auth":
                    self._answer(
                        200,
                        {"auth": self.headers.get("Authorization"), "key": self.headers.get("X-Api-Key")},
                        X_Echo=self.headers.get("Authorization") or "",
                    )
                else:
                    self._answer(404, {"error": "no such path"})

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that gave up (the timeout test) breaks the pipe: not the test's failure

        server = Server(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        lb = holder["lb"] = cls(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return lb
