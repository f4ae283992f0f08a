"""Migrations that need approval, on both backends: `migrate` of a run of a version whose target says
`migration: requires_approval` makes one pending request (visible in the approvers' inbox) instead of
migrating; a quorum grants it and every run of it migrates (WorkflowMigrated names the request and its
decisions); a rejection or the expiry leaves the runs as they were; the operator who asked can never
decide it; another tenant's approver gets 404; a bulk migration makes one request for its batch, and a
run that finished before the approval is reported, not forced. Applying is idempotent."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import MISSING

from lockstep.app.principals import Principal
from lockstep.app.service import Service
from lockstep.core.commands import MigrateRun
from lockstep.errors import Conflict, Forbidden, Gone, NotFound, Refused

from .conftest import FakeClock, Raw

V1: dict[str, Any] = {
    "name": "po",
    "steps": [
        {"id": "hold", "wait": "1h"},
        {"id": "ship", "activity": "ship.send", "timeout": "10s"},
    ],
}
V2: dict[str, Any] = {
    **V1,
    "migration": {
        "requires_approval": {
            "approvers": {"users": ["alice", "olga"], "groups": ["finance"]},
            "quorum": 2,
            "timeout": "1d",
        }
    },
    "steps": [*V1["steps"], {"id": "notify", "activity": "mail.send", "timeout": "10s"}],
}
# Version 3 says nothing: migrating v2's runs to it still needs v2's approval.
V3: dict[str, Any] = {
    **V1,
    "steps": [*V1["steps"], {"id": "audit", "activity": "audit.log", "timeout": "5s"}],
}


def me(svc: Service, name: str, tenant: str = "acme") -> Principal:
    p = svc.principals.principal(tenant, name)
    assert p is not None
    return p


@pytest.fixture
def world(svc: Service) -> Service:
    """Tenant acme with approvers alice, bob (finance) and carol (not named), operator olga (also an
    approver named by the policy: the self-approval attack), and po v1, v2 published; tenant evil with
    its own approver mallory."""
    p = svc.principals
    p.create_tenant("acme")
    p.create_user("acme", "alice", ["approver"], [])
    p.create_user("acme", "bob", ["approver"], ["finance"])
    p.create_user("acme", "carol", ["approver"], [])
    p.create_user("acme", "olga", ["operator", "approver"], [])
    p.create_tenant("evil")
    p.create_user("evil", "mallory", ["approver"], ["finance"])
    svc.publish("acme", V1)
    svc.publish("acme", V2)
    return svc


def migrations_of(svc: Service, run_id: str) -> list[dict[str, Any]]:
    return [e.data for e in svc.events("acme", run_id) if e.type == "WorkflowMigrated"]


def actions(svc: Service) -> list[tuple[str, str, str | None]]:
    rows = svc.audit.page("acme", limit=500).items
    return [(r.action, r.outcome, r.actor) for r in reversed(rows) if r.action.startswith("migration.")]


def test_granted_by_a_quorum_migrates_and_the_event_names_the_request(world: Service) -> None:
    """Pending until two approvers decide; then the run is on v2 and WorkflowMigrated names the request
    and both decisions; the inbox lists it with what it is and forgets it once decided."""
    run = world.start("acme", "po", version=1).run_id
    plan = world.repairs.migrate("acme", run, 2, "add the notification", actor="olga")
    assert plan.ok
    assert plan.status is MISSING
    request = plan.request
    assert request is not None
    assert request.status == "pending"
    assert [r.run_id for r in request.runs] == [run]
    assert request.requested_by == "olga"
    assert world.show("acme", run).definition.version == 1
    assert not migrations_of(world, run)
    (item,) = world.approvals.inbox(me(world, "alice"))
    assert item.kind == "migration"
    assert item.request_id == request.request_id
    assert item.migration is not None
    assert (item.migration.runs, item.migration.from_version, item.migration.to_version) == ([run], 1, 2)
    assert item.migration.reason == "add the notification"
    assert "asked by olga" in str(item.details)
    assert world.approvals.inbox(me(world, "olga")) == []  # the operator who asked is never asked
    assert world.approvals.inbox(me(world, "carol")) == []  # not named by the policy
    after = world.approvals.decide_by_request(me(world, "alice"), request.request_id, "approve", "fine")
    assert after.status == "pending"  # type: ignore[union-attr]
    assert world.approvals.inbox(me(world, "alice")) == []
    done = world.approvals.decide_by_request(me(world, "bob"), request.request_id, "approve")
    assert done.status == "applied"  # type: ignore[union-attr]
    assert [(r.outcome, r.detail) for r in done.runs] == [("migrated", None)]  # type: ignore[union-attr]
    assert world.show("acme", run).definition.version == 2
    (event,) = migrations_of(world, run)
    assert event["request_id"] == request.request_id
    assert event["actor"] == "olga"
    assert [(d["approver"], d["decision"]) for d in event["decisions"]] == [
        ("alice", "approve"),
        ("bob", "approve"),
    ]
    assert world.approvals.inbox(me(world, "bob")) == []
    assert all(r.ok for r in world.verify())
    assert actions(world) == [
        ("migration.request", "ok", "olga"),
        ("migration.decide", "ok", "alice"),
        ("migration.decide", "ok", "bob"),
        ("migration.apply", "ok", "olga"),
    ]


def test_rejected_leaves_the_run_unchanged_and_is_audited(world: Service, raw: Raw) -> None:
    """One rejection refuses the request: no event on the run, the refusal in the request and the audit
    log; deciding it again is 409."""
    run = world.start("acme", "po", version=1).run_id
    before = raw.fetch("SELECT COUNT(*) FROM events WHERE run_id = ?", run)
    request = world.repairs.migrate("acme", run, 2, "add the notification", actor="olga").request
    assert request is not None
    out = world.approvals.decide_by_request(me(world, "alice"), request.request_id, "reject", "not now")
    assert out.status == "rejected"  # type: ignore[union-attr]
    assert [r.outcome for r in out.runs] == ["rejected"]  # type: ignore[union-attr]
    assert raw.fetch("SELECT COUNT(*) FROM events WHERE run_id = ?", run) == before
    assert world.show("acme", run).definition.version == 1
    with pytest.raises(Conflict) as closed:
        world.approvals.decide_by_request(me(world, "bob"), request.request_id, "approve")
    assert closed.value.code == "not_waiting"
    assert ("migration.reject", "ok", "alice") in actions(world)
    assert world.migrations.run_pass() == 0
    assert world.show("acme", run).definition.version == 1


def test_expired_request_changes_nothing_lazily_or_by_the_pass(world: Service, clock: FakeClock) -> None:
    """Past its timeout a decision is 410 and marks it expired; the scheduler's pass expires another;
    neither run moves, and neither request is in an inbox any more."""
    a, b = world.start("acme", "po", version=1).run_id, world.start("acme", "po", version=1).run_id
    ra = world.repairs.migrate("acme", a, 2, "r", actor="olga").request
    rb = world.repairs.migrate("acme", b, 2, "r", actor="olga").request
    assert ra is not None
    assert rb is not None
    world.approvals.decide_by_request(me(world, "alice"), rb.request_id, "approve")
    clock.advance(days=1, seconds=1)
    assert world.approvals.inbox(me(world, "bob")) == []
    with pytest.raises(Gone) as late:
        world.approvals.decide_by_request(me(world, "bob"), ra.request_id, "approve")
    assert late.value.code == "expired"
    assert world.migrations.request("acme", ra.request_id).status == "expired"
    assert world.migrations.run_pass() == 1
    assert world.migrations.request("acme", rb.request_id).status == "expired"
    assert [r.outcome for r in world.migrations.request("acme", rb.request_id).runs] == ["expired"]
    assert {world.show("acme", x).definition.version for x in (a, b)} == {1}
    assert [x[0] for x in actions(world)].count("migration.expire") == 2


def test_the_operator_who_asked_can_never_approve_their_own_migration(world: Service) -> None:
    """Attack: olga asks, then approves with her own approver role (she is named by the policy): 403
    `requester`, recorded as refused; even with one more approver the quorum is not met by her."""
    run = world.start("acme", "po", version=1).run_id
    request = world.repairs.migrate("acme", run, 2, "mine", actor="olga").request
    assert request is not None
    with pytest.raises(Forbidden) as refused:
        world.approvals.decide_by_request(me(world, "olga"), request.request_id, "approve")
    assert refused.value.code == "requester"
    assert world.migrations.request("acme", request.request_id).decisions == []
    world.approvals.decide_by_request(me(world, "alice"), request.request_id, "approve")
    assert world.migrations.request("acme", request.request_id).status == "pending"
    assert ("migration.decide", "refused", "olga") in actions(world)
    assert world.show("acme", run).definition.version == 1


def test_an_ungranted_migration_is_refused_by_the_core_whatever_the_caller(world: Service) -> None:
    """Attack below the app: a MigrateRun without a request, or with the operator's own approvals, is
    refused by the state machine (approval_required / requester); the run stays on v1."""
    run = world.start("acme", "po", version=1).run_id
    target = world.kernel.definition("acme", "po", 2)
    with pytest.raises(Refused) as plain:
        world.command(run, MigrateRun(target, 2, (), "sneaky", "olga"), "acme")
    assert plain.value.code == "approval_required"
    mine = (
        {"approver": "olga", "decision": "approve", "groups": []},
        {"approver": "bob", "decision": "approve", "groups": ["finance"]},
    )
    with pytest.raises(Refused) as own:
        world.command(run, MigrateRun(target, 2, (), "sneaky", "olga", "mig_" + "0" * 20, mine), "acme")
    assert own.value.code == "requester"
    one = ({"approver": "bob", "decision": "approve", "groups": ["finance"]},)
    with pytest.raises(Refused) as short:
        world.command(run, MigrateRun(target, 2, (), "sneaky", "olga", "mig_" + "0" * 20, one), "acme")
    assert short.value.code == "approval_required"
    assert world.show("acme", run).definition.version == 1


def test_another_tenants_approver_gets_404_and_never_sees_it(world: Service) -> None:
    """Attack: mallory (tenant evil, in a group named finance too) decides acme's request by its id: 404,
    as for an id that does not exist; evil's inbox does not list it; the request stays pending."""
    run = world.start("acme", "po", version=1).run_id
    request = world.repairs.migrate("acme", run, 2, "r", actor="olga").request
    assert request is not None
    assert world.approvals.inbox(me(world, "mallory", "evil")) == []
    for rid in (request.request_id, "mig_" + "f" * 20):
        with pytest.raises(NotFound):
            world.approvals.decide_by_request(me(world, "mallory", "evil"), rid, "approve")
    with pytest.raises(NotFound):
        world.migrations.request("evil", request.request_id)
    assert world.migrations.request("acme", request.request_id).decisions == []


