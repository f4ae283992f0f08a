"""The application service over a real store (SQLite and PostgreSQL), driven by a fake clock (no workers,
no sleeps)."""

from __future__ import annotations

import copy
import json
import sqlite3
import threading
from datetime import timedelta
from typing import Any

import pytest

from lockstep.app.service import Service
from lockstep.core.definition import Limits
from lockstep.engine import load_document
from lockstep.errors import Conflict, InvalidInput, NotFound, Refused, Unavailable
from lockstep.store import open_store

from .conftest import NAP, ORDER, T0

TTL = timedelta(seconds=5)


def types(svc: Service, run_id: str, tenant: str = "acme") -> list[str]:
    return [e.type for e in svc.events(tenant, run_id)]


def start_order(svc: Service, order: int = 1, tenant: str = "acme", **kw: Any) -> str:
    return svc.start(tenant, "order", input={"order": order}, **kw).run_id


@pytest.fixture
def published(svc: Service) -> dict[str, Any]:
    return svc.publish("acme", ORDER)


def finish_reserve(svc: Service) -> None:
    """Claim and complete the reserve step of the one order run: the run then waits on `pause`."""
    (lease,) = svc.claim("w1", ["inventory.reserve"], limit=10, lease_ttl=TTL)
    assert svc.complete(lease.task_id, lease.attempt, lease.fencing, {"reserved": True}) == "accepted"


# --- publishing ----------------------------------------------------------------------------------


def test_show_gives_each_step_the_idempotency_key_it_was_sent_with(svc: Service, published):
    """`show` (CLI, API, UI) names the key of a step's last attempt, as the activity got it: what an
    operator looks the effect up with downstream before resolving an unknown outcome."""
    run = start_order(svc)
    (lease,) = svc.claim("w1", ["inventory.reserve"], limit=10, lease_ttl=TTL)
    shown = svc.show("acme", run).steps
    assert shown["reserve"].idempotency_key == lease.idempotency_key
    assert lease.idempotency_key  # the default key, tenant:run:step
    assert all(st.idempotency_key is None for sid, st in shown.items() if st.status == "pending")


def test_publish_returns_the_same_version_for_the_same_content(svc: Service):
    """Identical content (any key order, any YAML layout) is one version; changed content is the next."""
    first = svc.publish("acme", ORDER)
    assert (first.version, first.created) == (1, True)
    assert first.digest.startswith("sha256:")

    again = svc.publish("acme", copy.deepcopy(ORDER))
    assert (again.version, again.created, again.digest) == (1, False, first.digest)

    reordered = dict(reversed(list(copy.deepcopy(ORDER).items())))
    reordered["steps"] = [dict(reversed(list(s.items()))) for s in reordered["steps"]]
    assert svc.publish("acme", reordered).version == 1

    yaml_text = """
name: order
steps:
- {id: reserve, activity: inventory.reserve, timeout: 30s,
   input: {order: "${input.order}"},
   compensate: {input: {order: "${input.order}"}, activity: inventory.release},
   retry: {initial_interval: 1s, max_attempts: 3}}
- id: pause
  wait: 10s
- id: charge
  timeout: 30s
  activity: payment.charge
  input:
    order: ${input.order}
input_schema:
  properties: {order: {type: integer}}
  required: [order]
  type: object
"""
    assert svc.publish("acme", load_document(yaml_text)).version == 1

    changed = copy.deepcopy(ORDER)
    changed["steps"][1]["wait"] = "20s"
    second = svc.publish("acme", changed)
    assert (second.version, second.created) == (2, True)
    assert second.digest != first.digest
    assert svc.publish("acme", ORDER).version == 1
    assert [(d.name, d.version) for d in svc.definitions("acme")] == [("order", 1), ("order", 2)]


def test_versions_are_counted_per_tenant(svc: Service):
    """Each tenant has its own version sequence, even for identical documents."""
    svc.publish("acme", ORDER)
    svc.publish("acme", {**ORDER, "description": "v2"})
    assert svc.publish("globex", ORDER).version == 1
    (row,) = svc.definitions("globex")
    assert (row.name, row.version, row.digest) == ("order", 1, svc.definitions("acme")[0].digest)


