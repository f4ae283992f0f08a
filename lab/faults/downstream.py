"""A fake payment API for the fault-injection suite: the downstream service lockstep's activities call.

It applies Stripe's idempotency rules (first use of a key applies the effect; the same key with the same
body replays the saved response; the same key with a different body is refused) and records every
request and every applied effect in a SQLite ledger, so the checker can tell, after the faults, whether
each step's effect happened exactly once. Faults are injected on demand through `POST /control`: a delay
before answering, a failure before applying anything (503), or a dropped response after the effect was
applied (the client sees the connection close, so the outcome is unknown to it: the case idempotency
keys exist for). Random draws come from one seeded generator, so a run is reproducible for a given
seed and request order.

It also stands in for a webhook receiver (`POST /notify`), where lockstep sends approval links.

Standard library only, so it runs anywhere the suite runs, in-process (`Downstream`) or as its own
process (`python -m lab.faults.downstream --ledger PATH`), which the suite can kill and restart.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import socket
import sys
import threading
from collections.abc import Mapping, Sequence
from contextlib import suppress
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from socketserver import TCPServer
from types import FrameType
from typing import Any, cast
from urllib.parse import urlsplit

from .ledger import LedgerReader, LedgerWriter
from .settings import FaultSettings

__all__ = ["Downstream", "FaultSettings", "LedgerReader", "canonical_sha", "main"]

KIND = re.compile(r"[a-z_]{1,32}")
MAX_BODY = 1 << 20


def canonical_sha(body: object) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise _HttpError(HTTPStatus.BAD_REQUEST, "bad_json", str(exc)) from None


class _HttpError(Exception):
    def __init__(self, status: int, error: str, detail: str = "") -> None:
        super().__init__(detail or error)
        self.status = status
        self.error = error
        self.detail = detail


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog is 5: a burst of workers connecting at once would be reset.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], ledger: LedgerWriter, faults: FaultSettings) -> None:
        self.ledger = ledger
        self.faults = faults
        self.stopping = threading.Event()
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, which can hang for seconds without DNS.
        TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that hang up mid-exchange are routine under fault injection; no traceback on stderr.
        return


class _Handler(BaseHTTPRequestHandler):
    server_version = "lockstep-downstream/1"
    # An idle or stuck client must not pin a handler thread forever.
    timeout = 60
    _responded = False

    @property
    def _srv(self) -> _Server:
        return cast(_Server, self.server)

    def log_message(self, format: str, *args: Any) -> None:
        return

    # Every method goes through one router, so a wrong method is a JSON 405 rather than the base's
    # HTML 501.
    def do_GET(self) -> None:
        self._route()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The base class's error page, as JSON (malformed request lines, unknown methods)."""
        if code == HTTPStatus.NOT_IMPLEMENTED:
            code = HTTPStatus.METHOD_NOT_ALLOWED
        self.close_connection = True
        with suppress(OSError):
            self._send_json(code, {"error": _slug(code), "detail": message or ""})

    def _route(self) -> None:
        path = urlsplit(self.path).path
        self._responded = False
        try:
            if path.startswith("/effects/"):
                self._allow("POST")
                self._effect(path.removeprefix("/effects/"))
            elif path == "/control":
                self._allow("GET", "POST")
                if self.command == "POST":
                    changes = self._json_body()
                    if not isinstance(changes, dict):
                        raise _HttpError(HTTPStatus.BAD_REQUEST, "bad_request", "a JSON object is required")
                    try:
                        settings = self._srv.faults.update(changes)
                    except ValueError as exc:
                        raise _HttpError(HTTPStatus.BAD_REQUEST, "bad_request", str(exc)) from None
                else:
                    settings = self._srv.faults.snapshot()
                self._send_json(HTTPStatus.OK, settings)
            elif path == "/notify":
                self._allow("POST")
                raw = self._read_body()
                _parse_json(raw)
                self._srv.ledger.notify(raw.decode())
                self._send(HTTPStatus.NO_CONTENT, b"")
            elif path == "/notifications":
                self._allow("GET")
                self._send_json(HTTPStatus.OK, self._srv.ledger.notification_bodies())
            elif path == "/health":
                self._allow("GET")
                self._send_json(HTTPStatus.OK, {"ok": True})
            else:
                raise _HttpError(HTTPStatus.NOT_FOUND, "not_found", f"no route for {path}")
        except _HttpError as exc:
            self._fail(exc.status, {"error": exc.error, "detail": exc.detail})
        except OSError:
            self.close_connection = True  # the client went away (or we dropped it); nothing to answer
        except Exception as exc:
            # A fake service answers 500 (with the error, for whoever debugs the scenario), never a traceback.
            self._fail(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal", "detail": repr(exc)})

    def _fail(self, status: int, payload: dict[str, Any]) -> None:
        if self._responded:
            return
        self.close_connection = True
        with suppress(OSError):
            self._send_json(status, payload)

    def _allow(self, *methods: str) -> None:
        if self.command not in methods:
            raise _HttpError(
                HTTPStatus.METHOD_NOT_ALLOWED, "method_not_allowed", f"use {' or '.join(methods)}"
            )

    def _effect(self, kind: str) -> None:
        delay_ms = self._srv.faults.delay_ms
        if delay_ms > 0 and self._srv.stopping.wait(delay_ms / 1000):
            # Stopped while holding the request: abandon it as a killed server would, rather than
            # applying an effect after stop() returned.
            self._hang_up()
            return
        ledger = self._srv.ledger
        key = self.headers.get("Idempotency-Key")
        # What the request log records of a bad request: as much as was understood before it failed.
        seen: dict[str, Any] = dict.fromkeys(("body_sha", "run_id", "step", "attempt"))
        seen |= {"kind": kind[:64], "key": key}
        try:
            raw = self._read_body()
            if not KIND.fullmatch(kind):
                raise _HttpError(HTTPStatus.BAD_REQUEST, "bad_kind", "kind must match [a-z_]{1,32}")
            if not key or not key.strip():
                raise _HttpError(
                    HTTPStatus.BAD_REQUEST, "missing_idempotency_key", "Idempotency-Key is required"
                )
            attempt_header = self.headers.get("X-Attempt")
            if attempt_header is not None:
                try:
                    seen["attempt"] = int(attempt_header)
                except ValueError:
                    raise _HttpError(
                        HTTPStatus.BAD_REQUEST, "bad_attempt", "X-Attempt must be an integer"
                    ) from None
            body = _parse_json(raw)
            if not isinstance(body, dict):
                raise _HttpError(HTTPStatus.BAD_REQUEST, "bad_request", "the body must be a JSON object")
            seen["body_sha"] = canonical_sha(body)
            seen["run_id"], seen["step"] = body.get("run_id"), body.get("step")
            if not isinstance(seen["run_id"], str) or not isinstance(seen["step"], str):
                seen["run_id"] = seen["step"] = None
                raise _HttpError(HTTPStatus.BAD_REQUEST, "bad_request", "run_id and step must be strings")
        except _HttpError as exc:
            ledger.log(**seen, outcome="bad_request", status=exc.status)
            raise
        fail, drop = self._srv.faults.draw()
        if fail:
            ledger.log(**seen, outcome="failed", status=HTTPStatus.SERVICE_UNAVAILABLE)
            raise _HttpError(HTTPStatus.SERVICE_UNAVAILABLE, "injected_failure", "injected by /control")
        decision = ledger.decide(
            kind=kind,
            key=key,
            body_sha=seen["body_sha"],
            run_id=seen["run_id"],
            step=seen["step"],
            attempt=seen["attempt"],
            amount=body.get("amount"),
            drop=drop,
        )
        if decision.dropped:
            # The effect is committed; the client gets a closed connection and no status line, so it
            # cannot know whether the effect happened.
            self._hang_up()
            return
        headers = {"Idempotent-Replayed": "true"} if decision.status == HTTPStatus.OK else {}
        self._send(decision.status, decision.response.encode(), headers, json_body=True)

    def _hang_up(self) -> None:
        """Close the connection without a single byte of response."""
        self._responded = True
        self.close_connection = True
        with suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            raise _HttpError(HTTPStatus.LENGTH_REQUIRED, "length_required", "send Content-Length, not chunks")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise _HttpError(HTTPStatus.BAD_REQUEST, "bad_request", "bad Content-Length") from None
        if length < 0 or length > MAX_BODY:
            raise _HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "too_large", f"at most {MAX_BODY} bytes")
        return self.rfile.read(length)

    def _json_body(self) -> Any:
        return _parse_json(self._read_body())

    def _send_json(self, status: int, payload: object, headers: Mapping[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), headers, json_body=True)

    def _send(
        self, status: int, body: bytes, headers: Mapping[str, str] | None = None, *, json_body: bool = False
    ) -> None:
        self._responded = True
        self.send_response(status)
        if json_body:
            self.send_header("Content-Type", "application/json")
        if status != HTTPStatus.NO_CONTENT:
            self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)


