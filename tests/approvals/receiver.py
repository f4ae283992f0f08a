"""A real HTTP receiver on loopback (http.server in a thread) that records every request it gets and
answers each with the next status of a script (then 204)."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str
    requests: list[Received] = field(default_factory=list)
    script: list[tuple[int, dict[str, str]]] = field(default_factory=list)


@contextmanager
def receiver(tls: ssl.SSLContext | None = None) -> Iterator[Receiver]:
    """Plain HTTP on 127.0.0.1, or HTTPS with the server context `tls` (then the URL names localhost)."""
    rec = Receiver("")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                rec.requests.append(
                    Received(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                status, extra = rec.script.pop(0) if rec.script else (204, {})
            self.send_response(status)
            for k, v in extra.items():
                self.send_header(k, v)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_PUT = do_POST  # a redirected POST may come back as a GET: record that too

        def log_message(self, format: str, *args: object) -> None:  # quiet test output
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    rec.url = f"http://127.0.0.1:{server.server_address[1]}"
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
        rec.url = f"https://localhost:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