def test_invalid_definition_is_refused_and_not_stored(svc: Service):
    """A definition with static errors raises InvalidInput naming the path, and stores nothing."""
    bad = copy.deepcopy(ORDER)
    del bad["steps"][0]["timeout"]
    with pytest.raises(InvalidInput, match=r"timeout"):
        svc.publish("acme", bad)
    assert svc.definitions("acme") == []


def test_a_run_keeps_its_pinned_version_after_a_new_one_is_published(svc: Service, clock, published):
    """Publishing v2 changes neither the version nor the behaviour of a run started on v1."""
    old_run = start_order(svc)
    v2 = copy.deepcopy(ORDER)
    v2["steps"][0]["activity"] = "inventory.reserve-v2"
    assert svc.publish("acme", v2).version == 2

    shown = svc.show("acme", old_run)
    assert shown.definition.plain() == {"name": "order", "version": 1, "digest": published.digest}
    (lease,) = svc.claim("w1", ["inventory.reserve", "inventory.reserve-v2"], limit=10, lease_ttl=TTL)
    assert (lease.run_id, lease.activity, lease.version) == (old_run, "inventory.reserve", 1)
    svc.complete(lease.task_id, lease.attempt, lease.fencing, {})
    clock.advance(seconds=10)
    assert svc.fire_due_timers() == 1
    assert svc.show("acme", old_run).definition.version == 1

    new_run = start_order(svc, 2)
    assert svc.show("acme", new_run).definition.version == 2
    (lease2,) = svc.claim("w1", ["inventory.reserve", "inventory.reserve-v2"], limit=10, lease_ttl=TTL)
    assert (lease2.run_id, lease2.activity, lease2.version) == (new_run, "inventory.reserve-v2", 2)
    pinned = start_order(svc, 3, version=1)
    assert svc.show("acme", pinned).definition.version == 1


# --- starting runs -------------------------------------------------------------------------------


def test_start_with_the_same_key_returns_the_same_run(svc: Service, raw, published):
    """A repeated start with the same key and request returns the first run and creates nothing."""
    first = svc.start("acme", "order", input={"order": 1}, key="order-1")
    events = raw.count("events")
    again = svc.start("acme", "order", input={"order": 1}, key="order-1")
    assert first.created is True
    assert again.plain() == {"run_id": first.run_id, "created": False}
    assert raw.count("runs") == 1
    assert raw.count("events") == events


def test_same_key_with_a_different_input_is_a_conflict(svc: Service, raw, published):
    """Reusing a start key for a different request raises Conflict(key_reused) and writes nothing."""
    first = svc.start("acme", "order", input={"order": 1}, key="order-1").run_id
    with pytest.raises(Conflict) as info:
        svc.start("acme", "order", input={"order": 2}, key="order-1")
    assert info.value.code == "key_reused"
    assert first in str(info.value)
    assert raw.count("runs") == 1


def test_the_same_key_in_another_tenant_is_a_different_run(svc: Service, published):
    """Start keys are scoped by tenant."""
    svc.publish("globex", ORDER)
    a = svc.start("acme", "order", input={"order": 1}, key="k")
    b = svc.start("globex", "order", input={"order": 1}, key="k")
    assert b.created is True
    assert a.run_id != b.run_id


def test_input_failing_the_schema_is_refused_and_writes_nothing(svc: Service, raw, published):
    """Input that fails input_schema raises InvalidInput naming the problem; no run, event or task."""
    with pytest.raises(InvalidInput, match="order") as info:
        svc.start("acme", "order", input={"order": "not a number"}, key="k")
    assert info.value.code == "invalid_input"
    with pytest.raises(InvalidInput, match="required"):
        svc.start("acme", "order", input={})
    assert (raw.count("runs"), raw.count("events"), raw.count("tasks"), raw.count("timers")) == (0, 0, 0, 0)
    assert svc.runs("acme") == []
    # the key was not consumed by the refused request
    assert svc.start("acme", "order", input={"order": 1}, key="k").created is True


def test_unknown_definition_is_not_found_with_a_hint(svc: Service, published):
    """Starting an unknown definition says what is published (only in this tenant) and how to publish."""
    with pytest.raises(NotFound, match=r"published: order") as info:
        svc.start("acme", "ordr")
    assert "lockstep publish" in str(info.value)
    with pytest.raises(NotFound, match=r"none published"):
        svc.start("globex", "order")
    with pytest.raises(NotFound, match=r"order version 7"):
        svc.start("acme", "order", input={"order": 1}, version=7)


