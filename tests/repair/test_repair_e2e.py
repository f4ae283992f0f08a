"""End to end through the service with real in-process workers on a SQLite file: an operator repairs
stuck runs (resolve, pause/resume, skip, edit input) and moves runs between definition versions
(migrate, dry run, bulk), and `verify` still proves fold(events) == snapshot after every mix."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lockstep.errors import InvalidInput, NotFound, Refused
from lockstep.runtime.activity import ActivityContext, Registry

from .conftest import TENANT, World

PAY: dict[str, Any] = {
    "name": "pay",
    "steps": [
        {
            "id": "reserve",
            "activity": "stock.reserve",
            "timeout": "30s",
            "compensate": {"activity": "stock.release"},
        },
        {"id": "charge", "activity": "card.charge", "delivery": "at_most_once", "timeout": "30s"},
        {
            "id": "ship",
            "activity": "parcel.ship",
            "input": {"receipt": "${steps.charge.output.receipt}"},
            "timeout": "30s",
        },
    ],
}


class Calls:
    """Activities that record what they were given; `gate` holds an activity until released."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any, int, str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def record(self, name: str, payload: Any, ctx: ActivityContext) -> None:
        with self._lock:
            self.log.append((name, payload, ctx.version, ctx.idempotency_key))

    def names(self) -> list[str]:
        return [x[0] for x in self.log]

    def echo(self, name: str) -> Any:
        def fn(payload: Any, ctx: ActivityContext) -> Any:
            self.record(name, payload, ctx)
            return payload

        return fn

    def gate(self, name: str, output: Any, *, first_only: bool = False) -> Any:
        """Blocks (the first call, with first_only) until the test releases it, then returns output."""

        def fn(payload: Any, ctx: ActivityContext) -> Any:
            self.record(name, payload, ctx)
            if not first_only or self.names().count(name) == 1:
                self.entered.set()
                assert self.release.wait(20), "the test never released the activity"
            return output(ctx) if callable(output) else output

        return fn

    def registry(self, **fns: Any) -> Registry:
        reg = Registry()
        for name, fn in fns.items():
            reg.register(name.replace("_", "."), fn)
        return reg


def _raise(exc: Exception) -> Any:
    def fn(payload: Any) -> Any:
        raise exc

    return fn


# --- needs_attention: resolve ------------------------------------------------------------------------


def test_resolve_succeeded_after_an_expired_at_most_once_lease_completes_the_run(world: World) -> None:
    """A lost at-most-once lease waits in needs_attention; resolve --as succeeded uses the output, ships."""
    assert world.clock is not None
    world.publish(PAY)
    run = world.start("pay")
    calls = Calls()
    reg = calls.registry(
        stock_reserve=calls.echo("reserve"),
        card_charge=calls.gate("charge", {"receipt": "late"}),
        parcel_ship=calls.echo("ship"),
    )
    try:
        with world.worker(reg):
            assert calls.entered.wait(10)
            world.clock.advance(minutes=5)  # past the 30 s attempt timeout: heartbeats cannot save it
            assert world.svc.expire_leases() == 1
            stuck = world.show(run)
            assert stuck["status"] == "needs_attention"
            assert stuck["attention"]["code"] == "outcome_unknown"
            assert "resolve" in stuck["next_action"]
            before = world.types(run)
            out = world.repairs.resolve(
                TENANT, run, "charge", "succeeded", "  checked the card processor: paid  ",
                output={"receipt": "R-1"}, actor="op",
            )  # fmt: skip
            assert out.events[0] == "StepResolved"
            assert world.types(run)[: len(before)] == before
            done = world.wait_for(run)
            assert done["steps"]["charge"]["output"] == {"receipt": "R-1"}
            assert ("ship", {"receipt": "R-1"}) in [(n, p) for n, p, _, _ in calls.log]
            calls.release.set()  # the lost attempt finally reports: too late, recorded as evidence
    finally:
        calls.release.set()
    resolved = world.of_type(run, "StepResolved")
    assert resolved == [
        {
            "step": "charge",
            "outcome": "succeeded",
            "output": {"receipt": "R-1"},
            "reason": "checked the card processor: paid",
            "actor": "op",
            "code": "outcome_unknown",
            "compensation": False,
            "compensable": False,
            "superseded": [],
        }
    ]
    ignored = world.of_type(run, "ResultIgnored")
    assert [(x["step"], x["result"]["output"]) for x in ignored] == [("charge", {"receipt": "late"})]
    assert world.show(run)["status"] == "completed"
    world.verify_ok()


