"""Example-based tests of decide/evolve: each test walks one run through a story and pins its events."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from corekit import T0, Run, example, load, types

from lockstep.core.commands import (
    CancelRun,
    ClaimTask,
    ExpireLease,
    FireTimer,
    Rejected,
    ReportFailure,
    ReportSuccess,
    StartRun,
)
from lockstep.core.decide import decide, task_id
from lockstep.core.effects import CloseTask, CloseTimer, CreateTask, CreateTimer, LeaseTask, effects_of
from lockstep.core.explain import explain
from lockstep.core.state import RunState
from lockstep.core.timeutil import iso

ORDER = {"sku": "SKU-1", "qty": 2, "order_id": 42}

SAGA = load(
    """
name: saga
steps:
  - id: reserve
    activity: inventory.reserve
    timeout: 30s
    compensate: {activity: inventory.release, input: {sku: "${input.sku}"}}
  - id: charge
    activity: payments.charge
    timeout: 30s
    idempotency_key: "charge-${input.order_id}"
    compensate:
      activity: payments.refund
      input: {amount: "${steps.charge.output.amount}"}
      timeout: 1m
      retry: {max_attempts: 2, initial_interval: 5s}
  - id: notify
    activity: email.send
    timeout: 10s
  - id: ship
    activity: shipping.create
    timeout: 10s
    retry:
      {max_attempts: 3, initial_interval: 2s, backoff: 3.0, max_interval: 10s, non_retryable: [NoAddress]}
"""
)

AT_MOST_ONCE = load(
    """
name: payout
steps:
  - id: reserve
    activity: inventory.reserve
    timeout: 30s
    compensate: {activity: inventory.release}
  - id: pay
    activity: bank.transfer
    delivery: at_most_once
    timeout: 30s
    retry: {max_attempts: 3}
"""
)


def saga_to_ship() -> Run:
    """A saga run with reserve, charge and notify done and ship queued."""
    r = Run(SAGA, ORDER)
    r.run_activity({"reservation": "R1"})
    r.run_activity({"amount": 1250})
    r.run_activity(None)
    assert r.s.active is not None
    assert r.s.active.step == "ship"
    return r


def assert_only_ignored(r: Run, command: Any) -> None:
    """The command appends exactly one ResultIgnored; status, steps, output and active stay the same."""
    before = r.s
    events = r.send(command)
    assert types(events) == ["ResultIgnored"]
    after = r.s
    assert after.status == before.status
    assert after.steps == before.steps
    assert after.output == before.output
    assert after.active == before.active
    assert after.timers == before.timers
    assert after.ignored_results == before.ignored_results + 1


# --- starting ---------------------------------------------------------------------------------------


def test_start_records_definition_and_schedules_first_activity() -> None:
    """StartRun pins name/version/digest, lists the steps and schedules attempt 1 of the first activity."""
    r = Run(example(), ORDER, version=3)
    assert types(r.events) == ["RunStarted", "ActivityScheduled"]
    started, scheduled = r.events
    assert started.data.definition == {"name": "order-fulfilment", "version": 3, "digest": r.d.digest}
    assert started.data.steps == ["reserve", "route", "cooling-off", "ship", "rejected"]
    assert scheduled.data_json() == {
        "step": "reserve",
        "attempt": 1,
        "task_id": "r1/reserve/a1-2",
        "activity": "inventory.reserve",
        "input": {"sku": "SKU-1", "qty": 2},
        "idempotency_key": "reserve-42",
        "delivery": "idempotent",
        "timeout_ms": 30_000,
        "queue": None,
        "priority": 0,
        "max_attempts": 5,
    }
    assert r.s.status == "running"
    assert r.s.current_step == "reserve"
    assert r.s.steps["reserve"].status == "scheduled"
    assert r.s.steps["ship"].status == "pending"


def test_start_rejects_input_that_fails_the_schema() -> None:
    """Input that fails input_schema is Rejected(invalid_input) and nothing is appended."""
    d = load(
        "name: typed\ninput_schema: {type: object, required: [sku]}\nsteps:\n  - id: a\n    succeed: true\n"
    )
    with pytest.raises(Rejected) as info:
        decide(None, StartRun("r1", "t1", 1, {"qty": 1}), T0, d)
    assert info.value.code == "invalid_input"
    assert "sku" in info.value.reason


def test_start_twice_and_commands_without_run_are_rejected() -> None:
    """A second StartRun is Rejected(exists); any other command without a run is Rejected(no_run)."""
    r = Run(example(), ORDER)
    with pytest.raises(Rejected) as info:
        r.decide(StartRun("r1", "t1", 1, ORDER))
    assert info.value.code == "exists"
    with pytest.raises(Rejected) as info:
        decide(None, CancelRun("x"), T0, example())
    assert info.value.code == "no_run"


def test_default_idempotency_key_is_tenant_run_step() -> None:
    """Without idempotency_key the key is tenant:run:step, stable across attempts."""
    r = Run(SAGA, ORDER, tenant="acme", run_id="run-9")
    assert r.s.active is not None
    assert r.s.active.idempotency_key == "acme:run-9:reserve"


def test_task_ids_are_deterministic() -> None:
    """task_id names run, step, kind, attempt and the seq of the scheduling event."""
    assert task_id("r", "s", "action", 3, 7) == "r/s/a3-7"
    assert task_id("r", "s", "compensation", 1, 12) == "r/s/c1-12"
    assert task_id("r", "s", "action", 1, 2) != task_id("r", "s", "action", 1, 9)  # a second pass


def test_scheduled_task_id_carries_the_seq_of_its_event() -> None:
    """ActivityScheduled/CompensationScheduled name their task with their own seq."""
    r = saga_to_ship()
    r.claim()
    r.fail("NoAddress", "x")
    scheduled = [e for e in r.events if e.type in ("ActivityScheduled", "CompensationScheduled")]
    for e in scheduled:
        kind = "compensation" if e.type == "CompensationScheduled" else "action"
        assert e.data.task_id == task_id("r1", e.data.step, kind, e.data.attempt, e.seq)


# --- happy path -------------------------------------------------------------------------------------


def test_happy_path_completes_with_last_output() -> None:
    """reserve -> route(else) -> ship -> next: end completes the run with ship's output."""
    r = Run(example(), ORDER)
    claim = r.claim("worker-a")
    assert types(claim) == ["ActivityStarted"]
    assert claim[0].data.fencing == claim[0].seq
    assert r.s.active is not None
    assert r.s.active.worker == "worker-a"
    assert r.s.status == "running"
    events = r.succeed({"reservation": "R1"})
    assert types(events) == ["ActivitySucceeded", "ChoiceEvaluated", "ActivityScheduled"]
    assert events[1].data_json() == {"step": "route", "branch": "else", "condition": None, "next": "ship"}
    assert events[2].data.step == "ship"
    events = r.run_activity({"tracking": "T1"})
    assert types(events) == ["ActivityStarted", "ActivitySucceeded", "RunCompleted"]
    s = r.s
    assert s.status == "completed"
    assert s.output == {"tracking": "T1"}
    assert s.finished_at == iso(T0)
    assert s.current_step is None
    assert s.active is None
    assert not s.timers
    assert s.steps["reserve"].output == {"reservation": "R1"}
    assert s.steps["route"].output == {"next": "ship"}
    assert s.steps["cooling-off"].status == "pending"
    assert s.steps["rejected"].status == "pending"
    assert s.completed == ("reserve",)  # only compensable steps are remembered for compensation


