"""Retention through the service, on both backends with a fake clock: the purge deletes exactly the
finished runs past their tenant's retention (never a held or unfinished one, never another tenant's),
in bounded batches that resume after a failure; a purged run answers Gone with its tombstone; holds,
releases and purges are audited; `verify` stays green."""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta
from typing import Any

import pytest

from lockstep.app import purge as purge_module
from lockstep.app.principals import Principal
from lockstep.app.service import Service
from lockstep.core.timeutil import iso, parse_iso
from lockstep.errors import Conflict, Gone, InvalidInput, NotFound, Refused
from lockstep.store import AuditFilter, Store

from .conftest import T0, FakeClock, Raw

QUICK: dict[str, Any] = {"name": "quick", "steps": [{"id": "nap", "wait": "1s"}]}
LONG: dict[str, Any] = {"name": "long", "steps": [{"id": "nap", "wait": "30d"}]}
ASK: dict[str, Any] = {
    "name": "ask",
    "steps": [
        {"id": "approve", "approval": {"approvers": {"users": ["alice"]}, "quorum": 1, "timeout": "1h"}}
    ],
}
DAY = timedelta(days=1)
RUN_TABLES = ("runs", "events", "tasks", "timers", "approval_requests", "approval_links", "notifications")


@pytest.fixture
def world(svc: Service) -> Service:
    """Tenants acme (retention 7 days) and globex (no retention), each with the test definitions."""
    for tenant in ("acme", "globex"):
        svc.principals.create_tenant(tenant)
        svc.principals.create_user(tenant, "alice", ["approver"], [])
        for doc in (QUICK, LONG, ASK):
            svc.publish(tenant, doc)
    svc.principals.set_tenant("acme", retention=7 * 86400, actor="ops")
    return svc


def finished(svc: Service, clock: FakeClock, tenant: str, n: int) -> list[str]:
    """`n` runs of `quick` started now and completed 1 s later (the clock moves on 1 s)."""
    ids = [svc.start(tenant, "quick").run_id for _ in range(n)]
    clock.advance(seconds=1)
    svc.fire_due_timers()
    assert {svc.show(tenant, r).status for r in ids} == {"completed"}
    return ids


def rows_of(raw: Raw, run_id: str) -> dict[str, int]:
    return {t: raw.fetch(f"SELECT COUNT(*) FROM {t} WHERE run_id = ?", run_id)[0][0] for t in RUN_TABLES}


def purge_all(svc: Service) -> int:
    passes = 0
    while True:
        passes += 1
        if not svc.retention.purge.run_pass().more:
            return passes


def test_the_purge_deletes_exactly_the_finished_runs_past_retention(
    world: Service, clock: FakeClock, raw: Raw
):
    """Old finished runs of the tenant with a retention go; recent ones, unfinished ones and those of a
    tenant without retention stay; each purged run leaves one tombstone and nothing else."""
    old = finished(world, clock, "acme", 3)
    waiting = world.start("acme", "long").run_id
    other = finished(world, clock, "globex", 2)
    clock.advance(days=6)
    recent = finished(world, clock, "acme", 2)
    clock.advance(days=1, seconds=1)  # `old` is 7 days and a few seconds past its end, `recent` 1 day
    report = world.retention.purge.run_pass()
    assert (report.tombstoned, report.purged, report.more) == (3, 3, False)
    assert report.rows_deleted == 3 * 5  # 4 events and 1 timer row each
    for run_id in old:
        assert rows_of(raw, run_id) == dict.fromkeys(RUN_TABLES, 0)
        with pytest.raises(Gone):
            world.show("acme", run_id)
    for run_id in [*recent, waiting]:
        assert world.show("acme", run_id).run_id == run_id
    for run_id in other:
        assert world.show("globex", run_id).status == "completed"
    assert sorted(t.run_id for t in world.retention.tombstones()) == sorted(old)
    assert {r.run_id for r in world.runs("acme")} == {*recent, waiting}
    assert all(r.ok for r in world.verify())
    assert world.retention.check_tombstones() == []
    assert world.retention.purge.run_pass().tombstoned == 0  # nothing else is due