def test_resolve_failed_compensates_and_ends_failed(world: World) -> None:
    """An unknown charge resolved as failed runs the compensation of reserve and ends the run failed."""
    world.publish(PAY)
    run = world.start("pay")
    calls = Calls()
    reg = calls.registry(
        stock_reserve=calls.echo("reserve"),
        stock_release=calls.echo("release"),
        card_charge=_raise(ConnectionError("connection reset mid-request")),
        parcel_ship=calls.echo("ship"),
    )
    with world.worker(reg):
        stuck = world.wait_for(run, "needs_attention")
        assert stuck["attention"]["step"] == "charge"
        world.repairs.resolve(TENANT, run, "charge", "failed", "processor shows no payment", actor="op")
        done = world.wait_for(run, "failed")
    assert done["error"]["code"] == "ResolvedFailed"
    assert "processor shows no payment" in done["error"]["message"]
    assert done["steps"]["reserve"]["compensation"]["status"] == "compensated"
    assert calls.names() == ["reserve", "release"]
    assert "ship" not in calls.names()
    world.verify_ok()


def test_resolve_is_refused_without_an_unknown_outcome_and_writes_nothing(world: World) -> None:
    """resolve on a healthy run, a blank reason, or an unknown --as: refused, and not one row written."""
    world.publish(PAY)
    run = world.start("pay")
    before = world.totals()
    with pytest.raises(Refused) as refused:
        world.repairs.resolve(TENANT, run, "reserve", "succeeded", "why not", actor="op")
    assert refused.value.code == "not_resolvable"
    with pytest.raises(InvalidInput, match="reason"):
        world.repairs.resolve(TENANT, run, "reserve", "succeeded", "   ", actor="op")
    with pytest.raises(InvalidInput, match="succeeded or failed"):
        world.repairs.resolve(TENANT, run, "reserve", "maybe", "hm", actor="op")
    with pytest.raises(NotFound):
        world.repairs.resolve("globex", run, "reserve", "succeeded", "other tenant", actor="op")
    assert world.totals() == before
    world.verify_ok()


# --- pause and resume --------------------------------------------------------------------------------

NAP: dict[str, Any] = {
    "name": "nap",
    "steps": [
        {"id": "nap", "wait": "1s"},
        {"id": "done", "activity": "job.done", "input": {"n": 1}, "timeout": "10s"},
    ],
}


def test_a_paused_run_does_not_move_when_its_timer_falls_due_and_moves_on_after_resume(live: World) -> None:
    """The scheduler fires the due timer of a paused run; the next step starts only on resume."""
    live.publish(NAP)
    calls = Calls()
    reg = calls.registry(job_done=calls.echo("done"))
    with live.worker(reg, scheduler=True):
        run = live.start("nap")
        live.repairs.pause(TENANT, run, "hold for the audit", actor="op")
        types = live.types(run)
        assert "TimerFired" not in types, "the 1 s timer fired before the pause: machine far too slow"
        live.wait_until("the scheduler fires the due timer", lambda: "TimerFired" in live.types(run))
        held = live.show(run)
        assert held["status"] == "paused"
        assert held["current_step"] == "nap"
        assert held["wait_kind"] == "paused"
        assert "enter" in held["next_action"]
        after_pause = live.types(run)[live.types(run).index("RunPaused") :]
        assert after_pause == ["RunPaused", "TimerFired", "TransitionDeferred"]
        assert live.task_rows(run) == []
        assert calls.log == []
        resumed = live.repairs.resume(TENANT, run, "audit done", actor="op")
        assert resumed.events[:2] == ["RunResumed", "ActivityScheduled"]
        live.wait_for(run)
    assert calls.names() == ["done"]
    [paused] = live.of_type(run, "RunPaused")
    assert (paused["reason"], paused["actor"]) == ("hold for the audit", "op")
    live.verify_ok()


