"""The OpenTelemetry SDK glue: a tracer provider of lockstep's own whose id generator hands out the
derived ids (ids.py) for the spans a transition ends (spans.py), exported by a BatchSpanProcessor.
Imported only when tracing is configured (config.py): the engine needs the API alone.

Spans are created with the SDK's public API, `start_span(start_time=...)` and `end(end_time=...)`, the
times read from the events; the parent is a non-recording span context built from the derived parent
id. The provider's other spans (the HTTP server's, an activity's own) get random ids as usual.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterable, Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

from ...core.events import Event
from ...core.state import RunState
from .ids import SAMPLED, SpanRef, format_traceparent, new_trace, parse_traceparent
from .spans import SpanRecord, ended_spans, ns

__all__ = ["Tracing"]


class _DerivedIds(IdGenerator):
    """Random ids, except for the one span being emitted in this thread: its derived ids."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._local = threading.local()

    def force(self, trace_id: int, span_id: int) -> None:
        self._local.ids = (trace_id, span_id)

    def clear(self) -> None:
        self._local.ids = None

    def generate_span_id(self) -> int:
        ids = getattr(self._local, "ids", None)
        return ids[1] if ids is not None else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        ids = getattr(self._local, "ids", None)
        return ids[0] if ids is not None else self._random.generate_trace_id()


class _RedactPaths(SpanProcessor):
    """An approval link's path is its secret (`/approve/<token>`): a server span names the route only."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        path = (span.attributes or {}).get("url.path")
        if isinstance(path, str) and path.startswith("/approve/"):
            span.set_attribute("url.path", "/approve/{token}")

    def on_end(self, span: ReadableSpan) -> None:
        return None


def _resource() -> Resource:
    """OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES as the SDK reads them; `lockstep` by default."""
    found = Resource.create({SERVICE_INSTANCE_ID: f"{socket.gethostname()}:{os.getpid()}"})
    name = str(found.attributes.get(SERVICE_NAME, ""))
    if not name or name.startswith("unknown_service"):
        found = found.merge(Resource({SERVICE_NAME: "lockstep"}))
    return found


class Tracing:
    """One per process (Engine.open): emits the spans of every transition this process commits."""

    def __init__(
        self, exporters: Sequence[SpanExporter] = (), *, processor: SpanProcessor | None = None
    ) -> None:
        """Each of `exporters` behind a BatchSpanProcessor (OTEL_BSP_* apply), and `processor` as it is
        (tests give a SimpleSpanProcessor over an InMemorySpanExporter)."""
        processors: list[SpanProcessor] = [BatchSpanProcessor(x) for x in exporters]
        if processor is not None:
            processors.append(processor)
        if not processors:
            raise ValueError("give an exporter or a span processor")
        self.ids = _DerivedIds()
        # The sampler is the SDK's (OTEL_TRACES_SAMPLER); a run's spans follow its root's decision.
        self.provider = TracerProvider(resource=_resource(), id_generator=self.ids)
        self.provider.add_span_processor(_RedactPaths())
        for p in processors:
            self.provider.add_span_processor(p)
        self.tracer = self.provider.get_tracer("lockstep")
        self._closed = False

    @property
    def tracer_provider(self) -> TracerProvider:
        return self.provider

    def observe(self, before: RunState | None, after: RunState, events: list[Event]) -> None:
        self.emit(ended_spans(before, events))

    def emit(self, records: Iterable[SpanRecord]) -> None:
        for r in records:
            if not r.trace.flags & SAMPLED or self._closed:
                continue  # the run's trace was not sampled when it started
            context = Context()  # never the thread's current span: a run's parents are its own
            if r.parent_id is not None:
                parent = SpanContext(
                    r.trace.trace_id, r.parent_id, is_remote=True, trace_flags=TraceFlags(r.trace.flags)
                )
                context = trace.set_span_in_context(NonRecordingSpan(parent), context)
            self.ids.force(r.trace.trace_id, r.span_id)
            try:
                span = self.tracer.start_span(
                    r.name, context=context, attributes=dict(r.attributes), start_time=ns(r.start)
                )
            finally:
                self.ids.clear()
            for ev in r.events:
                span.add_event(ev.name, dict(ev.attributes), timestamp=ns(ev.at))
            if r.error is not None:
                span.set_status(Status(StatusCode.ERROR, r.error))
            span.end(end_time=ns(r.end))

    def new_trace(self, parent: SpanRef | None) -> tuple[str, str | None]:
        """A caller's trace is joined with its sampling decision; a new one is sampled by the SDK's
        sampler now, once for the whole run (a run's spans are emitted by many processes)."""
        if parent is not None:
            return new_trace(parent)
        traceparent, _ = new_trace(None)
        ref = parse_traceparent(traceparent)
        if ref is None:  # pragma: no cover - new_trace writes a valid one
            raise ValueError(f"not a traceparent: {traceparent}")
        decision = self.provider.sampler.should_sample(Context(), ref.trace_id, "run").decision
        if decision is Decision.RECORD_AND_SAMPLE:
            return traceparent, None
        return format_traceparent(SpanRef(ref.trace_id, ref.span_id, 0)), None

    def set_global(self) -> None:
        if type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider":  # none set yet
            trace.set_tracer_provider(self.provider)

    def flush(self) -> None:
        self.provider.force_flush()

    def shutdown(self) -> None:
        if not self._closed:
            self._closed = True
            self.provider.shutdown()