def test_a_purged_run_answers_gone_with_its_tombstone_and_another_tenant_not_found(
    world: Service, clock: FakeClock
):
    """show, events, cancel and verify of a purged run raise Gone saying when, by whom and why (the
    refused cancel is audited); for any other tenant the run does not exist (404), so a tombstone does
    not leak it."""
    (run_id,) = finished(world, clock, "acme", 1)
    state = world.show("acme", run_id)
    clock.advance(days=8)
    world.retention.purge.run_pass()
    for call in (
        lambda: world.show("acme", run_id),
        lambda: world.events("acme", run_id),
        lambda: world.cancel("acme", run_id, "too late"),
        lambda: world.verify(run_id, tenant="acme"),
    ):
        with pytest.raises(Gone) as gone:
            call()
        assert gone.value.code == "purged"
        assert "retention 7d" in str(gone.value)
        assert "purged at" in str(gone.value)
        assert gone.value.extra["events"] == state.seq
        assert gone.value.extra["finished_at"] == state.finished_at
        assert gone.value.extra["purged_by"] == "retention"
    with pytest.raises(NotFound):
        world.show("globex", run_id)
    with pytest.raises(NotFound):
        world.retention.tombstone("globex", run_id)
    assert world.retention.tombstone("acme", run_id).status == "completed"
    with world.read() as tx:
        refused = [r for r in tx.audit_page("acme", AuditFilter(), None, 100) if r.action == "run.cancel"]
    assert [(r.outcome, r.target, r.detail.get("code")) for r in refused] == [("refused", run_id, "purged")]


def test_held_runs_and_held_tenants_are_never_purged_until_released(world: Service, clock: FakeClock):
    """A hold placed while a run still runs keeps it after it finished; a tenant hold keeps them all;
    after the releases the next pass purges them."""
    running = world.start("acme", "quick").run_id
    world.retention.hold_run("acme", running, "litigation 2025-17", "alice")
    clock.advance(seconds=1)
    world.fire_due_timers()
    assert world.show("acme", running).status == "completed"
    others = finished(world, clock, "acme", 2)
    world.retention.hold_tenant("acme", "regulator audit", "carol")
    clock.advance(days=8)
    assert world.retention.purge.run_pass().tombstoned == 0
    status = world.retention.status("acme").tenants[0]
    assert status.tenant_hold is not None
    assert status.tenant_hold.held_by == "carol"
    assert (status.due_now, status.held_runs, status.finished_runs) == (0, 1, 3)
    world.retention.release_tenant("acme", "audit closed", "carol")
    assert world.retention.status("acme").tenants[0].due_now == 2
    assert world.retention.purge.run_pass().tombstoned == 2
    assert world.show("acme", running).status == "completed"
    for run_id in others:
        with pytest.raises(Gone):
            world.show("acme", run_id)
    released = world.retention.release_run("acme", running, "case settled", "bob")
    assert (released.released_by, released.release_reason) == ("bob", "case settled")
    assert world.retention.purge.run_pass().tombstoned == 1
    with pytest.raises(Gone):
        world.show("acme", running)


def test_holds_need_a_reason_one_at_a_time_and_exist_only_for_live_runs(world: Service, clock: FakeClock):
    """No reason, a second hold, releasing nothing, another tenant's run, a purged run: each refused."""
    (run_id,) = finished(world, clock, "acme", 1)
    with pytest.raises(InvalidInput, match="reason"):
        world.retention.hold_run("acme", run_id, "  ", "alice")
    world.retention.hold_run("acme", run_id, "case 1", "alice")
    with pytest.raises(Conflict, match=r"already held since .* by alice"):
        world.retention.hold_run("acme", run_id, "case 2", "bob")
    with pytest.raises(NotFound):
        world.retention.hold_run("globex", run_id, "case 3", "bob")
    with pytest.raises(NotFound, match="no active hold"):
        world.retention.release_tenant("acme", "nothing held", "bob")
    with pytest.raises(NotFound, match="does not exist"):
        world.retention.hold_tenant("nosuch", "typo", "bob")
    world.retention.release_run("acme", run_id, "done", "alice")
    with pytest.raises(NotFound, match="no active hold"):
        world.retention.release_run("acme", run_id, "again", "alice")
    clock.advance(days=8)
    world.retention.purge.run_pass()
    with pytest.raises(Gone):
        world.retention.hold_run("acme", run_id, "too late", "alice")


def test_holds_releases_purges_and_retention_changes_are_audited(
    world: Service, clock: FakeClock, store: Store
):
    """Each writes one audit row in its own transaction: who, what, why."""
    (run_id,) = finished(world, clock, "acme", 1)
    world.retention.hold_run("acme", run_id, "case 9", "alice")
    world.retention.release_run("acme", run_id, "case 9 closed", "bob")
    clock.advance(days=8)
    world.retention.purge.run_pass()
    with store.read() as tx:
        log = [asdict(r) for r in reversed(tx.audit_page("acme", AuditFilter(), None, 50))]
    rows = [(r["action"], r["actor"], r["target"]) for r in log if r["action"].startswith("retention.")]
    assert rows == [
        ("retention.set", "ops", "acme"),
        ("retention.hold", "alice", run_id),
        ("retention.release", "bob", run_id),
        ("retention.purge", "retention", "acme"),
    ]
    assert log[-1]["detail"]["runs"] == [run_id]
    assert [r["detail"] for r in log if r["action"] == "retention.set"] == [{"before": None, "after": 604800}]