# --- tenant isolation ----------------------------------------------------------------------------


def test_tenants_cannot_see_or_touch_each_others_runs(svc: Service, published):
    """show, events, cancel and verify of another tenant's run are NotFound; runs() lists only one's own."""
    run = start_order(svc)
    seq = svc.show("acme", run).seq
    with pytest.raises(NotFound):
        svc.show("globex", run)
    with pytest.raises(NotFound):
        svc.events("globex", run)
    with pytest.raises(NotFound):
        svc.cancel("globex", run, "not mine")
    with pytest.raises(NotFound):
        svc.verify(run, tenant="globex")
    assert svc.runs("globex") == []
    assert [r.run_id for r in svc.runs("acme")] == [run]
    assert svc.show("acme", run).seq == seq
    assert svc.show(None, run).tenant == "acme"  # operators (no tenant) see every run


def test_tenant_scoped_workers_only_see_their_tenant(svc: Service, published):
    """A worker scoped to tenant B can neither claim nor report tenant A's tasks."""
    run = start_order(svc)
    assert svc.claim("wb", ["inventory.reserve"], limit=10, lease_ttl=TTL, tenant="globex") == []
    (lease,) = svc.claim("wa", ["inventory.reserve"], limit=10, lease_ttl=TTL, tenant="acme")
    seq = svc.show("acme", run).seq
    with pytest.raises(NotFound):
        svc.complete(lease.task_id, lease.attempt, lease.fencing, {}, tenant="globex")
    assert svc.show("acme", run).seq == seq
    assert svc.complete(lease.task_id, lease.attempt, lease.fencing, {}, tenant="acme") == "accepted"


def test_runs_filters_by_status_and_pages(svc: Service, clock, published):
    """runs() filters by status and definition and pages with `after`."""
    svc.publish("acme", NAP)
    ids = []
    for i in range(3):
        clock.advance(milliseconds=1)
        ids.append(start_order(svc, i))
    clock.advance(milliseconds=1)
    nap = svc.start("acme", "nap").run_id
    assert [r.run_id for r in svc.runs("acme")] == [*ids, nap]
    assert [r.run_id for r in svc.runs("acme", status="waiting")] == [nap]
    assert [r.run_id for r in svc.runs("acme", definition="order", after=ids[0], limit=1)] == [ids[1]]


# --- workers: claim, report, fencing -------------------------------------------------------------


def test_claim_then_complete_moves_the_run_on(svc: Service, raw, published):
    """A claimed task carries run, step, attempt, key and fencing; completing it with them is accepted."""
    run = start_order(svc, 42)
    (lease,) = svc.claim("w1", ["inventory.reserve"], limit=10, lease_ttl=TTL)
    assert (lease.run_id, lease.step, lease.attempt, lease.kind) == (run, "reserve", 1, "action")
    assert (lease.tenant, lease.definition, lease.version) == ("acme", "order", 1)
    assert lease.input == {"order": 42}
    assert lease.idempotency_key == f"acme:{run}:reserve"
    assert lease.deadline == T0 + timedelta(seconds=30)
    assert svc.claim("w2", ["inventory.reserve"], limit=10, lease_ttl=TTL) == []
    assert raw.fetch("SELECT status, fencing, lease_owner FROM tasks") == [("leased", lease.fencing, "w1")]

    assert svc.complete(lease.task_id, lease.attempt, lease.fencing, {"reserved": 42}) == "accepted"
    shown = svc.show("acme", run)
    assert shown.status == "waiting"
    assert shown.current_step == "pause"
    assert shown.steps["reserve"].status == "succeeded"
    assert shown.steps["reserve"].output == {"reserved": 42}
    assert types(svc, run)[:4] == ["RunStarted", "ActivityScheduled", "ActivityStarted", "ActivitySucceeded"]
    assert raw.fetch("SELECT status FROM tasks") == [("done",)]


def test_claim_with_nothing_to_serve_returns_nothing(svc: Service, published):
    """claim with no activity types or a zero limit leases nothing."""
    start_order(svc)
    assert svc.claim("w1", [], limit=10, lease_ttl=TTL) == []
    assert svc.claim("w1", ["inventory.reserve"], limit=0, lease_ttl=TTL) == []
    assert svc.claim("w1", ["payment.charge"], limit=10, lease_ttl=TTL) == []