def test_pause_withdraws_a_queued_activity_and_resume_schedules_it_again(world: World) -> None:
    """Pause cancels the queued task (no worker may take it); resume schedules it with the same key."""
    world.publish(PAY)
    run = world.start("pay")
    [(first_task, status, _v)] = world.task_rows(run)
    assert status == "ready"
    world.repairs.pause(TENANT, run, "supplier outage", actor="op")
    assert world.types(run)[-3:] == ["RunPaused", "ActivityCancelled", "TransitionDeferred"]
    assert world.task_rows(run) == [(first_task, "cancelled", 1)]
    assert world.svc.claim("w-x", ["stock.reserve"], limit=5, lease_ttl=world.svc.unserved_after) == []
    with pytest.raises(Refused) as twice:
        world.repairs.pause(TENANT, run, "again", actor="op")
    assert twice.value.code == "already_paused"
    scheduled = world.of_type(run, "ActivityScheduled")
    world.repairs.resume(TENANT, run, "supplier is back", actor="op")
    again = world.of_type(run, "ActivityScheduled")
    assert len(again) == 2
    assert again[1]["step"] == "reserve"
    assert again[1]["attempt"] == scheduled[0]["attempt"] == 1
    assert again[1]["idempotency_key"] == scheduled[0]["idempotency_key"]
    assert again[1]["task_id"] != first_task
    calls = Calls()
    reg = calls.registry(
        stock_reserve=calls.echo("reserve"),
        card_charge=lambda payload: {"receipt": "R-2"},
        parcel_ship=calls.echo("ship"),
    )
    with world.worker(reg):
        world.wait_for(run)
    assert calls.names() == ["reserve", "ship"]
    assert calls.log[0][3] == scheduled[0]["idempotency_key"]
    with pytest.raises(Refused) as finished:
        world.repairs.resume(TENANT, run, "too late", actor="op")
    assert finished.value.code == "terminal"
    world.verify_ok()


def test_an_attempt_in_flight_when_paused_finishes_and_is_recorded_but_nothing_new_starts(
    world: World,
) -> None:
    """Pause during a running attempt: its result is applied (not ignored); the next step waits."""
    world.publish(PAY)
    run = world.start("pay")
    calls = Calls()
    reg = calls.registry(
        stock_reserve=calls.gate("reserve", {"held": 1}),
        card_charge=lambda payload: {"receipt": "R-3"},
        parcel_ship=calls.echo("ship"),
    )
    try:
        with world.worker(reg):
            assert calls.entered.wait(10)
            out = world.repairs.pause(TENANT, run, "incident", actor="op")
            assert out.events == ["RunPaused"], "a started attempt is not withdrawn"
            calls.release.set()
            world.wait_until("the reserve result", lambda: "ActivitySucceeded" in world.types(run))
            held = world.show(run)
            assert held["status"] == "paused"
            assert held["steps"]["reserve"]["output"] == {"held": 1}
            assert world.types(run)[-2:] == ["ActivitySucceeded", "TransitionDeferred"]
            assert world.of_type(run, "ResultIgnored") == []
            assert [t for t in world.task_rows(run) if t[1] != "done"] == []
            world.repairs.resume(TENANT, run, "incident over", actor="op")
            world.wait_for(run)
    finally:
        calls.release.set()
    assert calls.names() == ["reserve", "ship"]
    world.verify_ok()


# --- skip --------------------------------------------------------------------------------------------

HOLD: dict[str, Any] = {
    "name": "hold",
    "steps": [
        {"id": "charge", "activity": "card.charge", "timeout": "30s"},
        {"id": "review", "wait": "1h", "skip_policy": {"roles": ["admin"]}},
        {"id": "cool", "wait": "1h", "skippable": True},
        {
            "id": "use",
            "activity": "note.use",
            "input": {"note": "${steps.cool.output.note}"},
            "timeout": "9s",
        },
    ],
}


def _finish_charge(world: World, run: str) -> None:
    """Play the worker for the charge task by hand (claim + complete through the service)."""
    [lease] = world.svc.claim("w-1", ["card.charge"], limit=1, lease_ttl=world.svc.unserved_after)
    assert lease.run_id == run
    assert world.svc.complete(lease.task_id, lease.attempt, lease.fencing, {"ok": True}) == "accepted"


