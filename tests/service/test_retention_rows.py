"""A purge leaves nothing of a run behind, on both backends: the tables are read from the schema itself
(sqlite_master, information_schema), so a table added later is checked without anyone remembering to
add it here. A run that used every feature (an activity with sealed input and output, a durable timer,
an approval with links, a decision and its notification, a released hold, its data key) plus task rows
the core no longer refers to (ready, leased, dead) is purged by the retention pass, another by an
operator; afterwards no table but the tombstones and the audit log holds a row of either. (Its last step
runs a child run, so the outbox between a parent and its child is covered too.)"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from lockstep.app.keys import create_key_file
from lockstep.app.principals import Principal
from lockstep.app.service import Service
from lockstep.core.limits import ServerLimits
from lockstep.store import Store

from .conftest import FakeClock, Raw

TTL = timedelta(seconds=30)
# Where a run may still be named after its purge: what the purge itself writes, and the audit log.
KEPT = {"tombstones", "audit"}
# Rows a run has only while it waits (an event wait's index row goes with the event, in its command):
# a finished run never has one, so none is left to purge; the purge still clears the table.
TRANSIENT = {"event_waits"}
EVERYTHING: dict[str, Any] = {
    "name": "everything",
    "input_schema": {
        "type": "object",
        "properties": {"card": {"type": "string", "x-lockstep-sensitive": True}},
    },
    "steps": [
        {
            "id": "charge",
            "activity": "card.charge",
            "input": {"card": "${input.card}"},
            "output_sensitive": ["/token"],
            "timeout": "10s",
        },
        {"id": "settle", "wait": "1s"},
        {
            "id": "approve",
            "approval": {
                "approvers": {"users": ["alice"]},
                "quorum": 1,
                "timeout": "1h",
                "details": "Charge card ${input.card}",
            },
        },
        {"id": "sub", "run": {"definition": "quick"}},
        {
            "id": "arrive",
            "wait_event": {"name": "arrived", "key": "${input.ref}", "timeout": "1h", "callback": True},
        },
    ],
}
QUICK: dict[str, Any] = {"name": "quick", "steps": [{"id": "done", "succeed": True}]}
# Version 2 of EVERYTHING: migrating onto it needs alice's approval (a request the run is named in).
EVERYTHING_V2: dict[str, Any] = {
    **EVERYTHING,
    "migration": {"requires_approval": {"approvers": {"users": ["alice"]}, "timeout": "1h"}},
}


@pytest.fixture
def sealed(store: Store, clock: FakeClock, tmp_path: Path) -> Service:
    """The service with a key (the run's sensitive fields are sealed under a run key), tenant acme
    (retention 7 days) with alice, and EVERYTHING published."""
    svc = Service(
        store,
        clock=clock,
        keys=create_key_file(tmp_path / "lockstep.key"),
        server_limits=ServerLimits({"egress_allow_loopback": 1}),
    )
    svc.principals.create_tenant("acme")
    svc.principals.create_user("acme", "alice", ["approver"], [])
    svc.publish("acme", QUICK)
    svc.publish("acme", EVERYTHING)
    svc.publish("acme", EVERYTHING_V2)
    svc.principals.set_tenant("acme", retention=7 * 86400, actor="ops")
    # The run's end writes a webhook delivery (its outbox row): a receiver on loopback (test-only).
    svc.egress.set(
        "acme", {"allow_hosts": ["127.0.0.1"], "allow_http": True, "allow_loopback": True}, actor="ops"
    )
    svc.webhooks.subscribe("acme", "http://127.0.0.1:9/hook", ["run.completed"], "ops")
    return svc


def tables(raw: Raw) -> dict[str, list[str]]:
    """Every table of the schema and its columns, as the database lists them (PostgreSQL's event
    partitions left out: their parent `events` is read, which reads them)."""
    if raw.backend == "sqlite":
        names = [r[0] for r in raw.fetch("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {n: [r[1] for r in raw.fetch(f"PRAGMA table_info({n})")] for n in names}
    names = [
        r[0]
        for r in raw.fetch(
            "SELECT t.table_name FROM information_schema.tables t WHERE t.table_schema = current_schema() "
            "AND t.table_type = 'BASE TABLE' AND NOT EXISTS (SELECT 1 FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE c.relname = t.table_name)"
        )
    ]
    columns = "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
    return {n: [r[0] for r in raw.fetch(columns + "AND table_name = ?", n)] for n in names}


def owned_keys(raw: Raw, schema: dict[str, list[str]], run_id: str) -> dict[str, set[Any]]:
    """The ids of the run's rows (request_id, link_id, task_id, ...) in every table keyed by run: rows
    of other tables found through them (a decision through its request) belong to the run too."""
    keys: dict[str, set[Any]] = {}
    for table, cols in schema.items():
        if "run_id" not in cols:
            continue
        for col in (c for c in cols if c.endswith("_id") and c != "run_id"):
            found = raw.fetch(f"SELECT {col} FROM {table} WHERE run_id = ? AND {col} IS NOT NULL", run_id)
            keys.setdefault(col, set()).update(r[0] for r in found)
    return keys


def rows_of_run(
    raw: Raw, schema: dict[str, list[str]], run_id: str, keys: dict[str, set[Any]]
) -> dict[str, int]:
    """Per table, the rows that name the run: by run_id, by one of its rows' ids, or anywhere in any
    column's text (a snapshot, a payload, a generated key)."""
    counts: dict[str, int] = {}
    for table, cols in schema.items():
        if table.startswith("sqlite_"):
            continue
        named = " OR ".join(f"CAST({c} AS TEXT) LIKE ?" for c in cols)
        params: list[Any] = [f"%{run_id}%"] * len(cols)
        for col, values in keys.items():
            if col in cols and values:
                named += f" OR {col} IN ({', '.join('?' * len(values))})"
                params += sorted(values)
        n = int(raw.fetch(f"SELECT COUNT(*) FROM {table} WHERE {named}", *params)[0][0])
        if n:
            counts[table] = n
    return counts


def run_everything(svc: Service, clock: FakeClock, card: str) -> str:
    """One run of EVERYTHING to its end: charged, settled, approved through a link by alice."""
    run_id = svc.start("acme", "everything", input={"card": card, "ref": f"ref-{card}"}, version=1).run_id
    asked = svc.repairs.migrate("acme", run_id, 2, "move it", actor="ops").request  # a migration request
    assert asked
    svc.approvals.decide_by_request(Principal("acme", "alice", ("approver",), ()), asked.request_id, "reject")
    (lease,) = svc.claim("w1", ["card.charge"], limit=1, lease_ttl=TTL)
    assert svc.complete(lease.task_id, lease.attempt, lease.fencing, {"token": f"TOK-{card}"}) == "accepted"
    clock.advance(seconds=2)
    svc.fire_due_timers()
    svc.approvals.mint("acme", run_id, "approve", "alice")  # a second link, never used
    token = svc.approvals.mint("acme", run_id, "approve", "alice").token
    svc.approvals.decide(Principal("acme", "alice", ("approver",), ()), token, "approve")
    svc.run_children()  # the child starts (and completes at once)
    svc.run_children()  # its end reaches the parent
    svc.callbacks.mint(Principal("acme", "ops", ("operator",), ()), run_id, "arrive")  # never used
    publisher = Principal("acme", "partner", ("publisher",), ())
    svc.event_deliveries.publish(publisher, "arrived", f"ref-{card}", {"ok": True}, f"evt-{card}")
    assert svc.show("acme", run_id).status == "completed"
    svc.retention.hold_run("acme", run_id, "case 12", "ops")
    svc.retention.release_run("acme", run_id, "case 12 closed", "ops")
    return run_id


def orphan_tasks(raw: Raw, run_id: str) -> None:
    """Task rows of the finished run that nothing refers to any more, one per state a task can be left
    in (ready or leased: never closed; dead: dead-lettered), copied from its real task row."""
    cols = (
        "tenant, run_id, step, attempt, kind, activity, queue, input, idempotency_key, definition, "
        "version, delivery, timeout_ms, available_at, fencing, lease_owner, lease_expires_at, deadline, "
        "created_at, priority"
    )
    ((task_id,),) = raw.fetch("SELECT task_id FROM tasks WHERE run_id = ?", run_id)
    for status in ("ready", "leased", "dead"):
        raw.execute(
            f"INSERT INTO tasks (task_id, status, {cols}) SELECT task_id || ?, ?, {cols} FROM tasks "
            "WHERE task_id = ?",
            f"-orphan-{status}",
            status,
            task_id,
        )


def test_a_purge_deletes_every_row_of_a_run_in_every_table(sealed: Service, clock: FakeClock, raw: Raw):
    """Before: every table with a run_id column (but the tombstones) has rows of each run, so the run
    really used every feature; after the retention pass (one run) and an operator's purge (the other),
    only the tombstone and the audit log name either run, in any column of any table."""
    schema = tables(raw)
    by_run = {t for t, cols in schema.items() if "run_id" in cols}
    assert {"runs", "events", "tasks", "timers", "approval_links", "run_keys"} <= by_run
    runs = [run_everything(sealed, clock, card) for card in ("4111-ONE", "4111-TWO")]
    keys = {}
    for run_id in runs:
        orphan_tasks(raw, run_id)
        keys[run_id] = owned_keys(raw, schema, run_id)
        before = rows_of_run(raw, schema, run_id, keys[run_id])
        untouched = by_run - KEPT - TRANSIENT - set(before)
        assert not untouched, f"tables the run never touched: {untouched}"
        assert before["approval_decisions"] == 1
        assert raw.fetch("SELECT COUNT(*) FROM tasks WHERE run_id = ?", run_id) == [(4,)]
    sealed.retention.purge_run("acme", runs[1], "erasure request #7", "dana")
    clock.advance(days=8)
    while sealed.retention.purge.run_pass().more:
        pass
    states = {t.run_id: t.state for t in sealed.retention.tombstones()}
    assert states == {**dict.fromkeys(runs, "purged"), **states}  # each child run is purged too
    assert len(states) == 4
    assert set(states.values()) == {"purged"}
    for run_id in runs:
        left = rows_of_run(raw, schema, run_id, keys[run_id])
        assert set(left) <= KEPT, {t: n for t, n in left.items() if t not in KEPT}
        assert left["tombstones"] == 1
    assert all(r.ok for r in sealed.verify())
    assert sealed.retention.check_tombstones() == []