def test_choice_branch_to_wait_then_timer_fires() -> None:
    """qty > 10 takes the branch to the wait step; firing its timer continues to ship."""
    r = Run(example(), {**ORDER, "qty": 20})
    events = r.run_activity({"reservation": "R1"})
    assert types(events)[-2:] == ["ChoiceEvaluated", "TimerScheduled"]
    choice, timer = events[-2:]
    assert choice.data_json() == {
        "step": "route",
        "branch": 0,
        "condition": "input.qty > 10",
        "next": "cooling-off",
    }
    assert timer.data.key == "wait:cooling-off"
    assert timer.data.kind == "wait"
    assert timer.data.generation == timer.seq
    assert timer.data.fire_at == iso(T0 + timedelta(seconds=2))
    assert r.s.status == "waiting"
    assert r.s.steps["cooling-off"].status == "waiting"
    r.advance(2)
    events = r.fire()
    assert types(events) == ["TimerFired", "ActivityScheduled"]
    assert r.s.steps["cooling-off"].status == "succeeded"
    assert not r.s.timers
    r.run_activity({"tracking": "T"})
    assert r.s.status == "completed"


def test_default_output_is_the_last_activity_output_not_choice_bookkeeping() -> None:
    """Without an output template the run output is the last succeeded activity's, never {'next': ...}."""
    r = Run(example(), ORDER)
    r.run_activity({"reservation": "R1"})
    r.run_activity(None)
    assert r.s.status == "completed"
    assert r.s.output is None  # ship, the last activity, returned null
    assert r.s.output != {"next": "ship"}


def test_default_output_follows_execution_order_not_definition_order() -> None:
    """When `next` jumps back in the list, the output is that of the activity that ran last."""
    # a choice jumps to `start` (last in the list), which then goes back to `first`
    d = load(
        """
name: jump2
steps:
  - id: go
    choice: [{else: start}]
  - id: first
    activity: svc.first
    timeout: 1s
    next: end
  - id: start
    activity: svc.start
    timeout: 1s
    next: first
"""
    )
    assert d.following("start") == "first"
    r = Run(d, {})
    r.run_activity({"from": "start"})
    r.run_activity({"from": "first"})
    assert r.s.status == "completed"
    assert r.s.output == {"from": "first"}


def test_succeed_step_renders_output_and_fail_step_renders_message() -> None:
    """A succeed step renders its output template; a fail step fails the run with its code and message."""
    d = load(
        """
name: gate
steps:
  - id: check
    choice:
      - {if: "input.qty > 10", next: too-many}
      - {else: ok}
  - id: ok
    succeed: {output: {accepted: "${input.qty}"}}
  - id: too-many
    fail: {error: Rejected, message: "too many: ${input.qty}"}
"""
    )
    ok = Run(d, {"qty": 3})
    assert types(ok.events) == ["RunStarted", "ChoiceEvaluated", "RunCompleted"]
    assert ok.s.output == {"accepted": 3}
    bad = Run(d, {"qty": 30})
    assert types(bad.events) == ["RunStarted", "ChoiceEvaluated", "StepFailed", "RunFailed"]
    assert bad.s.status == "failed"
    assert bad.s.error == {"code": "Rejected", "message": "too many: 30", "step": "too-many"}
    assert bad.s.steps["too-many"].status == "failed"


def test_definition_output_template() -> None:
    """A top-level output template builds the run output from step outputs."""
    d = load(
        "name: out\noutput: {id: '${steps.a.output.id}'}\nsteps:\n"
        "  - id: a\n    activity: svc.a\n    timeout: 1s\n"
    )
    r = Run(d, {})
    r.run_activity({"id": "X"})
    assert r.s.output == {"id": "X"}


# --- retries ----------------------------------------------------------------------------------------