def test_skip_of_a_skippable_wait_uses_the_given_output_downstream(world: World) -> None:
    """Skipping the cool-off wait with --output cancels its timer; the next step reads that output."""
    world.publish(HOLD)
    run = world.start("hold")
    _finish_charge(world, run)
    world.repairs.skip(TENANT, run, "review", "reviewed offline", actor="boss", roles=("admin",))
    assert world.show(run)["current_step"] == "cool"
    out = world.repairs.skip(
        TENANT, run, "cool", "customer waived it", output={"note": "by hand"}, actor="op"
    )
    assert out.events == ["TimerCancelled", "StepSkipped", "ActivityScheduled"]
    calls = Calls()
    with world.worker(calls.registry(note_use=calls.echo("use"))):
        done = world.wait_for(run)
    assert calls.log[0][1] == {"note": "by hand"}
    assert done["output"] == {"note": "by hand"}
    assert done["steps"]["cool"]["status"] == "skipped"
    skipped = world.of_type(run, "StepSkipped")
    assert [(s["step"], s["actor"], s["before"]["status"]) for s in skipped] == [
        ("review", "boss", "waiting"),
        ("cool", "op", "waiting"),
    ]
    assert skipped[1]["output"] == {"note": "by hand"}
    world.verify_ok()


def test_a_forbidden_skip_is_refused_with_the_reason_and_appends_nothing(world: World) -> None:
    """Not skippable, not the current step, or skip_policy roles not held: refused, no row written."""
    world.publish(HOLD)
    run = world.start("hold")
    before = world.totals()
    with pytest.raises(Refused, match="may not be skipped") as e1:
        world.repairs.skip(TENANT, run, "charge", "in a hurry", actor="op")
    assert e1.value.code == "not_skippable"
    with pytest.raises(Refused, match="not the current step") as e2:
        world.repairs.skip(TENANT, run, "cool", "in a hurry", actor="op")
    assert e2.value.code == "not_current"
    with pytest.raises(InvalidInput, match="reason"):
        world.repairs.skip(TENANT, run, "charge", "", actor="op")
    with pytest.raises(InvalidInput, match="not valid JSON"):
        world.repairs.skip(TENANT, run, "charge", "x", output=float("nan"), actor="op")
    assert world.totals() == before
    _finish_charge(world, run)
    before = world.totals()
    with pytest.raises(Refused, match="only admin may skip step review") as e3:
        world.repairs.skip(TENANT, run, "review", "operator tries", actor="op", roles=("operator",))
    assert e3.value.code == "forbidden"
    assert world.totals() == before
    world.repairs.skip(TENANT, run, "review", "admin may", actor="boss", roles=("admin",))
    assert world.show(run)["current_step"] == "cool"
    world.verify_ok()


# --- edit input --------------------------------------------------------------------------------------

