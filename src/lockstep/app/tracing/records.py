"""A finished span as the derivation gives it (`SpanRecord`, with its `SpanEvent`s): plain data, no
OpenTelemetry, times as the events' ISO strings (`ns` turns one into the nanoseconds a span takes)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from ...core.timeutil import parse_iso
from .ids import RunTrace

__all__ = ["Attr", "SpanEvent", "SpanRecord", "ns"]

Attr = str | int | bool
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ns(at: str) -> int:
    """An event time (ISO, milliseconds) as nanoseconds since the epoch, exactly."""
    return (parse_iso(at) - _EPOCH) // timedelta(microseconds=1) * 1000


@dataclass(frozen=True)
class SpanEvent:
    name: str
    at: str
    attributes: Mapping[str, Attr] = field(default_factory=dict)


@dataclass(frozen=True)
class SpanRecord:
    """One finished span: `kind` is what it stands for (run, step, attempt, timer, approval,
    compensation, operator, attention, ignored); `error` the error code when it ended in failure."""

    kind: str
    name: str
    trace: RunTrace
    span_id: int
    parent_id: int | None
    start: str
    end: str
    attributes: Mapping[str, Attr]
    events: tuple[SpanEvent, ...] = ()
    error: str | None = None