def test_retry_uses_durable_timer_with_exponential_backoff() -> None:
    """Each retryable failure arms a retry timer at now + initial*backoff^(n-1); firing schedules n+1."""
    r = Run(example(), ORDER)
    for attempt, delay in [(1, 1), (2, 2), (3, 4), (4, 8)]:
        r.claim()
        events = r.fail("Busy", "try later")
        assert types(events) == ["ActivityFailed", "TimerScheduled"]
        failed, timer = events
        assert failed.data.will_retry is True
        assert failed.data.attempt == attempt
        assert failed.data.error == {
            "code": "Busy",
            "message": "try later",
            "step": "reserve",
            "attempt": attempt,
        }
        assert timer.data.kind == "retry"
        assert timer.data.key == "retry:reserve"
        assert timer.data.attempt == attempt + 1
        assert timer.data.fire_at == iso(r.now + timedelta(seconds=delay))
        assert r.s.status == "waiting"
        assert r.s.steps["reserve"].status == "retrying"
        assert r.s.active is None
        r.advance(delay)
        events = r.fire()
        assert types(events) == ["TimerFired", "ActivityScheduled"]
        assert events[1].data.attempt == attempt + 1
        assert events[1].data.task_id == f"r1/reserve/a{attempt + 1}-{events[1].seq}"
        assert events[1].data.idempotency_key == "reserve-42"  # stable across retries
    r.run_activity({"ok": True})
    assert r.s.steps["reserve"].attempts == 5
    assert r.s.steps["reserve"].status == "succeeded"
    assert r.s.steps["reserve"].error is None


def test_retry_backoff_is_capped_at_max_interval() -> None:
    """The delay grows by backoff (2s, 6s) and is then capped at max_interval (10s, not 18s)."""
    r = saga_to_ship()
    delays = []
    for _ in range(2):
        r.claim()
        timer = r.fail()[-1]
        delays.append(timedelta(seconds=(_parse(timer.data.fire_at) - r.now).total_seconds()))
        r.fire()
    assert delays == [timedelta(seconds=2), timedelta(seconds=6)]
    from lockstep.core.definition import ActivityStep

    ship = SAGA.step("ship")
    assert isinstance(ship, ActivityStep)
    assert ship.retry.delay(3) == timedelta(seconds=10)
    assert ship.retry.delay(10) == timedelta(seconds=10)


def _parse(text: str) -> Any:
    from lockstep.core.timeutil import parse_iso

    return parse_iso(text)


def test_retries_exhausted_fails_the_step_and_compensates() -> None:
    """After max_attempts the failure is final: will_retry false, compensation of done steps, RunFailed."""
    r = saga_to_ship()
    for _ in range(2):
        r.claim()
        r.fail("Down", "503")
        r.fire()
    r.claim()
    events = r.fail("Down", "503")
    assert types(events) == ["ActivityFailed", "CompensationStarted", "CompensationScheduled"]
    assert events[0].data.will_retry is False
    assert events[1].data.steps == ["charge", "reserve"]
    assert r.s.steps["ship"].status == "failed"
    assert r.s.steps["ship"].attempts == 3
    assert r.s.status == "compensating"


def test_non_retryable_failure_compensates_in_reverse_order_then_fails() -> None:
    """A non_retryable code fails at once; completed steps compensate last-first; the run ends failed."""
    r = saga_to_ship()
    r.claim()
    events = r.fail("NoAddress", "no address on file")
    assert types(events) == ["ActivityFailed", "CompensationStarted", "CompensationScheduled"]
    failed, started, comp = events
    assert failed.data.will_retry is False
    assert started.data_json() == {
        "cause": "failed",
        "error": {"code": "NoAddress", "message": "no address on file", "step": "ship", "attempt": 1},
        "steps": ["charge", "reserve"],
    }
    assert comp.data.step == "charge"
    assert comp.data.activity == "payments.refund"
    assert comp.data.input == {"amount": 1250}
    assert comp.data.idempotency_key == "charge-42:compensate"
    assert comp.data.task_id == f"r1/charge/c1-{comp.seq}"
    assert comp.data.timeout_ms == 60_000
    assert r.s.status == "compensating"
    assert r.s.compensating == ("charge", "reserve")
    events = r.run_activity({"refund": "F1"})
    assert types(events) == ["ActivityStarted", "ActivitySucceeded", "CompensationScheduled"]
    assert events[1].data.compensation is True
    assert events[2].data.step == "reserve"
    assert events[2].data.input == {"sku": "SKU-1"}
    assert events[2].data.idempotency_key == "t1:r1:reserve:compensate"
    assert r.s.steps["charge"].compensation == {"status": "compensated", "attempts": 1, "error": None}
    assert r.s.steps["charge"].output == {"amount": 1250}  # the action's output is kept
    events = r.run_activity(None)
    assert types(events) == ["ActivityStarted", "ActivitySucceeded", "RunFailed"]
    assert r.s.status == "failed"
    assert r.s.error is not None
    assert r.s.error["code"] == "NoAddress"
    assert r.s.compensating is None
    assert r.s.steps["reserve"].compensation is not None
    assert r.s.steps["reserve"].compensation["status"] == "compensated"
    assert r.s.steps["notify"].compensation is None  # no compensation defined: nothing to undo


def test_non_retryable_without_completed_steps_fails_directly() -> None:
    """OutOfStock on the first step fails the run with no compensation."""
    r = Run(example(), ORDER)
    r.claim()
    events = r.fail("OutOfStock", "none left")
    assert types(events) == ["ActivityFailed", "RunFailed"]
    assert r.s.status == "failed"
    assert r.s.error == {"code": "OutOfStock", "message": "none left", "step": "reserve", "attempt": 1}


def test_failure_marked_not_retryable_is_final() -> None:
    """ReportFailure(retryable=False) is final even with attempts left."""
    r = Run(example(), ORDER)
    r.claim()
    assert types(r.fail("Invalid", "bad sku", retryable=False)) == ["ActivityFailed", "RunFailed"]


