"""What the run-webhook tests share: a real receiver on loopback that verifies every request with the
`standardwebhooks` library (and can be taken down and brought back on the same port), and definitions
whose runs produce each subscribed event."""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

__all__ = ["APPROVE", "FAIL", "Receiver", "free_port"]

APPROVE: dict[str, Any] = {
    "name": "hooked",
    "steps": [
        {"id": "ok", "approval": {"approvers": {"users": ["alice"]}, "quorum": 1, "timeout": "1h"}},
        {"id": "done", "succeed": True},
    ],
}
FAIL: dict[str, Any] = {
    "name": "failing",
    "steps": [{"id": "no", "fail": {"error": "Nope", "message": "no"}}],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Receiver:
    """POSTs to http://127.0.0.1:<port>/hook, each verified with Webhook(secret).verify; `up()` and
    `down()` start and stop the listening socket (down: connections are refused)."""

    port: int = field(default_factory=free_port)
    secret: str = ""
    verified: list[dict[str, Any]] = field(default_factory=list)  # {id, body} of each verified request
    forged: int = 0
    status: int = 204
    server: ThreadingHTTPServer | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def up(self) -> None:
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    Webhook(rec.secret).verify(body, headers)
                    ok = True
                except WebhookVerificationError:
                    ok = False
                with rec.lock:
                    if ok:
                        rec.verified.append({"id": headers["webhook-id"], "body": json.loads(body)})
                    else:
                        rec.forged += 1
                self.send_response(rec.status if ok else 401)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def down(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def ids(self) -> list[str]:
        with self.lock:
            return [v["id"] for v in self.verified]

    def events(self, run_id: str) -> list[str]:
        with self.lock:
            return [v["body"]["type"] for v in self.verified if v["body"]["data"]["run_id"] == run_id]
