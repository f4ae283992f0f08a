"""What the checker adds for traces (scenario `traced_crashes`): the spans a real OTLP receiver got from
every process of the fleet, against the runs' stored histories.

What is guaranteed, and so what is checked: a span is exported once, when it ends, by the process that
committed the event that ended it; a process SIGKILLed loses the spans of its last batch delay; nothing
else is lost, and `lockstep trace RUN --export` sends a run's spans again with the same ids and times.

Violations (each must be 0):
- spans_wrong: a span received that its run's history does not imply (an unknown id, another name,
  parent, start, end or attribute than the history's), one span id received with two contents, a run's
  spans under two trace ids, an attempt span whose start is not its ActivityStarted's time or whose
  end is not the time of the event that ended the attempt;
- spans_lost: a span the history implies that was not received, though no process was killed within
  the loss window after its end; or one still missing after `lockstep trace RUN --export`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from lockstep.app.tracing import SpanRecord, history_spans
from lockstep.core.events import Event
from lockstep.core.timeutil import parse_iso

from ..fleet.otlp import Received
from .checker import Verdict

__all__ = ["TRACE_CHECKS", "Expected", "check_spans", "expected_spans", "missing_after"]

TRACE_CHECKS = ("spans_wrong", "spans_lost")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# An attempt ends at the first of these for its task after its lease.
_ENDS = (
    "ActivitySucceeded",
    "ActivityFailed",
    "ActivityTimedOut",
    "ActivityCancelled",
    "ActivityDeadLettered",
)
_RUN_ENDS = ("RunCompleted", "RunFailed", "RunCancelled")


def _ns(at: str) -> int:
    return (parse_iso(at) - _EPOCH) // timedelta(milliseconds=1) * 1_000_000


@dataclass(frozen=True)
class Expected:
    """A span as the run's history implies it, in the receiver's form."""

    run_id: str
    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]


def expected_spans(run_id: str, events: list[Event]) -> dict[str, Expected]:
    def one(r: SpanRecord) -> Expected:
        parent = f"{r.parent_id:016x}" if r.parent_id is not None else None
        trace = f"{r.trace.trace_id:032x}"
        attrs = dict(r.attributes)
        return Expected(run_id, trace, f"{r.span_id:016x}", parent, r.name, _ns(r.start), _ns(r.end), attrs)

    return {e.span_id: e for e in map(one, history_spans(events))}


def _attempts_from_history(events: list[Event]) -> dict[tuple[str, int], tuple[int, int | None]]:
    """(task id, fencing) -> (lease time, end time or None), read from the history directly (not
    through the span derivation), so the check does not trust what it checks."""
    out: dict[tuple[str, int], tuple[int, int | None]] = {}
    for i, e in enumerate(events):
        if e.type != "ActivityStarted":
            continue
        d = e.data_json()
        end = next(
            (x for x in events[i + 1 :] if x.type in _ENDS and x.data_json().get("task_id") == d["task_id"]),
            None,
        )
        if end is None:  # the run ended with the attempt in flight
            end = next((x for x in events[i + 1 :] if x.type in _RUN_ENDS), None)
        out[(str(d["task_id"]), int(d["fencing"]))] = (_ns(e.at), _ns(end.at) if end is not None else None)
    return out


def check_spans(
    histories: dict[str, list[Event]], received: list[Received], v: Verdict
) -> dict[str, list[Expected]]:
    """Flag spans_wrong; return, per run, the expected spans not received (the caller decides which of
    them a kill explains)."""
    by_id: dict[str, list[Received]] = defaultdict(list)
    for s in received:
        by_id[s.span_id].append(s)
    attempts: dict[str, list[Received]] = defaultdict(list)
    for s in received:
        if s.name.startswith("attempt "):
            attempts[str(s.attributes.get("lockstep.task_id"))].append(s)
    expected: dict[str, Expected] = {}
    missing: dict[str, list[Expected]] = {}
    for run_id, events in histories.items():
        spans = expected_spans(run_id, events)
        expected.update(spans)
        traces = {s.trace_id for span_id in spans for s in by_id.get(span_id, [])}
        if len(traces) > 1:
            v.flag("spans_wrong", f"{run_id}: its spans are under {len(traces)} trace ids")
        gone = [x for span_id, x in spans.items() if span_id not in by_id]
        if gone:
            missing[run_id] = gone
        for (task, fencing), (lease, end) in _attempts_from_history(events).items():
            got = [s for s in attempts.get(task, []) if s.attributes.get("lockstep.fencing") == fencing]
            for s in got:
                if s.start_ns != lease or (end is not None and s.end_ns != end):
                    what = f"spans {s.start_ns}..{s.end_ns}, the history {lease}..{end}"
                    v.flag("spans_wrong", f"{run_id}: attempt {task}#{fencing} {what}")
            if len({s.span_id for s in got}) > 1:
                v.flag("spans_wrong", f"{run_id}: attempt {task}#{fencing} has {len(got)} different spans")
    for span_id, copies in by_id.items():
        want = expected.get(span_id)
        if want is None:
            if copies[0].attributes.get("lockstep.run_id") is not None:  # lockstep's, not a request's
                v.flag("spans_wrong", f"span {span_id} ({copies[0].name}) is not in its run's history")
            continue
        for c in copies:
            seen = Expected(
                want.run_id, c.trace_id, c.span_id, c.parent_id, c.name, c.start_ns, c.end_ns, c.attributes
            )
            if seen != want:
                v.flag("spans_wrong", f"{want.run_id}: span {span_id} received as {_diff(seen, want)}")
    return missing


def _diff(got: Expected, want: Expected) -> str:
    fields = ("trace_id", "parent_id", "name", "start_ns", "end_ns", "attributes")
    return "; ".join(
        f"{f} {getattr(got, f)!r} not {getattr(want, f)!r}"
        for f in fields
        if getattr(got, f) != getattr(want, f)
    )


def missing_after(
    missing: dict[str, list[Expected]], kills: list[float], window_s: float
) -> tuple[list[Expected], list[Expected]]:
    """(explained, unexplained): a missing span is explained by a kill at most `window_s` after its end."""
    explained: list[Expected] = []
    unexplained: list[Expected] = []
    for spans in missing.values():
        for x in spans:
            end = x.end_ns / 1e9
            (explained if any(0 <= k - end <= window_s for k in kills) else unexplained).append(x)
    return explained, unexplained