def test_compensation_retries_then_needs_attention_when_exhausted() -> None:
    """A failing compensation retries on a timer; exhausted, the run needs attention (not failed)."""
    r = saga_to_ship()
    r.claim()
    r.fail("NoAddress", "x")
    r.claim()
    events = r.fail("BankDown", "503")
    assert types(events) == ["ActivityFailed", "TimerScheduled"]
    assert events[1].data.key == "retry:charge:compensation"
    assert events[1].data.fire_at == iso(r.now + timedelta(seconds=5))
    assert r.s.steps["charge"].compensation == {
        "status": "retrying",
        "attempts": 1,
        "error": {"code": "BankDown", "message": "503", "step": "charge", "attempt": 1},
    }
    events = r.fire()
    assert types(events) == ["TimerFired", "CompensationScheduled"]
    assert events[1].data.attempt == 2
    assert events[1].data.task_id == f"r1/charge/c2-{events[1].seq}"
    r.claim()
    events = r.fail("BankDown", "503")
    assert types(events) == ["ActivityFailed", "NeedsAttention"]
    assert events[1].data.code == "compensation_failed"
    assert r.s.status == "needs_attention"
    assert r.s.attention is not None
    assert r.s.attention["code"] == "compensation_failed"


def test_compensation_input_error_needs_attention() -> None:
    """A compensation whose input cannot be built hands the run to a human."""
    r = Run(SAGA, ORDER)
    r.run_activity(None)
    r.run_activity({"no_amount": True})  # the refund input reads steps.charge.output.amount
    r.run_activity(None)
    r.claim()
    events = r.fail("NoAddress", "x")
    assert types(events) == ["ActivityFailed", "CompensationStarted", "NeedsAttention"]
    assert events[-1].data.code == "compensation_input_error"
    assert r.s.status == "needs_attention"


# --- leases and at-most-once ------------------------------------------------------------------------


def test_lease_expiry_times_out_and_retries_idempotent_step() -> None:
    """ExpireLease on an idempotent step gives ActivityTimedOut and a retry timer."""
    r = Run(example(), ORDER)
    r.claim()
    events = r.expire("worker vanished")
    assert types(events) == ["ActivityTimedOut", "TimerScheduled"]
    assert events[0].data.error["code"] == "Timeout"
    assert events[0].data.reason == "worker vanished"
    assert events[0].data.will_retry is True
    assert events[0].data.outcome_unknown is False
    assert r.s.status == "waiting"


def test_lease_expiry_on_at_most_once_step_needs_attention() -> None:
    """ExpireLease on an at_most_once step is outcome_unknown: no retry, no failure, a human decides."""
    r = Run(AT_MOST_ONCE, {})
    r.run_activity(None)
    r.claim()
    events = r.expire("deadline passed")
    assert types(events) == ["ActivityTimedOut", "NeedsAttention"]
    assert events[0].data.will_retry is False
    assert events[0].data.outcome_unknown is True
    assert events[1].data.code == "outcome_unknown"
    assert "bank.transfer" in events[1].data.reason
    s = r.s
    assert s.status == "needs_attention"
    assert s.steps["pay"].status == "unknown"
    assert s.compensating is None  # nothing is undone blindly
    assert s.active is None
    assert not s.timers


def test_unexpected_failure_on_at_most_once_step_needs_attention() -> None:
    """ReportFailure(unexpected=True) on an at_most_once step is outcome_unknown, even if retryable."""
    r = Run(AT_MOST_ONCE, {})
    r.run_activity(None)
    r.claim()
    events = r.fail("ConnectionReset", "socket closed", unexpected=True)
    assert types(events) == ["ActivityFailed", "NeedsAttention"]
    assert events[0].data.outcome_unknown is True
    assert r.s.status == "needs_attention"


def test_declared_failure_on_at_most_once_step_retries() -> None:
    """An ActivityError (unexpected=False) on an at_most_once step is a known outcome and retries."""
    r = Run(AT_MOST_ONCE, {})
    r.run_activity(None)
    r.claim()
    assert types(r.fail("Declined", "try later")) == ["ActivityFailed", "TimerScheduled"]


def test_unexpected_failure_on_idempotent_step_retries() -> None:
    """unexpected=True only matters for at_most_once; an idempotent step simply retries."""
    r = Run(example(), ORDER)
    r.claim()
    assert types(r.fail("KeyError", "oops", unexpected=True)) == ["ActivityFailed", "TimerScheduled"]


def test_cancel_after_needs_attention_compensates() -> None:
    """A run that needs attention can be cancelled: attention clears and completed steps compensate."""
    r = Run(AT_MOST_ONCE, {})
    r.run_activity(None)
    r.claim()
    r.expire()
    events = r.cancel()
    assert types(events) == ["CancelRequested", "CompensationStarted", "CompensationScheduled"]
    assert r.s.attention is None
    r.run_activity(None)
    assert r.s.status == "cancelled"


# --- stale, superseded and late results ------------------------------------------------------------


def test_stale_fencing_token_is_ignored() -> None:
    """A result with an old fencing token records ResultIgnored and changes nothing else."""
    r = Run(example(), ORDER)
    r.claim()
    a = r.s.active
    assert a is not None
    assert a.fencing is not None
    assert_only_ignored(r, ReportSuccess(a.task_id, a.attempt, a.fencing - 1, {"x": 1}))
    ignored = r.events[-1]
    assert "stale fencing token" in ignored.data.reason
    assert ignored.data.result == {"outcome": "succeeded", "output": {"x": 1}}
    assert ignored.data.step == "reserve"


def test_wrong_attempt_number_is_ignored() -> None:
    """A result naming the current task but another attempt number is ignored."""
    r = Run(example(), ORDER)
    r.claim()
    a = r.s.active
    assert a is not None
    assert a.fencing is not None
    assert_only_ignored(r, ReportFailure(a.task_id, a.attempt + 1, a.fencing, "Boom", "x"))
    assert r.events[-1].data.result == {"outcome": "failed", "code": "Boom", "message": "x"}


