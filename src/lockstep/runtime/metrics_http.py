"""/metrics of a `worker` or `scheduler` process (`--metrics-port`): the counters and histograms of what
this process committed, in Prometheus text, from a small HTTP server on its own thread.

Who may read it (docs/security.md, "/metrics"): on a loopback address anyone on the host, unless a
metrics token is set; on any other address only a scraper holding the metrics token (a process refuses
to listen beyond loopback without one). The token is the one `serve` takes (LOCKSTEP_METRICS_TOKEN),
checked in constant time; tenant API keys are for `serve`'s /metrics only.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from ..errors import InvalidInput

__all__ = ["MetricsServer", "check_exposure"]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve anywhere


def check_exposure(host: str, token: str | None) -> None:
    """Refuse to serve every tenant's counters beyond loopback without a token (InvalidInput)."""
    if token is None and not _loopback(host):
        raise InvalidInput(
            f"--metrics-host {host} without a metrics token would show every tenant's counters to anyone "
            "who reaches the port: set --metrics-token (or LOCKSTEP_METRICS_TOKEN), or listen on 127.0.0.1"
        )


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != "/metrics":
            self._answer(404, b"not found: the only path is /metrics\n")
            return
        token = self.server.token
        if token is not None:
            scheme, _, credential = self.headers.get("Authorization", "").partition(" ")
            given = credential.strip().encode()
            if scheme.lower() != "bearer" or not hmac.compare_digest(given, token.encode()):
                self._answer(401, b"send Authorization: Bearer <metrics token>\n", bearer=True)
                return
        body = generate_latest(self.server.source)
        self._answer(200, body, CONTENT_TYPE_LATEST)

    do_HEAD = do_GET

    def do_POST(self) -> None:
        self._answer(405, b"only GET /metrics\n")

    do_PUT = do_DELETE = do_PATCH = do_POST

    def _answer(self, status: int, body: bytes, kind: str = "text/plain", bearer: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        if bearer:
            self.send_header("WWW-Authenticate", 'Bearer realm="lockstep metrics"')
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return  # scrapes are not events worth a log line


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], source: Collector, token: str | None) -> None:
        self.source = source
        self.token = token
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)


class MetricsServer:
    """Serves `source` on http://host:port/metrics until stop() (port 0: any free port, see `port`)."""

    def __init__(self, source: Collector, host: str, port: int, token: str | None) -> None:
        check_exposure(host, token)
        try:
            self._server = _Server((host, port), source, token)
        except OSError as exc:
            raise InvalidInput(f"--metrics-port {port} on {host}: cannot listen ({exc.strerror})") from None
        self.host = host
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
