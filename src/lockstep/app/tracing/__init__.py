"""Traces (OpenTelemetry): a run is a trace, its steps, attempts, timers, approvals, compensation and
operator commands are spans, emitted from committed events by whichever process committed them.

    ids.py       traceparent parsing and formatting, the trace a start records, the derived span ids
    context.py   which trace a starting run joins (a header, an argument, the current span)
    spans.py     the spans a transition ends (pure: records, no OpenTelemetry)
    operator.py  what an operator command's span carries
    sink.py      TraceSink, what the application layer needs of tracing
    config.py    whether the OTEL_* environment turns tracing on (imports the SDK only then)
    sdk.py       the SDK glue: provider, derived-id generator, emission
"""

from __future__ import annotations

from .config import tracing_configured, tracing_from_env
from .context import current_span_ref, explicit_parent, request_parent
from .ids import SpanRef, attempt_traceparent, format_traceparent, new_trace, parse_traceparent, run_trace
from .sink import TraceSink
from .spans import SpanEvent, SpanRecord, ended_spans, history_spans

__all__ = [
    "SpanEvent",
    "SpanRecord",
    "SpanRef",
    "TraceSink",
    "attempt_traceparent",
    "current_span_ref",
    "ended_spans",
    "explicit_parent",
    "format_traceparent",
    "history_spans",
    "new_trace",
    "parse_traceparent",
    "request_parent",
    "run_trace",
    "tracing_configured",
    "tracing_from_env",
]