def test_result_before_claim_is_ignored() -> None:
    """A result for a queued attempt that no worker has leased is ignored."""
    r = Run(example(), ORDER)
    a = r.s.active
    assert a is not None
    assert_only_ignored(r, ReportSuccess(a.task_id, a.attempt, 2, None))
    assert "not started" in r.events[-1].data.reason


def test_superseded_attempt_result_is_ignored() -> None:
    """After a lease expiry and a retry, the late result of attempt 1 is ignored."""
    r = Run(example(), ORDER)
    r.claim()
    old = r.s.active
    assert old is not None
    assert old.fencing is not None
    r.expire()
    r.fire()
    r.claim()
    assert_only_ignored(r, ReportSuccess(old.task_id, old.attempt, old.fencing, {"late": True}))
    assert r.events[-1].data.step == "reserve"
    assert "not the run's current attempt" in r.events[-1].data.reason
    r.succeed({"fresh": True})
    assert r.s.steps["reserve"].output == {"fresh": True}


def test_duplicate_result_is_ignored() -> None:
    """The same success delivered twice advances the run once; the second is ResultIgnored."""
    r = Run(example(), ORDER)
    r.claim()
    a = r.s.active
    assert a is not None
    assert a.fencing is not None
    report = ReportSuccess(a.task_id, a.attempt, a.fencing, {"reservation": "R1"})
    assert types(r.send(report))[0] == "ActivitySucceeded"
    assert_only_ignored(r, report)


def test_result_after_terminal_is_ignored() -> None:
    """A result arriving after the run completed is evidence only: the run stays completed."""
    r = Run(example(), ORDER)
    r.run_activity(None)
    r.claim()
    a = r.s.active
    assert a is not None
    assert a.fencing is not None
    report = ReportFailure(a.task_id, a.attempt, a.fencing, "Boom", "late")
    r.succeed({"tracking": "T"})
    assert r.s.status == "completed"
    assert_only_ignored(r, report)
    assert r.s.finished_at == iso(T0)
    assert "already completed" in r.events[-1].data.reason


@pytest.mark.parametrize("bogus", ["bogus", "r1/reserve", "other-run/reserve/a1-2", "r1/a/b/c1-2"])
def test_result_for_malformed_task_id_is_not_a_crash(bogus: str) -> None:
    """A report naming a task id that was never issued is ignored (step unknown), never an IndexError."""
    r = Run(example(), ORDER)
    assert_only_ignored(r, ReportSuccess(bogus, 1, 1, None))
    assert r.events[-1].data.task_id == bogus
    assert r.events[-1].data.step == "?"


def test_claims_of_unknown_or_leased_tasks_are_rejected() -> None:
    """ClaimTask for another task is Rejected(stale_task); a second claim is Rejected(already_started)."""
    r = Run(example(), ORDER)
    with pytest.raises(Rejected) as info:
        r.decide(ClaimTask("r1/reserve/a9", "w", iso(T0)))
    assert info.value.code == "stale_task"
    r.claim()
    a = r.s.active
    assert a is not None
    with pytest.raises(Rejected) as info:
        r.decide(ClaimTask(a.task_id, "w2", iso(T0)))
    assert info.value.code == "already_started"


def test_stale_lease_expiry_is_rejected() -> None:
    """ExpireLease for an unclaimed, superseded or wrongly-fenced attempt is Rejected(stale_lease)."""
    r = Run(example(), ORDER)
    a = r.s.active
    assert a is not None
    with pytest.raises(Rejected) as info:
        r.decide(ExpireLease(a.task_id, 1, 1, "x"))
    assert info.value.code == "stale_lease"
    r.claim()
    a = r.s.active
    assert a is not None
    assert a.fencing is not None
    with pytest.raises(Rejected):
        r.decide(ExpireLease(a.task_id, 1, a.fencing + 1, "x"))


# --- timers -----------------------------------------------------------------------------------------


def test_duplicate_and_bogus_timer_fires_are_rejected() -> None:
    """A timer fires once: a repeat, a wrong generation or an unknown key is Rejected(stale_timer)."""
    r = Run(example(), {**ORDER, "qty": 20})
    r.run_activity(None)
    t = r.s.timers["wait:cooling-off"]
    with pytest.raises(Rejected) as info:
        r.decide(FireTimer(t.key, t.generation + 1))
    assert info.value.code == "stale_timer"
    with pytest.raises(Rejected):
        r.decide(FireTimer("wait:nope", t.generation))
    r.advance(2)
    r.send(FireTimer(t.key, t.generation))
    with pytest.raises(Rejected) as info:
        r.decide(FireTimer(t.key, t.generation))
    assert info.value.code == "stale_timer"


def test_timer_fired_before_it_is_due_is_rejected_not_due() -> None:
    """A FireTimer before fire_at is Rejected(not_due) and leaves the timer armed; at fire_at it fires."""
    r = Run(example(), {**ORDER, "qty": 20})
    r.run_activity(None)
    t = r.s.timers["wait:cooling-off"]
    r.advance(1.999)
    with pytest.raises(Rejected) as info:
        r.decide(FireTimer(t.key, t.generation))
    assert info.value.code == "not_due"
    assert r.s.timers == {t.key: t}
    r.advance(0.001)
    assert types(r.send(FireTimer(t.key, t.generation))) == ["TimerFired", "ActivityScheduled"]


def test_retry_timer_fired_twice_schedules_one_attempt() -> None:
    """A duplicated retry timer cannot schedule a second attempt."""
    r = Run(example(), ORDER)
    r.claim()
    r.fail()
    t = r.s.timers["retry:reserve"]
    r.fire()
    with pytest.raises(Rejected):
        r.decide(FireTimer(t.key, t.generation))
    assert sum(e.type == "ActivityScheduled" for e in r.events) == 2