def test_a_stale_fencing_token_is_ignored_and_recorded(svc: Service, published):
    """A report with a stale fencing token returns "ignored", appends ResultIgnored, changes nothing else."""
    run = start_order(svc)
    (lease,) = svc.claim("w1", ["inventory.reserve"], limit=10, lease_ttl=TTL)
    before = svc.show("acme", run)
    assert svc.complete(lease.task_id, lease.attempt, lease.fencing - 1, {"late": True}) == "ignored"
    after = svc.show("acme", run)
    last = svc.events("acme", run)[-1]
    assert last.type == "ResultIgnored"
    assert "stale fencing token" in last.data["reason"]
    assert last.data["result"] == {"outcome": "succeeded", "output": {"late": True}}
    assert after.seq == before.seq + 1
    assert after.ignored_results == 1
    assert (after.status, after.steps, after.current_step) == (
        before.status,
        before.steps,
        before.current_step,
    )
    assert svc.complete(lease.task_id, lease.attempt, lease.fencing, {"ok": True}) == "accepted"


def test_a_duplicate_report_is_ignored(svc: Service, published):
    """Reporting the same attempt twice: the second is recorded as ResultIgnored and does not advance."""
    run = start_order(svc)
    (lease,) = svc.claim("w1", ["inventory.reserve"], limit=10, lease_ttl=TTL)
    assert svc.complete(lease.task_id, lease.attempt, lease.fencing, {}) == "accepted"
    status = svc.show("acme", run).status
    assert svc.fail(lease.task_id, lease.attempt, lease.fencing, "Boom", "late failure") == "ignored"
    assert svc.complete(lease.task_id, lease.attempt, lease.fencing, {}) == "ignored"
    assert svc.show("acme", run).status == status
    assert types(svc, run)[-2:] == ["ResultIgnored", "ResultIgnored"]


def test_report_for_an_unknown_task_is_not_found(svc: Service):
    """Completing a task id that does not exist raises NotFound."""
    with pytest.raises(NotFound):
        svc.complete("nope/none/a1", 1, 1, {})


def test_a_retryable_failure_retries_on_a_durable_timer(svc: Service, clock, published):
    """A failed attempt schedules a retry timer; when it fires, attempt 2 is scheduled and claimable."""
    run = start_order(svc)
    (lease,) = svc.claim("w1", ["inventory.reserve"], limit=10, lease_ttl=TTL)
    assert svc.fail(lease.task_id, 1, lease.fencing, "Busy", "try later") == "accepted"
    shown = svc.show("acme", run)
    assert shown.steps["reserve"].status == "retrying"
    assert shown.waiting_until == "2025-01-01T00:00:01.000Z"
    assert svc.claim("w1", ["inventory.reserve"], limit=10, lease_ttl=TTL) == []
    clock.advance(seconds=1)
    assert svc.fire_due_timers() == 1
    (lease2,) = svc.claim("w1", ["inventory.reserve"], limit=10, lease_ttl=TTL)
    assert lease2.attempt == 2
    assert lease2.idempotency_key == lease.idempotency_key
    assert svc.complete(lease2.task_id, 2, lease2.fencing, {}) == "accepted"
    assert svc.show("acme", run).steps["reserve"].attempts == 2


def test_output_that_is_not_json_fails_the_attempt_for_good(svc: Service, published):
    """An activity output that cannot be stored as JSON fails the step without retry (InvalidOutput)."""
    run = start_order(svc)
    (lease,) = svc.claim("w1", ["inventory.reserve"], limit=10, lease_ttl=TTL)
    assert svc.complete(lease.task_id, 1, lease.fencing, {"not json": {1, 2}}) == "accepted"
    shown = svc.show("acme", run)
    assert shown.status == "failed"
    assert shown.error["code"] == "InvalidOutput"


def test_heartbeat_needs_the_current_fencing_token(svc: Service, clock, published):
    """heartbeat extends the lease with the current token (so it does not expire) and refuses a stale one."""
    start_order(svc)
    (lease,) = svc.claim("w1", ["inventory.reserve"], limit=10, lease_ttl=TTL)
    assert svc.heartbeat(lease.task_id, lease.fencing - 1, TTL) is False
    clock.advance(seconds=4)
    assert svc.heartbeat(lease.task_id, lease.fencing, TTL) is True
    clock.advance(seconds=4)  # 8s after the claim: past the first lease, within the renewed one
    assert svc.expire_leases() == 0
    clock.advance(seconds=1)
    assert svc.expire_leases() == 1


