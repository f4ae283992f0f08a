"""What the tracing tests share: an in-process tracing over the SDK's in-memory exporter, spans of either
source (in-memory, or received over OTLP by lab/fleet/otlp.py) in one form, the span tree, and a scan of
everything a span carries for values that must never be there.

The traced definition goes through a retry (the charge fails once), a durable timer (settle), an
approval (its details quote the card) and a compensation (ship fails for good: the charge is refunded).
Its card is sensitive (x-lockstep-sensitive), the charge's output is (output_sensitive), and every
message of a step that sees the card is, so the run carries a sensitive value in its input, an output,
error messages and the approval's details."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from lab.fleet.otlp import Received, ReceivedEvent
from lockstep.app.tracing.sdk import Tracing
from lockstep.core.events import Event
from lockstep.core.timeutil import parse_iso

__all__ = [
    "CARD",
    "ERROR_SECRET",
    "SECRETS",
    "TOKEN",
    "TRACED",
    "assert_clean",
    "by_name",
    "event_ns",
    "from_memory",
    "in_memory",
    "tree_problems",
]

CARD = "4111-WALLABY-0042"
TOKEN = "TOK-KOOKABURRA-7781"  # noqa: S105 - a made-up payment token
ERROR_SECRET = "ERR-DINGO-5150"  # noqa: S105 - a made-up bank reference
SECRETS = (CARD, TOKEN, ERROR_SECRET)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
RETRY = {"max_attempts": 3, "initial_interval": "100ms", "backoff": 1.0}
TRACED: dict[str, Any] = {
    "name": "traced-pay",
    "input_schema": {
        "type": "object",
        "required": ["card", "ref"],
        "properties": {"card": {"type": "string", "x-lockstep-sensitive": True}, "ref": {"type": "string"}},
    },
    "steps": [
        {
            "id": "charge",
            "activity": "t.charge",
            "input": {"card": "${input.card}", "ref": "${input.ref}"},
            "output_sensitive": True,
            "timeout": "30s",
            "retry": RETRY,
            "idempotency_key": "charge-${input.ref}",
            "compensate": {"activity": "t.refund", "input": {"ref": "${input.ref}"}, "timeout": "30s"},
        },
        {"id": "settle", "wait": "150ms"},
        {
            "id": "review",
            "approval": {
                "approvers": {"users": ["alice"]},
                "timeout": "1h",
                "details": "Charge card ${input.card} for order ${input.ref}",
            },
        },
        {
            "id": "ship",
            "activity": "t.ship",
            "input": {"card": "${input.card}", "ref": "${input.ref}"},
            "timeout": "30s",
            "retry": RETRY,
        },
    ],
}


def in_memory() -> tuple[Tracing, InMemorySpanExporter]:
    """A tracing whose spans land in memory at once (no batching: a test reads them right after)."""
    exporter = InMemorySpanExporter()
    return Tracing(processor=SimpleSpanProcessor(exporter)), exporter


def from_memory(spans: Iterable[ReadableSpan]) -> list[Received]:
    """In-memory spans in the receiver's form (ids as hex)."""
    out = []
    for s in spans:
        ctx = s.context
        assert ctx is not None
        out.append(
            Received(
                trace_id=f"{ctx.trace_id:032x}",
                span_id=f"{ctx.span_id:016x}",
                parent_id=f"{s.parent.span_id:016x}" if s.parent is not None else None,
                name=s.name,
                start_ns=int(s.start_time or 0),
                end_ns=int(s.end_time or 0),
                attributes=dict(s.attributes or {}),
                events=tuple(
                    ReceivedEvent(e.name, int(e.timestamp), dict(e.attributes or {})) for e in s.events
                ),
                status=int(s.status.status_code.value),
                status_message=s.status.description or "",
                resource=dict(s.resource.attributes),
            )
        )
    return out


def event_ns(e: Event | dict[str, Any]) -> int:
    """An event's time in nanoseconds since the epoch (what a span's start or end must equal)."""
    at = e.at if isinstance(e, Event) else e["at"]
    return (parse_iso(at) - EPOCH) // timedelta(milliseconds=1) * 1_000_000


def by_name(spans: Sequence[Received], name: str) -> list[Received]:
    return sorted((s for s in spans if s.name == name), key=lambda s: s.start_ns)


def tree_problems(spans: Sequence[Received]) -> list[str]:
    """What is wrong with the spans as one trace: several trace ids, a span id twice, a parent missing
    (but the root's, which is the caller's span or none), a child outside its parent's time."""
    problems = []
    traces = {s.trace_id for s in spans}
    if len(traces) != 1:
        problems.append(f"{len(traces)} trace ids: {sorted(traces)}")
    ids = [s.span_id for s in spans]
    if len(ids) != len(set(ids)):
        problems.append("a span id appears twice")
    known = {s.span_id: s for s in spans}
    roots = [s for s in spans if s.name.startswith("run ")]
    if len(roots) != 1:
        problems.append(f"{len(roots)} root spans")
    for s in spans:
        if s in roots:
            continue
        parent = known.get(s.parent_id or "")
        if parent is None:
            problems.append(f"{s.name} ({s.span_id}) has no parent in the trace")
        elif s.name != "result ignored" and not parent.start_ns <= s.start_ns <= s.end_ns <= parent.end_ns:
            problems.append(f"{s.name} is outside its parent {parent.name}'s time")
    return problems


def assert_clean(spans: Sequence[Received], secrets: Sequence[str] = SECRETS) -> int:
    """No secret in any span name, attribute (key or value), event (name or attribute), status message
    or resource attribute; the number of strings scanned (a scan that read nothing proves nothing)."""
    scanned = 0
    for s in spans:
        texts = [s.name, s.status_message]
        texts += [f"{k}={v}" for k, v in s.attributes.items()]
        texts += [f"{k}={v}" for k, v in s.resource.items()]
        for e in s.events:
            texts.append(e.name)
            texts += [f"{k}={v}" for k, v in e.attributes.items()]
        for text in texts:
            scanned += 1
            for secret in secrets:
                assert secret not in text, f"{secret} in span {s.name}: {text}"
    return scanned