def test_single_decision_per_approver_and_only_the_named(world: Service) -> None:
    """A second decision by alice is 409; carol (an approver the policy does not name) is 403."""
    run = world.start("acme", "po", version=1).run_id
    request = world.repairs.migrate("acme", run, 2, "r", actor="olga").request
    assert request is not None
    world.approvals.decide_by_request(me(world, "alice"), request.request_id, "approve")
    with pytest.raises(Conflict) as twice:
        world.approvals.decide_by_request(me(world, "alice"), request.request_id, "reject")
    assert twice.value.code == "already_decided"
    with pytest.raises(Forbidden) as outside:
        world.approvals.decide_by_request(me(world, "carol"), request.request_id, "approve")
    assert outside.value.code == "not_an_approver"
    with pytest.raises(Conflict) as again:
        world.repairs.migrate("acme", run, 2, "again", actor="olga")
    assert again.value.code == "migration_pending"


def test_bulk_makes_one_request_and_runs_that_finished_or_moved_meanwhile_are_reported(
    world: Service, clock: FakeClock
) -> None:
    """Four runs, one request; before the approval one run completes, one is cancelled and one is
    migrated to v3 directly (v1 to v3 needs no approval): the last migrates, the others are reported
    skipped with why, and nothing is forced onto them."""
    world.publish("acme", V3)
    runs = [world.start("acme", "po", version=1).run_id for _ in range(4)]
    bulk = world.repairs.migrate_many("acme", "po", 1, 2, "add the notification", actor="olga")
    assert bulk.request is not None
    assert bulk.migrated == 0
    assert all(o.ok for o in bulk.report)
    assert sorted(r.run_id for r in bulk.request.runs) == sorted(runs)
    assert bulk.request.bulk
    (item,) = world.approvals.inbox(me(world, "alice"))
    assert item.migration is not None
    assert sorted(item.migration.runs) == sorted(runs)
    world.cancel("acme", runs[0], reason="customer withdrew")
    world.repairs.migrate("acme", runs[2], 3, "audit first", actor="olga")
    clock.advance(hours=1, seconds=1)
    world.fire_due_timers()
    leases = [
        x
        for x in world.claim("w1", ["ship.send"], limit=10, lease_ttl=timedelta(seconds=30))
        if x.task_id.startswith(runs[1])
    ]
    (lease,) = leases
    assert world.complete(lease.task_id, lease.attempt, lease.fencing, {"shipped": True}) == "accepted"
    assert world.show("acme", runs[1]).status == "completed"
    world.approvals.decide_by_request(me(world, "alice"), bulk.request.request_id, "approve")
    done = world.approvals.decide_by_request(me(world, "bob"), bulk.request.request_id, "approve")
    outcomes = {r.run_id: (r.outcome, r.detail or "") for r in done.runs}  # type: ignore[union-attr]
    assert outcomes[runs[0]][0] == "skipped"
    assert "cancelled" in outcomes[runs[0]][1]
    assert outcomes[runs[1]][0] == "skipped"
    assert "completed" in outcomes[runs[1]][1]
    assert outcomes[runs[2]][0] == "skipped"
    assert "moved to version 3" in outcomes[runs[2]][1]
    assert outcomes[runs[3]][0] == "migrated"
    assert [world.show("acme", r).definition.version for r in runs] == [1, 1, 3, 2]
    assert [len(migrations_of(world, r)) for r in runs] == [0, 0, 1, 1]
    assert done.status == "applied"  # type: ignore[union-attr]