def _slug(code: int) -> str:
    try:
        phrase = HTTPStatus(code).phrase
    except ValueError:
        return "error"
    return re.sub(r"[^a-z]+", "_", phrase.lower()).strip("_")


class Downstream:
    """The fake API served from a daemon thread of this process (tests, or the CLI below)."""

    def __init__(
        self, ledger_path: str | os.PathLike[str], port: int = 0, *, host: str = "127.0.0.1"
    ) -> None:
        self.ledger_path = Path(ledger_path)
        self.host = host
        self.faults = FaultSettings()
        self._requested_port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Create the ledger's tables if needed, bind, serve in a daemon thread; the bound port."""
        if self._server is not None:
            raise RuntimeError("already started")
        ledger = LedgerWriter(self.ledger_path)
        ledger.create()
        self._server = _Server((self.host, self._requested_port), ledger, self.faults)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="downstream", daemon=True
        )
        self._thread.start()
        return self.port

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("not started")
        return self._server.server_port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        """Stop accepting, close the listening socket. A handler still sleeping out a delay wakes up and
        finishes on its own (daemon thread)."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join()
        self._server = self._thread = None

    def __enter__(self) -> Downstream:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # a reader polling for the file never sees it half written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.faults.downstream", description=__doc__)
    parser.add_argument("--ledger", required=True, type=Path, help="SQLite file (created if missing)")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--port-file", type=Path, help="write the bound port here once listening")
    args = parser.parse_args(argv)

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    # Installed before binding, so a SIGTERM right after the port file appears is never lost.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    downstream = Downstream(args.ledger, port=args.port)
    downstream.start()
    try:
        if args.port_file is not None:
            _write_atomically(args.port_file, f"{downstream.port}\n")
        print(f"downstream listening on {downstream.url}", flush=True)
        stop.wait()
    finally:
        downstream.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