# --- the scheduler's duties ----------------------------------------------------------------------


def test_a_due_timer_fires_once_even_when_called_twice(svc: Service, clock, raw, published):
    """fire_due_timers fires a due timer once; a second call changes nothing."""
    run = start_order(svc)
    finish_reserve(svc)
    clock.advance(seconds=9)
    assert svc.fire_due_timers() == 0
    clock.advance(seconds=1)
    assert svc.fire_due_timers() == 1
    events = svc.events("acme", run)
    assert svc.fire_due_timers() == 0
    assert svc.events("acme", run) == events
    assert [e.type for e in events].count("TimerFired") == 1
    shown = svc.show("acme", run)
    assert (shown.status, shown.current_step) == ("running", "charge")
    assert shown.steps["pause"].status == "succeeded"
    assert raw.fetch("SELECT key, status FROM timers") == [("wait:pause", "fired")]


def test_a_duplicate_timer_is_closed_without_a_transition(svc: Service, clock, raw, published):
    """A timer delivered again (row back to scheduled, or a stale generation) fires nothing, ends stale."""
    run = start_order(svc)
    finish_reserve(svc)
    clock.advance(seconds=10)
    assert svc.fire_due_timers() == 1
    events = svc.events("acme", run)
    raw.execute("UPDATE timers SET status = 'scheduled'")
    (gen,) = raw.fetch("SELECT generation FROM timers")[0]
    raw.execute(
        "INSERT INTO timers (run_id, key, generation, tenant, fire_at, status) "
        "VALUES (?, 'wait:pause', ?, 'acme', 0, 'scheduled')",
        run,
        gen - 1,
    )
    assert svc.fire_due_timers() == 0
    assert svc.events("acme", run) == events
    assert sorted(raw.fetch("SELECT generation, status FROM timers")) == [(gen - 1, "stale"), (gen, "stale")]
    assert svc.fire_due_timers() == 0


def test_an_expired_lease_times_out_the_attempt_then_retries(svc: Service, clock, raw, published):
    """A lease not renewed in time becomes ActivityTimedOut and a retry timer; the late result is ignored."""
    run = start_order(svc)
    (lease,) = svc.claim("w1", ["inventory.reserve"], limit=10, lease_ttl=TTL)
    clock.advance(seconds=4)
    assert svc.expire_leases() == 0
    clock.advance(seconds=1)
    assert svc.expire_leases() == 1
    assert svc.expire_leases() == 0
    events = svc.events("acme", run)
    assert [e.type for e in events[-2:]] == ["ActivityTimedOut", "TimerScheduled"]
    timed_out = events[-2].data
    assert timed_out["will_retry"] is True
    assert "w1 stopped renewing its lease" in timed_out["error"]["message"]
    assert events[-1].data["kind"] == "retry"
    assert raw.fetch("SELECT status FROM tasks") == [("done",)]

    assert svc.complete(lease.task_id, 1, lease.fencing, {"late": True}) == "ignored"
    clock.advance(seconds=1)
    assert svc.fire_due_timers() == 1
    (lease2,) = svc.claim("w2", ["inventory.reserve"], limit=10, lease_ttl=TTL)
    assert lease2.attempt == 2
    assert lease2.fencing > lease.fencing


def test_a_lease_kept_alive_past_the_deadline_times_out(svc: Service, clock, published):
    """Heartbeats cannot keep an attempt past its timeout: at the deadline it times out as such."""
    run = start_order(svc)
    (lease,) = svc.claim("w1", ["inventory.reserve"], limit=10, lease_ttl=TTL)
    for _ in range(7):
        clock.advance(seconds=4)
        assert svc.heartbeat(lease.task_id, lease.fencing, TTL) is True
        assert svc.expire_leases() == 0
    clock.advance(seconds=2)  # 30s: the attempt's deadline
    assert svc.expire_leases() == 1
    timed_out = svc.events("acme", run)[-2]
    assert timed_out.type == "ActivityTimedOut"
    assert "did not finish within its timeout" in timed_out.data["error"]["message"]


# --- cancellation --------------------------------------------------------------------------------


