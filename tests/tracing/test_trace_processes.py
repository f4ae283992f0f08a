"""A run's trace across real processes and a SIGKILL (both backends): a `lockstep worker` exporting over
OTLP/HTTP to a real receiver on loopback (protobuf decoded with opentelemetry-proto), this process
(start, scheduler, approval) exporting to the SDK's in-memory exporter. The worker is killed in the
middle of an attempt and restarted; the spans of both sources make one trace with the expected tree,
the activity's own spans nest under their attempt, and no sensitive value is in any of them."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from datetime import timedelta
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
    from_memory,
    in_memory,
    tree_problems,
)

from lab.fleet import Fleet, wait_until
from lab.fleet.otlp import OtlpReceiver, Received, otlp_receiver
from lockstep import Engine
from lockstep.app.tracing import history_spans

pytestmark = pytest.mark.slow

MODULE = "trace_activities"
SOURCE = f'''
"""The traced definition's activities, run by `lockstep worker` subprocesses."""

import os
import time
from pathlib import Path

from opentelemetry import trace

from lockstep import ActivityError, activity

DIR = Path(os.environ["TRACE_TEST_DIR"])
tracer = trace.get_tracer("trace-test-activities")


@activity("t.charge")
def charge(data, ctx):
    # The activity's own span, a child of the attempt's (the process's provider is lockstep's).
    with tracer.start_as_current_span("card api", context=ctx.otel_context()):
        if ctx.attempt == 1:
            raise ActivityError("Busy", f"card {{data['card']}} is busy")
        return {{"token": {TOKEN!r}}}


@activity("t.ship")
def ship(data, ctx):
    if ctx.attempt == 1:
        (DIR / "ship-started").write_text(str(os.getpid()))
        while True:  # the test SIGKILLs this worker here
            time.sleep(0.05)
    raise ActivityError("NoAddress", f"{ERROR_SECRET}: no address for {{data['card']}}", retryable=False)


@activity("t.refund")
def refund(data, ctx):
    return {{"refunded": data["ref"]}}