WAIT_UNTIL = load(
    """
name: wait-until
steps:
  - id: hold
    wait: {until: "${input.deadline}"}
  - id: go
    activity: svc.go
    timeout: 5s
"""
)


def test_wait_until_expression_sets_fire_at() -> None:
    """wait.until arms the timer at the rendered ISO time."""
    deadline = iso(T0 + timedelta(days=3, hours=2))
    r = Run(WAIT_UNTIL, {"deadline": deadline})
    assert types(r.events) == ["RunStarted", "TimerScheduled"]
    assert r.s.timers["wait:hold"].fire_at == deadline
    assert r.s.status == "waiting"


def test_wait_until_in_the_past_fires_now() -> None:
    """A deadline already passed arms the timer at now, never in the past."""
    r = Run(WAIT_UNTIL, {"deadline": "2000-01-01T00:00:00Z"})
    assert r.s.timers["wait:hold"].fire_at == iso(T0)


@pytest.mark.parametrize("value", [{"deadline": "next tuesday"}, {}, {"deadline": 5}])
def test_wait_until_bad_value_fails_with_expression_error(value: Any) -> None:
    """A wait.until that is missing or not an ISO time fails the step with ExpressionError."""
    r = Run(WAIT_UNTIL, value)
    assert types(r.events) == ["RunStarted", "StepFailed", "RunFailed"]
    assert r.s.error is not None
    assert r.s.error["code"] == "ExpressionError"
    assert "ISO-8601" in r.s.error["message"]


# --- choice and expression errors -------------------------------------------------------------------

NO_ELSE = load(
    """
name: no-else
steps:
  - id: route
    choice:
      - {if: "input.qty > 10", next: big}
      - {if: "input.qty < 0", next: big}
  - id: big
    succeed: true
"""
)


def test_choice_without_else_and_no_match_fails() -> None:
    """No branch matched and no else: StepFailed(NoBranchMatched) then RunFailed."""
    r = Run(NO_ELSE, {"qty": 5})
    assert types(r.events) == ["RunStarted", "StepFailed", "RunFailed"]
    assert r.events[1].data.error["code"] == "NoBranchMatched"
    assert r.s.status == "failed"
    assert r.s.steps["route"].status == "failed"


def test_runtime_expression_error_fails_step() -> None:
    """A condition reading a missing field fails the choice step with ExpressionError."""
    r = Run(NO_ELSE, {})
    assert types(r.events) == ["RunStarted", "StepFailed", "RunFailed"]
    err = r.events[1].data.error
    assert err["code"] == "ExpressionError"
    assert err["step"] == "route"
    assert "qty" in err["message"]


def test_non_boolean_condition_fails_step() -> None:
    """A condition that yields a non-boolean fails with ExpressionError instead of guessing."""
    d = load("name: nb\nsteps:\n  - id: c\n    choice: [{if: 'input.qty', next: end}, {else: end}]\n")
    r = Run(d, {"qty": 1})
    assert r.s.error is not None
    assert r.s.error["code"] == "ExpressionError"
    assert "not true or false" in r.s.error["message"]


def test_activity_input_expression_error_fails_step_and_compensates() -> None:
    """An activity input that cannot be rendered fails its step; earlier steps are compensated."""
    d = load(
        """
name: input-error
steps:
  - id: a
    activity: svc.a
    timeout: 1s
    compensate: {activity: svc.undo}
  - id: b
    activity: svc.b
    timeout: 1s
    input: {v: "${steps.a.output.missing}"}
"""
    )
    r = Run(d, {})
    events = r.run_activity({"present": 1})
    assert types(events) == [
        "ActivityStarted",
        "ActivitySucceeded",
        "StepFailed",
        "CompensationStarted",
        "CompensationScheduled",
    ]
    assert events[2].data.error["code"] == "ExpressionError"
    assert r.s.steps["b"].status == "failed"


# --- cancellation -----------------------------------------------------------------------------------


def test_cancel_while_queued_withdraws_the_attempt() -> None:
    """Cancel before any worker leased the attempt: ActivityCancelled and the run ends cancelled."""
    r = Run(example(), ORDER)
    events = r.cancel("changed mind", actor="alice")
    assert types(events) == ["CancelRequested", "ActivityCancelled", "RunCancelled"]
    assert events[0].data_json() == {"reason": "changed mind", "actor": "alice"}
    assert events[2].data_json() == {"reason": "changed mind"}
    assert r.s.status == "cancelled"
    assert r.s.steps["reserve"].status == "cancelled"
    assert r.s.cancel == {"reason": "changed mind", "actor": "alice", "at": iso(T0)}
    assert r.s.active is None


def test_cancel_while_queued_compensates_completed_steps() -> None:
    """Cancel with completed steps and a queued attempt: withdraw it, then compensate the rest."""
    r = Run(SAGA, ORDER)
    r.run_activity(None)
    events = r.cancel()
    assert types(events) == [
        "CancelRequested",
        "ActivityCancelled",
        "CompensationStarted",
        "CompensationScheduled",
    ]
    assert events[2].data_json() == {"cause": "cancelled", "error": None, "steps": ["reserve"]}
    assert r.s.status == "compensating"
    assert r.s.steps["charge"].status == "cancelled"
    r.run_activity(None)
    assert r.s.status == "cancelled"
    assert types(r.events[-1:]) == ["RunCancelled"]


