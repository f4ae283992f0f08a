"""Each metric moves as docs/operations.md says, in scripted scenarios on both backends, with the fake
clock: durations are exactly the differences of the events' times (millisecond resolution), counters
count the events, and a transition that crosses processes is measured once, by the one committing its
end."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from lockstep.app.service import Service
from lockstep.store import Store

from .conftest import FakeClock
from .metrickit import samples

TTL = timedelta(seconds=30)
T = "acme"
ORDER: dict[str, Any] = {
    "name": "order",
    "steps": [
        {
            "id": "reserve",
            "activity": "inventory.reserve",
            "timeout": "30s",
            "retry": {"max_attempts": 3, "initial_interval": "1s", "backoff": 1.0},
            "compensate": {"activity": "inventory.release", "retry": {"max_attempts": 1}},
        },
        {"id": "approve", "approval": {"approvers": {"users": ["alice"]}, "quorum": 1, "timeout": "1d"}},
        {"id": "charge", "activity": "payment.charge", "timeout": "30s", "retry": {"max_attempts": 1}},
    ],
}


def claim(svc: Service, activity: str) -> Any:
    (lease,) = svc.claim("w1", [activity], limit=1, lease_ttl=TTL)
    return lease


def test_a_run_through_retry_approval_and_compensation(svc: Service, clock: FakeClock) -> None:
    """Queue delay, attempt and step durations, retries, time in approval, the decision, a compensation
    failed for good then succeeded after an operator's retry, needs_attention by reason and the run's
    duration: each equal to what the history says."""
    svc.principals.create_tenant(T)
    svc.principals.create_user(T, "alice", ["approver"], [])
    svc.publish(T, ORDER)
    t0 = clock.now
    run = svc.start(T, "order", input={}).run_id
    clock.advance(seconds=2)
    first = claim(svc, "inventory.reserve")  # 2 s in the queue
    clock.advance(seconds=1)
    svc.fail(first.task_id, first.attempt, first.fencing, "Busy", "try later")  # after 1 s: retried
    clock.advance(seconds=1)
    assert svc.fire_due_timers() == 1
    clock.advance(milliseconds=500)
    second = claim(svc, "inventory.reserve")  # 0.5 s in the queue
    clock.advance(milliseconds=1500)
    svc.complete(second.task_id, second.attempt, second.fencing, {"held": True})  # reserve took 6 s
    requested = clock.now
    clock.advance(hours=1, milliseconds=7)
    alice = svc.principals.principal(T, "alice")
    assert alice is not None
    svc.approvals.decide_in_session(alice, run, "approve", "approve")  # 3600.007 s in approval
    charge = claim(svc, "payment.charge")
    svc.fail(charge.task_id, charge.attempt, charge.fencing, "Declined", "no", retryable=False)
    release = claim(svc, "inventory.release")
    svc.fail(release.task_id, release.attempt, release.fencing, "Down", "refund service down")
    assert svc.show(T, run).status == "needs_attention"
    svc.retry(T, run, "reserve", "refund service is back", actor="op")
    again = claim(svc, "inventory.release")
    clock.advance(seconds=3)
    svc.complete(again.task_id, again.attempt, again.fencing, {})
    view = svc.show(T, run)
    assert view.status == "failed"

    m = samples(svc.metrics.exposition())
    reserve = {"tenant": T, "activity": "inventory.reserve"}
    assert m.value("lockstep_activity_attempts_total", **reserve) == 2
    assert m.value("lockstep_activity_completions_total", **reserve) == 1
    assert m.value("lockstep_queue_delay_seconds_count", **reserve) == 2
    assert m.value("lockstep_queue_delay_seconds_sum", **reserve) == pytest.approx(2.5)
    failed = {**reserve, "outcome": "failed"}
    assert m.value("lockstep_attempt_duration_seconds_count", **failed) == 1
    assert m.value("lockstep_attempt_duration_seconds_sum", **failed) == pytest.approx(1.0)
    ok = {**reserve, "outcome": "succeeded"}
    assert m.value("lockstep_attempt_duration_seconds_sum", **ok) == pytest.approx(1.5)
    step = {"tenant": T, "definition": "order", "version": "1"}
    assert m.value("lockstep_step_retries_total", **step, step="reserve") == 1
    assert m.value("lockstep_step_retries_total", **step, step="charge") == 0
    assert m.value("lockstep_step_duration_seconds_count", **step, step="reserve") == 1
    assert m.value("lockstep_step_duration_seconds_sum", **step, step="reserve") == pytest.approx(6.0)
    assert m.value("lockstep_step_duration_seconds_sum", **step, step="approve") == pytest.approx(3600.007)
    order = {"tenant": T, "definition": "order"}
    granted = {**order, "outcome": "granted"}
    assert m.value("lockstep_approval_duration_seconds_count", **granted) == 1
    waited = (view.steps["approve"].finished_at, requested)
    assert m.value("lockstep_approval_duration_seconds_sum", **granted) == pytest.approx(3600.007)
    assert waited[0] is not None
    assert m.value("lockstep_approval_decisions_total", **order, decision="approve") == 1
    assert m.value("lockstep_compensations_total", **order, outcome="failed") == 1
    assert m.value("lockstep_compensations_total", **order, outcome="succeeded") == 1
    assert m.value("lockstep_needs_attention_total", **order, reason="compensation_failed") == 1
    assert m.value("lockstep_needs_attention_total", **order) == 1
    assert m.value("lockstep_operator_commands_total", tenant=T, command="retry") == 1
    assert m.value("lockstep_operator_commands_total", tenant=T) == 1
    assert m.value("lockstep_runs_finished_total", tenant=T, status="failed") == 1
    took = (clock.now - t0).total_seconds()
    assert m.value("lockstep_run_duration_seconds_sum", **order, status="failed") == pytest.approx(took)
    assert m.value("lockstep_timer_fire_lag_seconds_count", tenant=T) == 1
    assert m.value("lockstep_timer_fire_lag_seconds_sum", tenant=T) == 0


def test_lease_expiry_and_dead_letters(svc: Service, clock: FakeClock) -> None:
    """An expired lease counts a lease expiry, a timed-out attempt (from the lease to the scheduler's
    ActivityTimedOut) and a retry; a task no worker takes in time counts a dead letter by activity and
    needs_attention by reason."""
    svc.principals.create_tenant(T)
    svc.publish(T, ORDER)
    svc.start(T, "order", input={})
    lease = claim(svc, "inventory.reserve")
    clock.advance(seconds=31)
    assert svc.expire_leases() == 1
    assert lease.task_id
    clock.advance(hours=2)  # the retry is queued again, and nobody takes it for longer than unserved_after
    assert svc.fire_due_timers() == 1
    clock.advance(hours=2)
    assert svc.dead_letter_unserved() == 1
    m = samples(svc.metrics.exposition())
    reserve = {"tenant": T, "activity": "inventory.reserve"}
    assert m.value("lockstep_lease_expiries_total", **reserve) == 1
    timed_out = {**reserve, "outcome": "timed_out"}
    assert m.value("lockstep_attempt_duration_seconds_count", **timed_out) == 1
    assert m.value("lockstep_attempt_duration_seconds_sum", **timed_out) == pytest.approx(31.0)
    assert m.value("lockstep_activity_failures_total", **reserve, code="Timeout") == 1
    assert m.value("lockstep_step_retries_total", tenant=T, step="reserve") == 1
    assert m.value("lockstep_dead_letters_total", **reserve) == 1
    assert m.value("lockstep_needs_attention_total", tenant=T, reason="dead_letter") == 1
    assert m.value("lockstep_runs", tenant=T, status="needs_attention") == 1
    at = {"tenant": T, "definition": "order", "step": "reserve"}
    assert m.value("lockstep_runs_at_step", **at, wait="attention") == 1


def test_the_database_gauges_report_what_is_in_flight(svc: Service, clock: FakeClock) -> None:
    """Unfinished runs by definition, step and wait kind; waiting approvals and the oldest one's age;
    leases held, close to expiry and past it: read from the database at scrape time."""
    svc.principals.create_tenant(T)
    svc.principals.create_user(T, "alice", ["approver"], [])
    svc.publish(T, ORDER)
    runs = [svc.start(T, "order", input={}).run_id for _ in range(4)]
    for _ in range(2):  # two runs reach their approval 10 s apart
        lease = claim(svc, "inventory.reserve")
        svc.complete(lease.task_id, lease.attempt, lease.fencing, {})
        clock.advance(seconds=10)
    claim(svc, "inventory.reserve")  # leased for 30 s
    clock.advance(seconds=27)  # 3 s left on that lease
    m = samples(svc.metrics.exposition())
    at = {"tenant": T, "definition": "order"}
    assert m.value("lockstep_runs_at_step", **at, step="approve", wait="approval") == 2
    assert m.value("lockstep_runs_at_step", **at, step="reserve", wait="running") == 1
    assert m.value("lockstep_runs_at_step", **at, step="reserve", wait="queued") == 1
    assert m.value("lockstep_runs_at_step", **at) == len(runs)
    assert m.value("lockstep_approvals_waiting", tenant=T) == 2
    assert m.value("lockstep_approvals_waiting_oldest_age_seconds", tenant=T) == pytest.approx(47.0)
    assert m.value("lockstep_leases", tenant=T) == 1
    assert m.value("lockstep_leases_expiring", tenant=T) == 1  # within 5 s
    assert m.value("lockstep_leases_overdue", tenant=T) == 0
    clock.advance(seconds=4)
    m = samples(svc.metrics.exposition())
    assert m.value("lockstep_leases_overdue", tenant=T) == 1
    assert m.value("lockstep_tasks_ready", tenant=T, activity="inventory.reserve") == 1


def test_a_step_that_crosses_processes_is_measured_once(store: Store, clock: FakeClock) -> None:
    """Two processes (two Services on one database): the step entered in one and ended in the other is
    observed once, by the second, from the first's entry time; the first counts only its own commits."""
    first, second = Service(store, clock=clock), Service(store, clock=clock)
    first.principals.create_tenant(T)
    first.publish(T, ORDER)
    first.start(T, "order", input={})
    clock.advance(seconds=4)
    lease = claim(second, "inventory.reserve")
    clock.advance(seconds=2)
    second.complete(lease.task_id, lease.attempt, lease.fencing, {})
    a, b = samples(first.metrics.exposition()), samples(second.metrics.exposition())
    step = {"tenant": T, "step": "reserve"}
    assert a.value("lockstep_step_duration_seconds_count", **step) == 0
    assert b.value("lockstep_step_duration_seconds_count", **step) == 1
    assert b.value("lockstep_step_duration_seconds_sum", **step) == pytest.approx(6.0)
    assert a.value("lockstep_activity_attempts_total", tenant=T) == 0
    assert b.value("lockstep_activity_attempts_total", tenant=T) == 1
    assert b.value("lockstep_queue_delay_seconds_sum", tenant=T) == pytest.approx(4.0)
    # The gauges are the database's: both processes report the same.
    assert a.value("lockstep_runs_at_step", tenant=T, step="approve") == 1
    assert b.value("lockstep_runs_at_step", tenant=T, step="approve") == 1