@pytest.mark.parametrize("reason", ["", "   "])
def test_cancel_requires_a_reason(svc: Service, reason: str):
    """Cancelling without a non-empty reason is refused before anything is written."""
    svc.publish("acme", NAP)
    run = svc.start("acme", "nap").run_id
    seq = svc.show("acme", run).seq
    with pytest.raises(InvalidInput, match="reason"):
        svc.cancel("acme", run, reason)
    assert svc.show("acme", run).seq == seq


def test_cancel_stops_a_waiting_run_and_its_timer(svc: Service, clock, raw):
    """Cancelling records the reason, cancels the timer (row too), ends cancelled; again is Refused."""
    svc.publish("acme", NAP)
    run = svc.start("acme", "nap").run_id
    out = svc.cancel("acme", run, "  customer changed their mind ", actor="ops@acme")
    assert out.plain() == {"run_id": run, "status": "cancelled", "accepted": True}
    assert types(svc, run)[-3:] == ["CancelRequested", "TimerCancelled", "RunCancelled"]
    shown = svc.show("acme", run)
    assert shown.cancel["reason"] == "customer changed their mind"
    assert shown.cancel["actor"] == "ops@acme"
    assert raw.fetch("SELECT status FROM timers") == [("cancelled",)]
    clock.advance(hours=2)
    assert svc.fire_due_timers() == 0
    with pytest.raises(Refused) as info:
        svc.cancel("acme", run, "again")
    assert info.value.code == "terminal"


# --- show ----------------------------------------------------------------------------------------


def test_show_explains_the_run(svc: Service, published):
    """show() has ids, status, pinned definition, current step, wait reason, next action, io and steps."""
    run = start_order(svc, 7)
    shown = svc.show("acme", run)
    for key in (
        "run_id",
        "tenant",
        "status",
        "definition",
        "current_step",
        "wait_reason",
        "next_action",
        "input",
        "output",
        "error",
        "steps",
    ):
        assert key in shown.plain(), key
    assert (shown.run_id, shown.tenant, shown.status) == (run, "acme", "running")
    assert shown.definition.plain() == {"name": "order", "version": 1, "digest": published.digest}
    assert shown.current_step == "reserve"
    assert "inventory.reserve" in shown.wait_reason
    assert "queued" in shown.wait_reason
    assert shown.next_action
    assert (shown.input, shown.output, shown.error) == ({"order": 7}, None, None)
    assert shown.steps["reserve"].status == "scheduled"
    assert shown.steps["reserve"].attempts == 1
    assert shown.steps["charge"].plain() == {
        "status": "pending",
        "attempts": 0,
        "output": None,
        "error": None,
        "idempotency_key": None,
        "started_at": None,
        "finished_at": None,
        "kind": "activity",
        "duration_seconds": None,
    }
    json.dumps(shown.plain())  # everything show() returns is JSON


# --- verification --------------------------------------------------------------------------------


@pytest.fixture
def runs_for_verify(svc: Service, clock, published) -> list[str]:
    """A few runs in different states across two tenants."""
    svc.publish("globex", NAP)
    first = start_order(svc, 1)
    finish_reserve(svc)
    second = start_order(svc, 2)
    nap = svc.start("globex", "nap").run_id
    svc.cancel("globex", nap, "test")
    return [first, second, nap]


def test_verify_is_ok_for_untouched_runs(svc: Service, runs_for_verify):
    """verify replays every run, checks seq and hash chain, and finds nothing wrong."""
    report = svc.verify()
    assert sorted(r.run_id for r in report) == sorted(runs_for_verify)
    assert all(r.ok and r.problems == [] for r in report), report
    assert [r.run_id for r in svc.verify(tenant="globex")] == [runs_for_verify[2]]
    assert svc.verify(runs_for_verify[0])[0].events == len(svc.events("acme", runs_for_verify[0]))


def _problems(svc: Service, run: str) -> list[str]:
    (r,) = svc.verify(run)
    assert r.ok is False
    return r.problems


def test_verify_detects_an_edited_event(svc: Service, raw, runs_for_verify):
    """Changing an event's data in the database breaks the hash chain at that seq."""
    run = runs_for_verify[0]
    raw.tamper_events(
        "UPDATE events SET data = replace(data, '\"order\":1', '\"order\":999') WHERE run_id = ? AND seq = 2",
        run,
    )
    (data,) = raw.fetch("SELECT data FROM events WHERE run_id = ? AND seq = 2", run)[0]
    assert json.loads(data)["input"] == {"order": 999}
    assert any("hash chain broken at seq 2" in p for p in _problems(svc, run))
    others = [r for r in svc.verify() if r.run_id != run]
    assert all(r.ok for r in others)