def test_applying_is_idempotent_after_a_failure_between_approval_and_application(
    world: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The approval commits first; when applying fails right after it (the process died, the database
    went away), the request stays approved and the pass applies it once: a second pass, or a second
    apply, migrates nothing again."""
    runs = [world.start("acme", "po", version=1).run_id for _ in range(2)]
    bulk = world.repairs.migrate_many("acme", "po", 1, 2, "r", actor="olga")
    assert bulk.request is not None
    rid = bulk.request.request_id
    real = world.migrations.apply
    from lockstep.app.migrations import decide as decide_module
    from lockstep.errors import Unavailable

    def broken(self: object, tenant: str, request_id: str) -> int:
        raise Unavailable("the database went away")

    monkeypatch.setattr(decide_module.MigrationApply, "apply", broken)
    world.approvals.decide_by_request(me(world, "alice"), rid, "approve")
    granted = world.approvals.decide_by_request(me(world, "bob"), rid, "approve")
    assert granted.status == "approved"  # type: ignore[union-attr]
    monkeypatch.undo()
    assert [world.show("acme", r).definition.version for r in runs] == [1, 1]
    assert world.migrations.run_pass() == 2
    assert world.migrations.run_pass() == 0
    assert real("acme", rid) == 0
    assert world.migrations.request("acme", rid).status == "applied"
    assert [len(migrations_of(world, r)) for r in runs] == [1, 1]


def test_a_version_that_requires_approval_keeps_its_runs_from_moving_without_it(world: Service) -> None:
    """v3 says nothing, v2 does: migrating a v2 run to v3 needs v2's approval (publishing a version
    without the block is no way around it); a migration from v1 to a plain version needs none."""
    world.publish("acme", V3)
    v2run = world.start("acme", "po", version=2).run_id
    plan = world.repairs.migrate("acme", v2run, 3, "r", actor="olga")
    assert plan.request is not None
    assert plan.request.approvers.version == 2
    v1run = world.start("acme", "po", version=1).run_id
    direct = world.repairs.migrate("acme", v1run, 3, "r", actor="olga")
    assert direct.request is MISSING
    assert world.show("acme", v1run).definition.version == 3


def test_publish_checks_the_policy_with_paths_and_warns_of_approvers_it_lacks(world: Service) -> None:
    """Bad input is refused with the path of each problem, nothing published; approvers the tenant
    does not have are a warning at `migration.requires_approval.approvers`."""
    from lockstep.errors import InvalidInput

    bad = {**V1, "migration": {"requires_approval": {"approvers": {"user": ["x"]}, "quorum": 0}, "when": 1}}
    with pytest.raises(InvalidInput) as refused:
        world.publish("acme", bad)
    text = str(refused.value)
    for where in (
        "migration: unknown key `when`",
        "migration.requires_approval.approvers: unknown key `user` (did you mean `users`?)",
        "migration.requires_approval.quorum: must be an integer >= 1",
        "migration.requires_approval.timeout: required",
    ):
        assert where in text, text
    ghost = {**V1, "migration": {"requires_approval": {"approvers": {"users": ["zed"]}, "timeout": "1h"}}}
    published = world.publish("acme", ghost)
    assert published.version == 3  # the refused document took no version
    (warning,) = published.warnings
    assert warning.path == "migration.requires_approval.approvers"
    assert "no user zed in tenant acme" in warning.message