def test_the_purge_works_in_bounded_batches_and_resumes_after_a_failure(
    world: Service, clock: FakeClock, raw: Raw, monkeypatch: pytest.MonkeyPatch
):
    """With 2 runs and 3 rows per transaction a pass stops after its batches and says more is left; a
    pass that fails half-way leaves tombstones 'purging' that the next one completes."""
    ids = finished(world, clock, "acme", 5)
    clock.advance(days=8)
    small = purge_module.Purge(world.kernel, runs_per_batch=2, rows_per_batch=3)
    first = small.run_pass(max_batches=1)
    assert (first.tombstoned, first.more) == (2, True)
    assert first.rows_deleted <= 3
    calls = {"n": 0}
    real = world.store.write

    def failing_write() -> Any:
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("the process died here")
        return real()

    monkeypatch.setattr(world.store, "write", failing_write)
    with pytest.raises(RuntimeError):
        small.run_pass(max_batches=10)
    monkeypatch.setattr(world.store, "write", real)
    states = {t.state for t in world.retention.tombstones()}
    assert "purging" in states
    passes = 0
    while small.run_pass(max_batches=2).more:
        passes += 1
        assert passes < 20
    assert {t.run_id: t.state for t in world.retention.tombstones()} == dict.fromkeys(ids, "purged")
    for run_id in ids:
        assert rows_of(raw, run_id) == dict.fromkeys(RUN_TABLES, 0)


def test_approval_rows_links_and_notifications_go_with_the_run(world: Service, clock: FakeClock, raw: Raw):
    """A cancelled approval run's request, link, decision and notification rows are deleted too."""
    run_id = world.start("acme", "ask").run_id
    world.approvals.mint("acme", run_id, "approve", "alice")
    alice = Principal("acme", "alice", ("approver",), ())
    token = world.approvals.mint("acme", run_id, "approve", "alice").token
    world.approvals.decide(alice, token, "approve")
    assert world.show("acme", run_id).status == "completed"
    before = rows_of(raw, run_id)
    assert before["approval_requests"] == 1
    assert before["approval_links"] == 2
    assert before["notifications"] >= 1
    decisions = (
        "SELECT COUNT(*) FROM approval_decisions d JOIN approval_requests a USING (request_id) "
        "WHERE a.run_id = ?"
    )
    assert raw.fetch(decisions, run_id) == [(1,)]
    clock.advance(days=8)
    purge_all(world)
    assert rows_of(raw, run_id) == dict.fromkeys(RUN_TABLES, 0)
    assert raw.fetch("SELECT COUNT(*) FROM approval_decisions") == [(0,)]


def test_an_operator_purges_one_finished_unheld_run_now(world: Service, clock: FakeClock, raw: Raw):
    """An erasure request: the run goes at once whatever the retention, the tombstone names the
    operator and the reason; a running or held run is refused, a purged one is Gone."""
    (done,) = finished(world, clock, "globex", 1)
    running = world.start("globex", "long").run_id
    t = world.retention.purge_run("globex", done, "erasure request #88", "dana")
    assert (t.purged_by, t.reason, t.state) == ("dana", "erasure request #88", "purged")
    assert rows_of(raw, done) == dict.fromkeys(RUN_TABLES, 0)
    with pytest.raises(Gone, match="by dana: erasure request #88"):
        world.show("globex", done)
    with pytest.raises(Refused, match="only a finished run is purged"):
        world.retention.purge_run("globex", running, "erasure", "dana")
    (held,) = finished(world, clock, "globex", 1)
    world.retention.hold_run("globex", held, "case 5", "alice")
    with pytest.raises(Refused, match="held since"):
        world.retention.purge_run("globex", held, "erasure", "dana")
    with pytest.raises(Gone):
        world.retention.purge_run("globex", done, "twice", "dana")


def test_status_says_what_is_due_now_and_when_the_next_runs_become_due(world: Service, clock: FakeClock):
    """due_now counts finished unheld runs past retention; next_due_at is the next finish plus retention."""
    first = finished(world, clock, "acme", 2)
    clock.advance(days=2)
    later = finished(world, clock, "acme", 1)
    world.retention.hold_run("acme", first[0], "case 3", "alice")
    clock.advance(days=5, seconds=1)
    st = world.retention.status("acme").tenants[0]
    assert (st.retention, st.retention_seconds, st.finished_runs, st.due_now) == ("7d", 604800, 3, 1)
    finish = world.show("acme", later[0]).finished_at
    assert finish is not None
    assert st.next_due_at == iso(parse_iso(finish) + timedelta(days=7))
    assert [h.run_id for h in st.run_holds] == [first[0]]
    glob = world.retention.status("globex").tenants[0]
    assert (glob.retention, glob.due_now, glob.next_due_at) == (None, 0, None)
    world.retention.purge.run_pass()
    assert world.retention.status("acme").tenants[0].tombstones == {"purging": 0, "purged": 1}
    assert {t.tenant for t in world.retention.status().tenants} == {"acme", "globex"}