def test_verify_detects_an_edited_snapshot(svc: Service, raw, runs_for_verify):
    """Changing runs.snapshot so it no longer equals the fold of the events is reported."""
    run = runs_for_verify[0]
    (snap,) = raw.fetch("SELECT snapshot FROM runs WHERE run_id = ?", run)[0]
    doc = json.loads(snap)
    doc["input"] = {"order": 999}
    raw.execute("UPDATE runs SET snapshot = ? WHERE run_id = ?", json.dumps(doc), run)
    problems = _problems(svc, run)
    assert any("snapshot differs from replay" in p and "input" in p for p in problems), problems


def test_verify_detects_a_deleted_event(svc: Service, raw, runs_for_verify):
    """Deleting an event from the middle of a history is reported as a sequence gap."""
    run = runs_for_verify[0]
    raw.tamper_events("DELETE FROM events WHERE run_id = ? AND seq = 3", run)
    problems = _problems(svc, run)
    assert any("sequence gap" in p for p in problems), problems


def test_concurrent_duplicate_reports_are_accepted_once(svc: Service, published):
    """The same result reported by two threads at once: exactly one is accepted, the other ignored."""
    run = start_order(svc)
    (lease,) = svc.claim("w1", ["inventory.reserve"], limit=10, lease_ttl=TTL)
    barrier = threading.Barrier(4)
    verdicts: list[str] = []

    def report() -> None:
        barrier.wait()
        verdicts.append(svc.complete(lease.task_id, lease.attempt, lease.fencing, {"ok": True}))

    threads = [threading.Thread(target=report) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(verdicts) == ["accepted", "ignored", "ignored", "ignored"]
    kinds = types(svc, run)
    assert (kinds.count("ActivitySucceeded"), kinds.count("ResultIgnored")) == (1, 3)
    assert kinds.count("TimerScheduled") == 1
    assert svc.verify(run)[0].ok is True


# --- SQLite only ---------------------------------------------------------------------------------


def test_a_locked_database_is_reported_as_unavailable(db_path, clock):
    """SQLite locked by another writer past the busy timeout: service calls raise Unavailable."""
    store = open_store(f"sqlite:///{db_path}", busy_timeout_s=0.05)
    blocker = sqlite3.connect(db_path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        svc = Service(store, clock=clock)
        with pytest.raises(Unavailable, match="busy"):
            svc.publish("acme", NAP)
        blocker.execute("ROLLBACK")
        assert svc.publish("acme", NAP).version == 1
    finally:
        blocker.close()
        store.close()


# --- regressions ---------------------------------------------------------------------------------


def test_a_definition_published_under_raised_limits_can_be_started(store, clock):
    """A definition valid under the tenant's (raised) limits at publish time can be started and run."""
    svc = Service(store, clock=clock, limits=Limits(max_timeout=timedelta(days=30)))
    long_doc = {"name": "slow", "steps": [{"id": "a", "activity": "batch.run", "timeout": "10d"}]}
    assert svc.publish("acme", long_doc).version == 1
    try:
        run = svc.start("acme", "slow").run_id
    except Exception as exc:
        raise AssertionError(f"{type(exc).__name__}: {exc}") from None
    assert svc.show("acme", run).status == "running"  # pragma: no cover


def test_default_output_is_the_last_step_output(svc: Service):
    """With no output template, a completed run's output is the output of its last succeeded step."""
    svc.publish(
        "acme",
        {
            "name": "calc",
            "steps": [
                {"id": "double", "activity": "calc.double", "timeout": "5s"},
                {"id": "add", "activity": "calc.add", "timeout": "5s"},
            ],
        },
    )
    run = svc.start("acme", "calc").run_id
    for activity, output in (("calc.double", {"value": 40}), ("calc.add", {"value": 41})):
        (lease,) = svc.claim("w1", [activity], limit=1, lease_ttl=TTL)
        assert svc.complete(lease.task_id, lease.attempt, lease.fencing, output) == "accepted"
    shown = svc.show("acme", run)
    assert shown.status == "completed"
    assert shown.output == {"value": 41}


def test_concurrent_starts_never_exceed_the_active_run_limit(svc: Service, published: dict[str, Any]) -> None:
    """Eight starts racing against max_active_runs=3 admit exactly 3: the count is taken under the
    tenant's row lock (PostgreSQL's READ COMMITTED let two racing starts both see room for one more)."""
    from lockstep.errors import RateLimited

    svc.principals.create_tenant("acme")
    svc.principals.set_tenant("acme", max_active_runs=3)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def start(i: int) -> None:
        barrier.wait()
        try:
            start_order(svc, i)
            outcomes.append("started")
        except RateLimited:
            outcomes.append("limited")

    threads = [threading.Thread(target=start, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes) == ["limited"] * 5 + ["started"] * 3
    assert len(svc.runs("acme", limit=100)) == 3


def test_report_and_claim_records_results_and_leases_the_next_tasks_in_one_call(
    svc: Service, published: dict[str, Any], clock: Any
) -> None:
    """One call records two results (the runs wait on `pause`), a stale duplicate (ignored) and an
    unknown task (not_found), and leases what is ready: the worker's hot path is one transaction."""
    runs = [start_order(svc, i) for i in (1, 2)]
    leases = svc.claim("w1", ["inventory.reserve"], limit=10, lease_ttl=TTL)
    ok = [svc.success_report(x.task_id, x.attempt, x.fencing, {"reserved": True}) for x in leases]
    stale = svc.success_report(leases[0].task_id, leases[0].attempt, leases[0].fencing + 99, {"late": True})
    unknown = svc.failure_report("nope/reserve/x", 1, 1, "Boom", "no such task")
    third = start_order(svc, 3)
    verdicts, new = svc.report_and_claim(
        [*ok, stale, unknown], "w1", ["inventory.reserve"], limit=5, lease_ttl=TTL
    )
    assert verdicts == ["accepted", "accepted", "ignored", "not_found"]
    assert [x.run_id for x in new] == [third]
    for run in runs:
        assert svc.show("acme", run).wait_kind == "timer"
    assert "ResultIgnored" in types(svc, leases[0].run_id)


def test_start_many_starts_every_run_or_none(svc: Service, published: dict[str, Any]) -> None:
    """start_many starts one run per input in one transaction; over the tenant's limit, it starts none."""
    from lockstep.errors import RateLimited

    ids = svc.start_many("acme", "order", [{"order": i} for i in range(3)])
    assert len(set(ids)) == 3
    assert [svc.show("acme", r).status for r in ids] == ["running"] * 3
    svc.principals.create_tenant("acme")
    svc.principals.set_tenant("acme", max_active_runs=4)
    with pytest.raises(RateLimited):
        svc.start_many("acme", "order", [{"order": i} for i in range(10, 12)])
    assert len(svc.runs("acme", limit=100)) == 3
    with pytest.raises(InvalidInput):
        svc.start_many("acme", "order", [{"order": "not a number"}])


def test_a_report_is_one_write_transaction_and_no_read(svc: Service, published, monkeypatch):
    """A worker's result (success, failure, stale) costs one write transaction: the run is derived from
    the task id, its tenant and limits are read with the locked run (issue 15: no read to find the task)."""
    start_order(svc)
    (lease,) = svc.claim("w1", ["inventory.reserve"], limit=10, lease_ttl=TTL)
    opened: list[str] = []
    for kind in ("read", "write"):
        original = getattr(svc.store, kind)

        def counted(*args: Any, _kind: str = kind, _original: Any = original, **kwargs: Any) -> Any:
            opened.append(_kind)
            return _original(*args, **kwargs)

        monkeypatch.setattr(svc.store, kind, counted)
    assert svc.complete(lease.task_id, lease.attempt, lease.fencing, {"reserved": True}) == "accepted"
    assert opened == ["write"]
    assert svc.complete(lease.task_id, lease.attempt, lease.fencing, {"reserved": True}) == "ignored"
    assert opened == ["write", "write"]
    with pytest.raises(NotFound, match="task nope/reserve/a1 not found"):
        svc.complete("nope/reserve/a1", 1, 1, {})
    with pytest.raises(NotFound, match=f"task {lease.task_id} not found"):
        svc.complete(lease.task_id, lease.attempt, lease.fencing, {}, tenant="globex")