def test_cancel_while_running_waits_for_the_in_flight_result() -> None:
    """Cancel during a leased attempt records intent (cancelling); the result then compensates it too."""
    r = Run(SAGA, ORDER)
    r.run_activity(None)
    r.claim()
    events = r.cancel()
    assert types(events) == ["CancelRequested"]
    assert r.s.status == "cancelling"
    assert r.s.active is not None
    events = r.succeed({"amount": 99})
    assert types(events) == ["ActivitySucceeded", "CompensationStarted", "CompensationScheduled"]
    assert events[1].data.steps == ["charge", "reserve"]
    assert events[2].data.input == {"amount": 99}
    r.run_activity(None)
    events = r.run_activity(None)
    assert types(events)[-1] == "RunCancelled"
    assert r.s.status == "cancelled"
    assert r.s.steps["notify"].status == "pending"  # never started


def test_cancel_while_running_then_failure_does_not_retry() -> None:
    """A retryable failure after cancel is not retried: the run goes on to cancel."""
    r = Run(example(), ORDER)
    r.claim()
    r.cancel()
    events = r.fail("Busy", "later")
    assert types(events) == ["ActivityFailed", "RunCancelled"]
    assert events[0].data.will_retry is False
    assert r.s.status == "cancelled"


def test_cancel_while_running_then_lease_expiry_cancels() -> None:
    """A lease expiry after cancel ends the idempotent attempt and the run is cancelled."""
    r = Run(example(), ORDER)
    r.claim()
    r.cancel()
    assert types(r.expire()) == ["ActivityTimedOut", "RunCancelled"]


def test_cancel_while_waiting_on_timer_cancels_it() -> None:
    """Cancel during a wait cancels the timer, which can then no longer fire."""
    r = Run(example(), {**ORDER, "qty": 20})
    r.run_activity(None)
    t = r.s.timers["wait:cooling-off"]
    events = r.cancel()
    assert types(events) == [
        "CancelRequested",
        "TimerCancelled",
        "CompensationStarted",
        "CompensationScheduled",
    ]
    assert events[1].data.key == "wait:cooling-off"
    assert events[1].data.generation == t.generation
    assert r.s.steps["cooling-off"].status == "cancelled"
    assert not r.s.timers
    with pytest.raises(Rejected) as info:
        r.decide(FireTimer(t.key, t.generation))
    assert info.value.code == "stale_timer"
    r.run_activity(None)
    assert r.s.status == "cancelled"


def test_cancel_while_backing_off_cancels_retry_timer() -> None:
    """Cancel during a retry backoff cancels the retry timer and ends the step cancelled."""
    r = Run(example(), ORDER)
    r.claim()
    r.fail()
    events = r.cancel()
    assert types(events) == ["CancelRequested", "TimerCancelled", "RunCancelled"]
    assert r.s.steps["reserve"].status == "cancelled"
    assert r.s.steps["reserve"].error is not None  # the last error stays visible


def test_cancel_of_terminal_run_is_rejected() -> None:
    """Cancelling a finished run is Rejected(terminal)."""
    r = Run(example(), ORDER)
    r.cancel()
    with pytest.raises(Rejected) as info:
        r.decide(CancelRun("again"))
    assert info.value.code == "terminal"


def test_cancel_twice_appends_nothing() -> None:
    """A second cancel while cancelling is the same request: no events."""
    r = Run(example(), ORDER)
    r.claim()
    r.cancel()
    assert r.cancel("again") == []
    assert r.s.cancel is not None
    assert r.s.cancel["reason"] == "customer asked"


def test_cancel_while_compensating_after_failure_is_rejected() -> None:
    """A run compensating after a failure will end failed; cancel is Rejected(compensating)."""
    r = saga_to_ship()
    r.claim()
    r.fail("NoAddress", "x")
    with pytest.raises(Rejected) as info:
        r.decide(CancelRun("stop"))
    assert info.value.code == "compensating"


# --- determinism and effects --------------------------------------------------------------------------


def test_decide_is_deterministic() -> None:
    """The same state, command and time always give identical events."""
    r = saga_to_ship()
    r.claim()
    a = r.s.active
    assert a is not None
    assert a.fencing is not None
    cmd = ReportFailure(a.task_id, a.attempt, a.fencing, "NoAddress", "x")
    first = [e.to_json() for e in r.decide(cmd)]
    second = [e.to_json() for e in r.decide(cmd)]
    assert first == second


def test_decide_does_not_mutate_the_given_state() -> None:
    """decide returns events; the state passed in is left exactly as it was."""
    r = saga_to_ship()
    before = r.s.to_json()
    r.decide(CancelRun("x"))
    assert r.s.to_json() == before


def test_effects_of_a_history() -> None:
    """Scheduling creates a task, claiming leases it, results close it, timers are created and closed."""
    r = Run(example(), {**ORDER, "qty": 20})
    r.claim()
    r.fail()
    r.fire()
    r.claim()
    r.succeed(None)
    r.fire()
    r.cancel()
    effects = effects_of(r.events)
    kinds = [type(e).__name__ for e in effects]
    assert kinds == [
        "CreateTask",
        "LeaseTask",
        "CloseTask",
        "CreateTimer",
        "CloseTimer",
        "CreateTask",
        "LeaseTask",
        "CloseTask",
        "CreateTimer",
        "CloseTimer",
        "CreateTask",
        "CloseTask",
        "CreateTask",
    ]
    ids = {
        (e.data.step, e.type, e.data.attempt): e.data.task_id
        for e in r.events
        if e.type in ("ActivityScheduled", "CompensationScheduled")
    }
    first = effects[0]
    assert isinstance(first, CreateTask)
    assert first.task_id == ids["reserve", "ActivityScheduled", 1] == "r1/reserve/a1-2"
    assert first.kind == "action"
    assert isinstance(effects[1], LeaseTask)
    assert effects[1].worker == "w1"
    assert isinstance(effects[2], CloseTask)
    assert effects[2].status == "done"
    assert isinstance(effects[3], CreateTimer)
    assert effects[3].key == "retry:reserve"
    assert isinstance(effects[4], CloseTimer)
    assert effects[4].status == "fired"
    assert effects[-2] == CloseTask(ids["ship", "ActivityScheduled", 1], "cancelled")
    last = effects[-1]
    assert isinstance(last, CreateTask)
    assert last.kind == "compensation"
    assert last.task_id == ids["reserve", "CompensationScheduled", 1]


