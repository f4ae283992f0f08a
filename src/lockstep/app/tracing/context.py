"""Which trace a run joins when it starts: the caller's context, taken from a `traceparent` header, an
explicit argument, or the OpenTelemetry span current in the starting thread (an embedding application's
own span, or the server span of the HTTP request). Reads the OpenTelemetry API only if something in
this process has imported it already: without it no span can be current, and importing it would cost
every short CLI command some 100 ms."""

from __future__ import annotations

import sys

from ...errors import InvalidInput
from .ids import SpanRef, parse_traceparent

__all__ = ["current_span_ref", "explicit_parent", "request_parent"]


def current_span_ref() -> SpanRef | None:
    """The span current in this thread (OpenTelemetry's context), if there is a valid one."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import trace  # noqa: PLC0415 - imported already (see above): a lookup

    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return SpanRef(ctx.trace_id, ctx.span_id, int(ctx.trace_flags))


def request_parent(header: str | None) -> SpanRef | None:
    """The parent of a run started by an HTTP request: the request's own server span when requests
    are traced (it is a child of the caller's span), else the caller's `traceparent` header. An
    invalid header is ignored, as the W3C spec says: the run starts a new trace."""
    return current_span_ref() or parse_traceparent(header)


def explicit_parent(traceparent: str | None) -> SpanRef | None:
    """The parent given as an argument (Engine.start, `lockstep start --traceparent`), else the span
    current in this thread. A value that is not a traceparent is refused: a caller who names a
    parent means it."""
    if traceparent is None:
        return current_span_ref()
    ref = parse_traceparent(traceparent)
    if ref is None:
        raise InvalidInput(
            f"traceparent {traceparent[:80]!r} is not a W3C traceparent: write "
            "00-<32 hex digits of trace id>-<16 hex digits of span id>-<2 hex digits of flags>, "
            "e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            code="bad_traceparent",
        )
    return ref