ORDER: dict[str, Any] = {
    "name": "order",
    "input_schema": {
        "type": "object",
        "required": ["order"],
        "properties": {"order": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
    },
    "steps": [
        {"id": "hold", "wait": "1h"},
        {
            "id": "pack",
            "activity": "box.pack",
            "input": {"order": "${input.order}", "qty": "${input.qty}"},
            "timeout": "30s",
        },
    ],
}


def test_edit_input_is_validated_and_later_steps_use_the_new_input(world: World) -> None:
    """An input failing the schema is refused (nothing written); a valid one is audited and used."""
    assert world.clock is not None
    world.publish(ORDER)
    run = world.start("order", {"order": "o-1", "qty": 1})
    before = world.totals()
    with pytest.raises(Refused, match="input_schema") as bad:
        world.repairs.edit_input(TENANT, run, {"order": 5, "qty": 0}, "typo", actor="op")
    assert bad.value.code == "invalid_input"
    with pytest.raises(InvalidInput, match="not valid JSON"):
        world.repairs.edit_input(TENANT, run, {"order": "o", "qty": float("inf")}, "typo", actor="op")
    with pytest.raises(InvalidInput, match="reason"):
        world.repairs.edit_input(TENANT, run, {"order": "o-2", "qty": 3}, " ", actor="op")
    assert world.totals() == before
    world.repairs.edit_input(TENANT, run, {"order": "o-2", "qty": 3}, "customer changed qty", actor="op")
    [edited] = world.of_type(run, "InputEdited")
    assert edited == {
        "old": {"order": "o-1", "qty": 1},
        "new": {"order": "o-2", "qty": 3},
        "reason": "customer changed qty",
        "actor": "op",
    }
    assert world.show(run)["input"] == {"order": "o-2", "qty": 3}
    calls = Calls()
    with world.worker(calls.registry(box_pack=calls.echo("pack"))):
        world.clock.advance(hours=2)
        assert world.svc.fire_due_timers() == 1
        done = world.wait_for(run)
    assert calls.log[0][1] == {"order": "o-2", "qty": 3}
    assert done["output"] == {"order": "o-2", "qty": 3}
    world.verify_ok()


# --- migrate -----------------------------------------------------------------------------------------

APPROVAL = {
    "id": "approve",
    "approval": {"approvers": {"users": ["alice"]}, "timeout": "1d", "on_timeout": "reject"},
}
PO_V1: dict[str, Any] = {
    "name": "po",
    "input_schema": {"type": "object", "required": ["po"]},
    "steps": [
        APPROVAL,
        {"id": "pay", "activity": "po.pay", "input": {"po": "${input.po}"}, "timeout": "30s"},
    ],
}
PO_V2: dict[str, Any] = {
    **PO_V1,
    "steps": [
        APPROVAL,
        {"id": "notify", "activity": "po.notify", "input": {"po": "${input.po}"}, "timeout": "30s"},
        {"id": "pay", "activity": "po.pay", "input": {"po": "${input.po}"}, "timeout": "30s"},
    ],
}


def test_migrate_a_run_waiting_for_approval_from_v1_to_v2_and_finish_on_v2(world: World) -> None:
    """Dry run explains and changes nothing; the real move records both versions; v2's step runs."""
    assert world.publish(PO_V1) == 1
    run = world.start("po", {"po": "PO-7"})
    assert world.show(run)["wait_kind"] == "approval"
    v1_digest = world.show(run)["definition"]["digest"]
    assert world.publish(PO_V2) == 2
    v2_digest = world.svc.definition_document(TENANT, "po", 2).digest
    before = world.totals()

    plan = world.repairs.migrate(TENANT, run, 2, "add the notification", dry_run=True, actor="op")
    assert plan.ok is True
    assert plan.dry_run is True
    assert plan.steps_added == ["notify"]
    assert plan.steps_removed == []
    assert plan.current_step == {"from": "approve", "to": "approve"}
    assert plan.carried == [f"approval request {run}/approve/r1 of approve"]
    assert plan.restart is None
    assert plan.problems == []
    assert world.totals() == before, "a dry run changes nothing"

    out = world.repairs.migrate(TENANT, run, 2, "add the notification", actor="op")
    assert out.dry_run is False
    assert out.events == ["WorkflowMigrated"]
    [migrated] = world.of_type(run, "WorkflowMigrated")
    assert migrated["previous"] == {"name": "po", "version": 1, "digest": v1_digest}
    assert migrated["definition"] == {"name": "po", "version": 2, "digest": v2_digest}
    assert (migrated["reason"], migrated["actor"]) == ("add the notification", "op")
    shown = world.show(run)
    assert shown["definition"]["version"] == 2
    assert list(shown["steps"]) == ["approve", "notify", "pay"]
    assert shown["wait_kind"] == "approval"

    calls = Calls()
    reg = calls.registry(po_notify=calls.echo("notify"), po_pay=calls.echo("pay"))
    with world.worker(reg):
        link = world.approvals.mint(TENANT, run, "approve", "alice", by="op")
        alice = world.principals.principal(TENANT, "alice")
        assert alice is not None
        decided = world.approvals.decide(alice, link.token, "approve", "fine")
        assert decided.request_status == "approved"
        done = world.wait_for(run)
    assert calls.names() == ["notify", "pay"]
    assert {v for _, _, v, _ in calls.log} == {2}, "the tasks carry the run's new version"
    assert done["steps"]["approve"]["status"] == "succeeded"
    assert done["definition"]["version"] == 2
    kinds = world.types(run)
    assert kinds.index("WorkflowMigrated") < kinds.index("ApprovalGranted")
    world.verify_ok()


def test_a_real_migration_of_a_finished_run_is_refused(world: World) -> None:
    """migrate (not a dry run) on a completed run raises Refused(terminal) like every other command."""
    world.publish(WORK_V1)
    world.publish(WORK_V2)
    run = world.start("work", version=1)
    [lease] = world.svc.claim("w-1", ["job.crunch"], limit=1, lease_ttl=world.svc.unserved_after)
    world.svc.complete(lease.task_id, lease.attempt, lease.fencing, {})
    assert world.show(run)["status"] == "completed"
    before = world.totals()
    try:
        with pytest.raises(Refused) as late:
            world.repairs.migrate(TENANT, run, 2, "too late", actor="op")
        assert late.value.code == "terminal"
    finally:
        assert world.totals() == before


WORK_V1: dict[str, Any] = {
    "name": "work",
    "steps": [{"id": "crunch", "activity": "job.crunch", "timeout": "60s"}],
}
WORK_V2: dict[str, Any] = {
    "name": "work",
    "steps": [
        {"id": "crunch", "activity": "job.crunch", "timeout": "60s"},
        {"id": "report", "activity": "job.report", "timeout": "60s"},
    ],
}


def test_a_v1_workers_late_result_after_a_migration_restart_is_ignored(world: World) -> None:
    """Migrating while a v1 attempt runs restarts the step on v2; the v1 result is ResultIgnored."""
    world.publish(WORK_V1)
    world.publish(WORK_V2)
    run = world.start("work", version=1)
    calls = Calls()
    reg = calls.registry(
        job_crunch=calls.gate("crunch", lambda ctx: {"from": f"v{ctx.version}"}, first_only=True),
        job_report=calls.echo("report"),
    )
    try:
        with world.worker(reg, concurrency=2):
            assert calls.entered.wait(10)
            plan = world.repairs.migrate(TENANT, run, 2, "add report", dry_run=True, actor="op")
            assert plan.restart == "crunch"
            out = world.repairs.migrate(TENANT, run, 2, "add report", actor="op")
            assert out.events == ["ActivityCancelled", "WorkflowMigrated", "ActivityScheduled"]
            done = world.wait_for(run)
            calls.release.set()
    finally:
        calls.release.set()
    assert [(n, v) for n, _, v, _ in calls.log] == [("crunch", 1), ("crunch", 2), ("report", 2)]
    [ignored] = world.of_type(run, "ResultIgnored")
    assert ignored["step"] == "crunch"
    assert ignored["result"] == {"outcome": "succeeded", "output": {"from": "v1"}}
    assert done["steps"]["crunch"]["output"] == {"from": "v2"}
    assert world.show(run)["ignored_results"] == 1
    world.verify_ok()


def test_a_dry_run_agrees_with_the_real_migration_about_the_same_version(world: World) -> None:
    """Dry run and real migrate give the same verdict for a move to the version the run is on."""
    world.publish(WORK_V1)
    run = world.start("work", version=1)
    plan = world.repairs.migrate(TENANT, run, 1, "no-op", dry_run=True, actor="op")
    with pytest.raises(Refused) as real:
        world.repairs.migrate(TENANT, run, 1, "no-op", actor="op")
    assert real.value.code == "same_version"
    assert plan.ok is False, plan


SAGA_V1: dict[str, Any] = {
    "name": "saga",
    "input_schema": {"type": "object", "required": ["sku"]},
    "steps": [
        {
            "id": "reserve",
            "activity": "stock.reserve",
            "timeout": "30s",
            "compensate": {"activity": "stock.release"},
        },
        {"id": "hold", "wait": "1h"},
        {"id": "ship", "activity": "parcel.ship", "timeout": "30s"},
    ],
}


def _saga(**changes: Any) -> dict[str, Any]:
    import copy

    doc = copy.deepcopy(SAGA_V1)
    for k, v in changes.items():
        doc[k] = v
    return doc


def test_incompatible_migrations_are_refused_with_the_reasons_and_write_nothing(world: World) -> None:
    """A removed compensation of a completed step, a failing input, a current step without counterpart."""
    world.publish(SAGA_V1)
    undo = {"id": "reserve", "activity": "stock.reserve", "timeout": "30s"}
    no_undo = _saga(steps=[undo, *SAGA_V1["steps"][1:]])
    assert world.publish(no_undo) == 2
    stricter = _saga(input_schema={"type": "object", "required": ["sku", "customer"]})
    assert world.publish(stricter) == 3
    renamed = _saga(steps=[*SAGA_V1["steps"][:1], {"id": "pause", "wait": "1h"}, SAGA_V1["steps"][2]])
    assert world.publish(renamed) == 4
    run = world.start("saga", {"sku": "S-1"}, version=1)
    [lease] = world.svc.claim("w-1", ["stock.reserve"], limit=1, lease_ttl=world.svc.unserved_after)
    world.svc.complete(lease.task_id, lease.attempt, lease.fencing, {"reserved": 1})
    assert world.show(run)["current_step"] == "hold"
    before = world.totals()

    cases = {
        2: "completed step reserve has a compensation but the target has no compensable step reserve",
        3: "the run's input does not fit the target input_schema",
        4: "the current step hold has no counterpart in the target (add --map hold=STEP)",
    }
    for version, problem in cases.items():
        plan = world.repairs.migrate(TENANT, run, version, "try", dry_run=True, actor="op")
        assert plan.ok is False
        assert any(problem in p for p in plan.problems), plan.problems
        with pytest.raises(Refused, match="migration refused") as refused:
            world.repairs.migrate(TENANT, run, version, "try", actor="op")
        assert refused.value.code == "incompatible"
        assert problem in str(refused.value)
    with pytest.raises(NotFound, match="no version 9"):
        world.repairs.migrate(TENANT, run, 9, "try", actor="op")
    with pytest.raises(Refused) as same:
        world.repairs.migrate(TENANT, run, 1, "try", actor="op")
    assert same.value.code == "same_version"
    with pytest.raises(InvalidInput, match="reason"):
        world.repairs.migrate(TENANT, run, 4, "", mapping={"hold": "pause"}, actor="op")
    assert world.totals() == before

    out = world.repairs.migrate(TENANT, run, 4, "renamed the wait", mapping={"hold": "pause"}, actor="op")
    assert out.carried == []
    assert out.restart == "pause"
    assert world.show(run)["current_step"] == "pause"
    world.verify_ok()


def test_bulk_migration_reports_per_run_and_a_refusal_does_not_stop_the_others(world: World) -> None:
    """migrate_many: dry run first (nothing changes), then the real move; each run has its outcome."""
    world.publish(SAGA_V1)
    assert world.publish(_saga(input_schema={"type": "object", "required": ["sku", "customer"]})) == 2
    good = [world.start("saga", {"sku": f"S-{i}", "customer": "c"}, version=1) for i in range(2)]
    bad = world.start("saga", {"sku": "S-9"}, version=1)
    stay = world.start("saga", {"sku": "S-8", "customer": "c"}, version=1)
    # three runs wait on hold; `stay` is still queued at reserve (status running), so --where skips it
    for _ in range(3):
        [lease] = world.svc.claim("w-1", ["stock.reserve"], limit=1, lease_ttl=world.svc.unserved_after)
        world.svc.complete(lease.task_id, lease.attempt, lease.fencing, {})
    assert {world.show(r)["status"] for r in [*good, bad]} == {"waiting"}
    assert world.show(stay)["status"] == "running"
    before = world.totals()

    dry = world.repairs.migrate_many(TENANT, "saga", 1, 2, "customer field", status="waiting", dry_run=True)
    assert (dry.runs, dry.migrated, dry.dry_run) == (3, 2, True)
    assert world.totals() == before
    real = world.repairs.migrate_many(TENANT, "saga", 1, 2, "customer field", status="waiting", actor="op")
    assert (real.runs, real.migrated, real.dry_run) == (3, 2, False)
    by_run = {r.run_id: r for r in real.report}
    assert set(by_run) == {*good, bad}
    assert all(by_run[r].ok and by_run[r].problems == [] for r in good)
    assert by_run[bad].ok is False
    assert any("input_schema" in p for p in by_run[bad].problems)
    assert [world.show(r)["definition"]["version"] for r in [*good, bad, stay]] == [2, 2, 1, 1]
    again = world.repairs.migrate_many(TENANT, "saga", 1, 2, "customer field", status="waiting", actor="op")
    assert [r.run_id for r in again.report] == [bad], "migrated runs are no longer on v1"
    world.verify_ok()