def test_cancelled_timer_effect() -> None:
    """A cancelled timer closes with status cancelled."""
    r = Run(WAIT_UNTIL, {"deadline": iso(T0 + timedelta(days=1))})
    t = r.s.timers["wait:hold"]
    effects = effects_of(r.cancel())
    assert CloseTimer(t.key, t.generation, "cancelled") in effects


def test_polling_loop_never_reuses_a_task_id() -> None:
    """Re-entering an activity step in a valid polling loop creates a task with a fresh task_id."""
    d = load(
        """
name: poll
steps:
  - id: check
    activity: svc.check
    timeout: 5s
  - id: route
    choice:
      - {if: "steps.check.output.done", next: end}
      - {else: pause}
  - id: pause
    wait: 1m
    next: check
"""
    )
    r = Run(d, {})
    r.run_activity({"done": False})
    r.fire()
    r.run_activity({"done": True})
    assert r.s.status == "completed"
    created = [e for e in effects_of(r.events) if isinstance(e, CreateTask)]
    assert [(e.step, e.attempt) for e in created] == [("check", 1), ("check", 1)]  # both passes: attempt 1
    ids = [e.task_id for e in created]
    assert len(ids) == len(set(ids)), ids


# --- explain ----------------------------------------------------------------------------------------


def _states_by_story() -> dict[str, RunState]:
    out: dict[str, RunState] = {}
    r = Run(example(), {**ORDER, "qty": 20})
    out["queued"] = r.s
    r.claim()
    out["running"] = r.s
    r.fail("Busy", "try later")
    out["retry backoff"] = r.s
    r.fire()
    r.run_activity(None)
    out["wait timer"] = r.s
    r.cancel()
    out["compensating after cancel"] = r.s
    r.run_activity(None)
    out["cancelled"] = r.s

    s = saga_to_ship()
    s.claim()
    s.cancel()
    out["cancelling"] = s.s
    s.succeed(None)
    s.claim()
    out["compensation running"] = s.s
    s.fail()
    out["compensation backoff"] = s.s

    f = saga_to_ship()
    f.claim()
    f.fail("NoAddress", "x")
    out["compensating after failure"] = f.s
    f.run_activity(None)
    f.run_activity(None)
    out["failed"] = f.s

    n = Run(AT_MOST_ONCE, {})
    n.run_activity(None)
    n.claim()
    n.expire()
    out["needs attention"] = n.s

    c = Run(example(), ORDER)
    c.run_activity(None)
    c.run_activity(None)
    out["completed"] = c.s
    return out


STATES = _states_by_story()


@pytest.mark.parametrize("story", sorted(STATES))
def test_explain_every_state(story: str) -> None:
    """Non-terminal runs explain why they wait and what happens next; finished runs explain nothing."""
    s = STATES[story]
    info = explain(s, T0 + timedelta(seconds=1))
    if s.terminal:
        assert set(info.values()) == {None}
        assert {"wait_reason", "waiting_since", "waiting_until", "next_action"} <= set(info)
        return
    assert isinstance(info["wait_reason"], str)
    assert info["wait_reason"].strip()
    assert isinstance(info["next_action"], str)
    assert info["next_action"].strip()
    assert info["waiting_since"]
    assert "moving to the next step" not in info["wait_reason"]  # no state is left without a reason


def test_explain_covers_every_status() -> None:
    """The stories above cover every run status, so the explain test sees each one."""
    assert {s.status for s in STATES.values()} == {
        "running",
        "waiting",
        "cancelling",
        "compensating",
        "needs_attention",
        "completed",
        "failed",
        "cancelled",
    }


@pytest.mark.parametrize("story", sorted(k for k, v in STATES.items() if v.status == "waiting"))
def test_waiting_never_reads_as_failed(story: str) -> None:
    """A waiting run's explanation never says the run or step failed (waiting is not failed)."""
    s = STATES[story]
    reason = explain(s, T0)["wait_reason"]
    assert s.status == "waiting"
    assert not re.search(r"\brun (has )?failed\b", reason)
    for sid in s.steps:
        assert f"step {sid} failed" not in reason
        assert f"step {sid} has failed" not in reason
    if all(t.kind == "wait" for t in s.timers.values()):
        assert "fail" not in reason.lower()


def test_explain_specific_texts() -> None:
    """Explanations name the activity, attempt, worker, timer and deadline."""
    assert "inventory.reserve" in explain(STATES["queued"], T0)["wait_reason"]
    assert "queued" in explain(STATES["queued"], T0)["wait_reason"]
    running = explain(STATES["running"], T0)
    assert "running on w1" in running["wait_reason"]
    active = STATES["running"].active
    assert active is not None
    assert running["waiting_until"] == active.deadline
    backoff = explain(STATES["retry backoff"], T0)
    assert "backing off" in backoff["wait_reason"]
    assert "attempt 2" in backoff["next_action"]
    wait = explain(STATES["wait timer"], T0)
    assert "durable timer" in wait["wait_reason"]
    assert wait["waiting_until"] == STATES["wait timer"].timers["wait:cooling-off"].fire_at
    assert "cancellation requested" in explain(STATES["cancelling"], T0)["wait_reason"]
    assert (
        "compensating after a failed step" in explain(STATES["compensating after failure"], T0)["wait_reason"]
    )
    assert "operator" in explain(STATES["needs attention"], T0)["next_action"]
    overdue = explain(STATES["running"], T0 + timedelta(hours=1))
    assert "(overdue by " in overdue["next_action"]
    assert "in now" not in overdue["next_action"]  # not "(in now (overdue by 1s))"