'''
CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as r:
        yield r


def test_a_run_across_a_killed_worker_is_one_trace(
    db_url: str, key_file: Path, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """Retry, timer, approval, a SIGKILL of the worker mid-attempt and a restart, compensation: one trace
    from two exporters, each attempt once with the right parent, the activity's spans under theirs."""
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    env = {
        **receiver.env(service="lockstep-worker"),
        "TRACE_TEST_DIR": str(tmp_path),
        "LOCKSTEP_KEY_FILE": str(key_file),
    }
    fleet = Fleet(tmp_path / "fleet", db_url, activities=MODULE, env=env, pythonpath=[tmp_path])
    tracing, exporter = in_memory()
    stop = threading.Event()
    with Engine.open(db_url, keys=key_file, tracing=tracing) as engine:
        svc = engine.service
        svc.principals.create_tenant("acme")
        svc.principals.create_user("acme", "alice", ["approver"], [])
        engine.publish(TRACED, tenant="acme")
        scheduler = engine.scheduler(poll_interval=timedelta(milliseconds=50))
        sched = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
        sched.start()
        try:
            fleet.worker("w1")
            run_id = engine.start(
                "traced-pay", input={"card": CARD, "ref": "o-7"}, tenant="acme", traceparent=CALLER
            )
            wait_until(
                lambda: engine.show(run_id, tenant="acme")["wait_kind"] == "approval", 60, "the approval"
            )
            alice = svc.principals.principal("acme", "alice")
            assert alice is not None
            svc.approvals.decide_in_session(alice, run_id, "review", "approve", "looks right")
            wait_until((tmp_path / "ship-started").exists, 60, "ship's first attempt to begin")
            # What the worker committed so far has been exported (its batches go every 50 ms) ...
            receiver.wait_for(lambda s: len(by_name(s, "attempt t.charge")) == 2)
            (w1,) = fleet.procs
            w1.kill()  # ... then SIGKILL in the middle of ship's first attempt
            fleet.worker("w1")  # the same id: it gives up its predecessor's lease at once
            wait_until(
                lambda: engine.show(run_id, tenant="acme")["status"] == "failed", 60, "the run to fail"
            )
            restarted = fleet.procs[-1]
            restarted.signal(signal.SIGTERM)  # a graceful stop exports what is still buffered
            assert restarted.wait(30) == 0
        finally:
            stop.set()
            scheduler.wake.set()
            sched.join(10)
            fleet.shutdown(show_logs=True)
        with svc.read() as tx:
            events = [e for e, _ in tx.events(run_id)]
    here = from_memory(exporter.get_finished_spans())
    there = receiver.received()
    spans = here + there
    lockstep_spans = [s for s in spans if s.name != "card api"]
    assert tree_problems(lockstep_spans) == []
    check_tree(spans, there, here)
    check_equal_to_history(lockstep_spans, events)
    # The activity's own span is the activity's: the SDK records the exception it raised, message and
    # all (docs/security.md says so). Every span lockstep emits is clean.
    assert assert_clean(lockstep_spans) > 200


def check_tree(spans: list[Received], there: list[Received], here: list[Received]) -> None:
    ids = {s.span_id: s for s in spans}
    (root,) = by_name(spans, "run traced-pay")
    assert (root.trace_id, root.parent_id) == ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    ships = by_name(spans, "attempt t.ship")
    assert [s.attributes["lockstep.outcome"] for s in ships] == ["timed_out", "failed"]
    assert {ids[s.parent_id].name for s in ships if s.parent_id} == {"step ship"}
    assert ships[0] in here  # the lost lease was ended by this process's scheduler
    assert ships[1] in there  # the retry by the restarted worker
    assert ships[0].attributes["lockstep.worker"] == ships[1].attributes["lockstep.worker"] == "w1"
    charges = by_name(spans, "attempt t.charge")
    assert [s.attributes["lockstep.outcome"] for s in charges] == ["failed", "succeeded"]
    own = by_name(spans, "card api")
    assert len(own) == 2
    assert sorted(ids[s.parent_id].span_id for s in own if s.parent_id) == sorted(c.span_id for c in charges)
    assert all(s.trace_id == root.trace_id for s in own)
    (refund,) = by_name(spans, "attempt t.refund")
    assert ids[refund.parent_id or ""].name == "compensation"
    assert {ids[s.parent_id or ""].name for s in spans if s.name.startswith("timer ")} == {
        "step charge",
        "step settle",
        "step ship",
        "approval review",
    }
    instances = {s.resource.get("service.instance.id") for s in there}
    assert len(instances) == 2  # the killed worker and its successor both exported
    assert {s.resource.get("service.name") for s in there} == {"lockstep-worker"}


def check_equal_to_history(spans: list[Received], events: list[Any]) -> None:
    """Each span received is the one the stored history implies, and none is missing (the worker was
    killed only after its batches were exported)."""
    derived = {f"{r.span_id:016x}": r for r in history_spans(events)}
    got = {s.span_id: s for s in spans}
    assert set(got) == set(derived)
    for span_id, r in derived.items():
        s = got[span_id]
        assert s.name == r.name
        assert s.parent_id == (f"{r.parent_id:016x}" if r.parent_id is not None else None)
        assert s.attributes == dict(r.attributes)


def test_a_graceful_stop_exports_what_the_batch_still_holds(
    db_url: str, key_file: Path, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """With batches held for a minute, nothing arrives while the worker runs; SIGTERM exports them all
    before the process exits (so a deploy's rolling restart loses no span)."""
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    env = {
        **receiver.env(schedule_delay_ms=60_000),
        "TRACE_TEST_DIR": str(tmp_path),
        "LOCKSTEP_KEY_FILE": str(key_file),
    }
    fleet = Fleet(tmp_path / "fleet", db_url, activities=MODULE, env=env, pythonpath=[tmp_path])
    plain = {
        "name": "plain",
        "steps": [
            {"id": "refund", "activity": "t.refund", "input": {"ref": "${input.ref}"}, "timeout": "10s"}
        ],
    }
    with Engine.open(db_url, keys=key_file, tracing=False) as engine:
        engine.publish(plain)
        try:
            worker = fleet.worker("w1")
            runs = [engine.start("plain", input={"ref": f"r-{i}"}) for i in range(5)]
            for run_id in runs:
                engine.wait_for(run_id, ("completed",), timeout=30)
            assert receiver.received() == []  # still in the worker's batch
            worker.signal(signal.SIGTERM)
            assert worker.wait(30) == 0
        finally:
            fleet.shutdown()
    roots = by_name(receiver.received(), "run plain")
    assert sorted(s.attributes["lockstep.run_id"] for s in roots) == sorted(runs)
    assert len(by_name(receiver.received(), "attempt t.refund")) == 5
