"""A run is one trace (in-process engine, SDK in-memory exporter, both backends): its spans form the
expected tree under the caller's span, their ids and times are the history's, what the live listener
emitted equals what the history implies, and no sensitive value is in any of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tracekit import (
    CARD,
    ERROR_SECRET,
    TOKEN,
    TRACED,
    assert_clean,
    by_name,
    event_ns,
    from_memory,
    in_memory,
    tree_problems,
)

from lab.fleet import wait_until
from lockstep import ActivityError, Engine, Registry
from lockstep.app.tracing import history_spans
from lockstep.runtime.activity import ActivityContext

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
CALLER = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


def registry(seen: list[ActivityContext]) -> Registry:
    reg = Registry()

    def charge(data: dict[str, Any], ctx: ActivityContext) -> dict[str, Any]:
        seen.append(ctx)
        if ctx.attempt == 1:
            raise ActivityError("Busy", f"card {data['card']} is busy")
        return {"token": TOKEN}

    def ship(data: dict[str, Any], ctx: ActivityContext) -> dict[str, Any]:
        seen.append(ctx)
        raise ActivityError("NoAddress", f"{ERROR_SECRET}: no address for {data['card']}", retryable=False)

    def refund(data: dict[str, Any], ctx: ActivityContext) -> dict[str, Any]:
        seen.append(ctx)
        return {"refunded": data["ref"]}

    reg.register("t.charge", charge)
    reg.register("t.ship", ship)
    reg.register("t.refund", refund)
    return reg


def traced_run(db_url: str, key_file: Path) -> tuple[str, list[Any], list[Any], list[ActivityContext]]:
    """One run of TRACED to its end in this process: (run id, spans, stored events, activity contexts)."""
    tracing, exporter = in_memory()
    seen: list[ActivityContext] = []
    with Engine.open(db_url, keys=key_file, tracing=tracing) as engine:
        svc = engine.service
        svc.principals.create_tenant("acme")
        svc.principals.create_user("acme", "alice", ["approver"], [])
        engine.publish(TRACED, tenant="acme")
        worker = engine.worker(registry(seen)).start()
        try:
            run_id = engine.start(
                "traced-pay", input={"card": CARD, "ref": "o-1"}, tenant="acme", traceparent=CALLER
            )
            wait_until(lambda: engine.show(run_id, tenant="acme")["wait_kind"] == "approval", 30, "approval")
            alice = svc.principals.principal("acme", "alice")
            assert alice is not None
            svc.approvals.decide_in_session(alice, run_id, "review", "approve", f"card {CARD} checked")
            assert engine.wait_for(run_id, ("failed",), tenant="acme", timeout=30)["status"] == "failed"
        finally:
            worker.stop()
        with svc.read() as tx:
            events = [e for e, _ in tx.events(run_id)]
    return run_id, from_memory(exporter.get_finished_spans()), events, seen


@pytest.fixture
def run(db_url: str, key_file: Path) -> tuple[str, list[Any], list[Any], list[ActivityContext]]:
    return traced_run(db_url, key_file)


def test_the_run_is_one_trace_in_the_callers_trace_with_the_expected_tree(run: Any) -> None:
    """Retry, timer, approval and compensation give one trace: the root under the caller's span, steps
    under the root, attempts and timers under their step, the refund under the compensation."""
    run_id, spans, _events, _seen = run
    assert tree_problems(spans) == []
    (root,) = by_name(spans, "run traced-pay")
    assert root.trace_id == CALLER_TRACE
    assert root.parent_id == CALLER_SPAN
    assert root.attributes["lockstep.run_id"] == run_id
    assert root.attributes["lockstep.status"] == "failed"
    assert root.status == 2
    assert root.status_message == "NoAddress"
    ids = {s.span_id: s for s in spans}

    def parent(s: Any) -> str:
        return ids[s.parent_id].name

    steps = {s.attributes["lockstep.step"]: s for s in spans if s.name.startswith("step ")}
    assert set(steps) == {"charge", "settle", "review", "ship"}
    assert all(s.parent_id == root.span_id for s in steps.values())
    assert steps["charge"].attributes["lockstep.status"] == "succeeded"
    assert steps["ship"].attributes["lockstep.status"] == "failed"
    charges = by_name(spans, "attempt t.charge")
    assert [a.attributes["lockstep.outcome"] for a in charges] == ["failed", "succeeded"]
    assert [a.attributes["lockstep.attempt"] for a in charges] == [1, 2]
    assert {parent(a) for a in charges} == {"step charge"}
    assert charges[0].attributes["lockstep.error_code"] == "Busy"
    assert charges[0].attributes["lockstep.idempotency_key"] == "charge-o-1"
    timers = {s.attributes["lockstep.timer_kind"]: s for s in spans if s.name.startswith("timer ")}
    assert parent(timers["retry"]) == "step charge"
    assert parent(timers["wait"]) == "step settle"
    assert parent(timers["approval"]) == "approval review"
    assert timers["approval"].attributes["lockstep.outcome"] == "cancelled"
    (approval,) = by_name(spans, "approval review")
    assert parent(approval) == "step review"
    assert approval.attributes["lockstep.outcome"] == "approved"
    assert [(e.name, e.attributes) for e in approval.events] == [
        ("decision", {"lockstep.approver": "alice", "lockstep.decision": "approve"})
    ]
    (ship,) = by_name(spans, "attempt t.ship")
    assert parent(ship) == "step ship"
    assert ship.attributes["lockstep.outcome"] == "failed"
    (comp,) = by_name(spans, "compensation")
    assert parent(comp) == "run traced-pay"
    (refund,) = by_name(spans, "attempt t.refund")
    assert parent(refund) == "compensation"
    assert refund.attributes["lockstep.kind"] == "compensation"


def test_span_times_and_ids_are_the_historys(run: Any) -> None:
    """Every attempt span starts at its ActivityStarted and ends at the event that ended it; the root
    spans RunStarted to RunFailed; the timers their arming to their firing; each id is derived."""
    _run_id, spans, events, _seen = run
    (root,) = by_name(spans, "run traced-pay")
    assert root.start_ns == event_ns(events[0])
    assert root.end_ns == event_ns(events[-1])
    assert events[-1].type == "RunFailed"
    ends = {"ActivitySucceeded", "ActivityFailed", "ActivityTimedOut"}
    attempts = {
        (s.attributes["lockstep.task_id"], s.attributes["lockstep.fencing"]): s
        for s in spans
        if s.name.startswith("attempt ")
    }
    started = [e for e in events if e.type == "ActivityStarted"]
    assert len(attempts) == len(started) == 4
    for e in started:
        span = attempts[(e.data.task_id, e.data.fencing)]
        end = next(x for x in events if x.seq > e.seq and x.type in ends and x.data.task_id == e.data.task_id)
        assert (span.start_ns, span.end_ns) == (event_ns(e), event_ns(end))
        assert span.attributes["lockstep.worker"] == e.data.worker
    armed = {(e.data.key, e.data.generation): e for e in events if e.type == "TimerScheduled"}
    for s in spans:
        if s.name.startswith("timer "):
            key = (s.attributes["lockstep.timer"], s.attributes["lockstep.generation"])
            assert s.start_ns == event_ns(armed[key])


def test_live_spans_equal_the_spans_the_history_implies(run: Any) -> None:
    """What each commit emitted is exactly what folding the stored history gives: same ids, parents,
    names, times and attributes (so a span can be derived again, anywhere, after any crash)."""
    _run_id, spans, events, _seen = run
    derived = history_spans(events)

    def key(
        trace_id: str,
        span_id: str,
        parent: str | None,
        name: str,
        start: int,
        end: int,
        attrs: dict[str, Any],
    ) -> tuple[Any, ...]:
        return (trace_id, span_id, parent, name, start, end, tuple(sorted(attrs.items())))

    live = {
        key(s.trace_id, s.span_id, s.parent_id, s.name, s.start_ns, s.end_ns, s.attributes) for s in spans
    }
    again = {
        key(
            f"{r.trace.trace_id:032x}",
            f"{r.span_id:016x}",
            f"{r.parent_id:016x}" if r.parent_id is not None else None,
            r.name,
            event_ns({"at": r.start}),
            event_ns({"at": r.end}),
            dict(r.attributes),
        )
        for r in derived
    }
    assert live == again
    assert len(spans) == len(derived)


def test_activities_receive_their_attempt_spans_context(run: Any) -> None:
    """ctx.trace_context is the traceparent of the attempt's span: the activity's own spans nest there."""
    _run_id, spans, _events, seen = run
    attempts = {
        (s.attributes["lockstep.task_id"], s.attributes["lockstep.attempt"]): s
        for s in spans
        if s.name.startswith("attempt ")
    }
    assert len(seen) == 4
    for ctx in seen:
        version, trace_id, span_id, flags = ctx.trace_context.split("-")
        (span,) = [
            s
            for (task, attempt), s in attempts.items()
            if attempt == ctx.attempt and f"/{ctx.step_id}/{ctx.kind[0]}{ctx.attempt}-" in task
        ]
        assert (version, trace_id, span_id, flags) == ("00", CALLER_TRACE, span.span_id, "01")
        parent = ctx.otel_context()
        from opentelemetry import trace

        assert f"{trace.get_current_span(parent).get_span_context().span_id:016x}" == span.span_id


def test_no_sensitive_value_reaches_a_span(run: Any) -> None:
    """The card (input, activity input, approval details, error messages), the token (output) and the
    bank reference (error message) are in none of the trace's names, attributes or events."""
    _run_id, spans, _events, _seen = run
    assert assert_clean(spans) > 200