def test_retention_settings_are_checked_and_unset_keeps_forever(world: Service, clock: FakeClock):
    """A retention is a positive number of seconds; None removes it and the purge then keeps everything."""
    with pytest.raises(InvalidInput):
        world.principals.set_tenant("acme", retention=-5)
    world.principals.set_tenant("acme", retention=None, actor="ops")
    finished(world, clock, "acme", 1)
    clock.advance(days=400)
    assert world.retention.purge.run_pass().tombstoned == 0
    assert "retention" not in world.principals.tenants()[0].settings
    assert clock.now > T0


def test_verify_reports_a_tombstone_contradicted_by_the_stored_rows(
    world: Service, clock: FakeClock, raw: Raw, backend: str
):
    """A tombstone marked purged behind the triggers' back while events remain is a failed verification."""
    (run_id,) = finished(world, clock, "acme", 1)
    with world.store.write() as tx:
        tx.tombstone_run(run_id, purged_at=iso(clock.now), purged_by="x", reason="y")
    assert world.retention.check_tombstones() == []  # purging, events still there: in progress
    tamper = "UPDATE tombstones SET state = 'purged', done_at = 'x' WHERE run_id = ?"
    if backend == "sqlite":
        raw.execute("DROP TRIGGER tombstones_update_check")
        raw.execute(tamper, run_id)
    else:
        with raw._connect() as conn:
            conn.execute("SET session_replication_role = replica")
            conn.execute(tamper.replace("?", "%s"), (run_id,))
    (bad,) = world.retention.check_tombstones("acme")
    assert (bad.run_id, bad.ok) == (run_id, False)
    assert "still stored" in bad.problems[0]
    assert world.retention.check_tombstones("globex") == []


def test_approval_calls_on_a_purged_run_answer_gone_and_another_tenant_not_found(
    world: Service, clock: FakeClock, store: Store
):
    """Minting a link, deciding from the inbox, listing links, reassigning and the Review page of a
    purged run raise Gone with its tombstone (as show does), the refused decision is audited with code
    purged, the inbox simply leaves the run out; for another tenant the run does not exist."""
    run_id = world.start("acme", "ask").run_id
    world.approvals.mint("acme", run_id, "approve", "alice")
    world.cancel("acme", run_id, "no longer needed")
    clock.advance(days=8)
    purge_all(world)
    alice = Principal("acme", "alice", ("approver",), ())
    for call in (
        lambda: world.approvals.mint("acme", run_id, "approve", "alice"),
        lambda: world.approvals.decide_in_session(alice, run_id, "approve", "approve"),
        lambda: world.approvals.links("acme", run_id),
        lambda: world.approvals.reassign("acme", run_id, "approve", "alice", "bob", "away", "ops"),
        lambda: world.approvals.request_view(alice, run_id, "approve"),
    ):
        with pytest.raises(Gone) as gone:
            call()
        assert gone.value.code == "purged"
        assert "retention 7d" in str(gone.value)
        assert gone.value.extra["run_status"] == "cancelled"
    assert world.approvals.inbox(alice) == []
    with store.read() as tx:
        log = [asdict(r) for r in tx.audit_page("acme", AuditFilter(action="approval.decide"), None, 10)]
    assert [(r["outcome"], r["detail"]["code"], r["detail"]["run_id"]) for r in log] == [
        ("refused", "purged", run_id)
    ]
    bob = Principal("globex", "alice", ("approver",), ())
    for call in (
        lambda: world.approvals.mint("globex", run_id, "approve", "alice"),
        lambda: world.approvals.decide_in_session(bob, run_id, "approve", "approve"),
        lambda: world.approvals.links("globex", run_id),
    ):
        with pytest.raises(NotFound):
            call()


def test_the_inbox_leaves_out_a_run_purged_while_it_is_read(
    world: Service, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
):
    """A request listed as pending whose run finishes and is purged before the inbox reads it is left
    out: the inbox answers the other requests instead of failing with the run's 410."""
    doomed, kept = (world.start("acme", "ask").run_id for _ in range(2))
    real = world.kernel.state
    pending = [doomed]

    def purge_first(tenant: str | None, run_id: str) -> Any:
        if run_id in pending:  # the inbox's first look at the doomed run: it goes just before
            pending.clear()
            world.cancel("acme", doomed, "withdrawn")
            clock.advance(days=8)
            purge_all(world)
        return real(tenant, run_id)

    monkeypatch.setattr(world.kernel, "state", purge_first)
    alice = Principal("acme", "alice", ("approver",), ())
    assert [i.run_id for i in world.approvals.inbox(alice)] == [kept]
    assert world.retention.tombstone("acme", doomed).status == "cancelled"
