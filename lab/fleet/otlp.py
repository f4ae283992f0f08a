"""A real OTLP/HTTP trace receiver on loopback: what a collector is to lockstep's processes. It decodes
each `ExportTraceServiceRequest` (protobuf, optionally gzip) with opentelemetry-proto and keeps the
spans as plain `Received` records; `env()` is what a process needs to export to it. Used by the
tracing tests, the fault lab's tracing scenario and the benchmark's traced workload."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

__all__ = ["OtlpReceiver", "Received", "ReceivedEvent", "otlp_receiver"]

Attr = str | int | bool | float


@dataclass(frozen=True)
class ReceivedEvent:
    name: str
    time_ns: int
    attributes: dict[str, Attr]


@dataclass(frozen=True)
class Received:
    """One span as the receiver got it (ids as hex, as in a traceparent)."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Attr]
    events: tuple[ReceivedEvent, ...]
    status: int  # 0 unset, 1 ok, 2 error
    status_message: str
    resource: dict[str, Attr] = field(default_factory=dict)


def _value(v: AnyValue) -> Attr:
    kind = v.WhichOneof("value")
    if kind == "string_value":
        return v.string_value
    if kind == "int_value":
        return int(v.int_value)
    if kind == "bool_value":
        return bool(v.bool_value)
    if kind == "double_value":
        return float(v.double_value)
    return str(v)  # arrays, maps, bytes: lockstep sends none; kept visible if one ever appears


def _attrs(kvs: Iterable[KeyValue]) -> dict[str, Attr]:
    return {kv.key: _value(kv.value) for kv in kvs}


def decode(body: bytes) -> list[Received]:
    """The spans of one export request."""
    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    out: list[Received] = []
    for rs in req.resource_spans:
        resource = _attrs(rs.resource.attributes)
        for ss in rs.scope_spans:
            for sp in ss.spans:
                out.append(
                    Received(
                        trace_id=sp.trace_id.hex(),
                        span_id=sp.span_id.hex(),
                        parent_id=sp.parent_span_id.hex() or None,
                        name=sp.name,
                        start_ns=int(sp.start_time_unix_nano),
                        end_ns=int(sp.end_time_unix_nano),
                        attributes=_attrs(sp.attributes),
                        events=tuple(
                            ReceivedEvent(e.name, int(e.time_unix_nano), _attrs(e.attributes))
                            for e in sp.events
                        ),
                        status=int(sp.status.code),
                        status_message=sp.status.message,
                        resource=resource,
                    )
                )
    return out


class OtlpReceiver:
    """POST /v1/traces on 127.0.0.1 (a free port): every span received, in arrival order."""

    def __init__(self) -> None:
        self.spans: list[Received] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                spans = decode(body)
                with receiver._lock:
                    receiver.spans.extend(spans)
                    receiver.requests += 1
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:  # quiet: the suite reads its own logs
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, name="otlp-receiver", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def env(self, service: str = "lockstep", schedule_delay_ms: int = 50) -> dict[str, str]:
        """The OTEL_* variables that make a lockstep process export its spans here, batches sent every
        `schedule_delay_ms` (so a test or a SIGKILL waits little for them)."""
        return {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": self.endpoint,
            "OTEL_SERVICE_NAME": service,
            "OTEL_BSP_SCHEDULE_DELAY": str(schedule_delay_ms),
        }

    def received(self) -> list[Received]:
        with self._lock:
            return list(self.spans)

    def by_trace(self) -> Mapping[str, list[Received]]:
        out: dict[str, list[Received]] = {}
        for s in self.received():
            out.setdefault(s.trace_id, []).append(s)
        return out

    def wait_for(self, predicate: Callable[[list[Received]], bool], timeout: float = 30.0) -> list[Received]:
        """Wait until `predicate(spans)` holds; the spans then."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.received()
            if predicate(spans):
                return spans
            if time.monotonic() > deadline:
                names = sorted({s.name for s in spans})
                raise TimeoutError(f"the receiver has {len(spans)} spans ({names}) and not what was awaited")
            time.sleep(0.05)

    def start(self) -> OtlpReceiver:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    r = OtlpReceiver().start()
    try:
        yield r
    finally:
        r.stop()
