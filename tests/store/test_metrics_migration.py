"""The metrics migration (SQLite 0010, PostgreSQL 0007) gives every unfinished run already stored the
wait kind lockstep itself computes (core/explain.py), finished runs none, and an unreadable snapshot
`unknown` instead of a failed upgrade; on both backends."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

from lockstep.app.service import Service
from lockstep.core.explain import WAIT_KINDS
from lockstep.store import open_store, upgrade_store

from .conftest import T0, Backend

TTL = timedelta(seconds=30)
COLUMNS = (
    "run_id, tenant, definition, version, status, seq, current_step, snapshot, last_hash, start_key, "
    "request_digest, created_at, updated_at"
)
CALL: dict[str, Any] = {"id": "call", "activity": "a.call", "timeout": "30s"}


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> Any:
        return self.now


def _one_of_each(svc: Service, clock: Clock) -> None:
    """Runs waiting in every way a run can wait, and a finished one."""
    retry = {"max_attempts": 3, "initial_interval": "1m"}
    svc.publish("acme", {"name": "call", "steps": [{**CALL, "retry": retry}]})
    svc.publish("acme", {"name": "nap", "steps": [{"id": "nap", "wait": "1h"}]})
    approval = {"approvers": {"users": ["alice"]}, "quorum": 1, "timeout": "1d"}
    svc.publish("acme", {"name": "ask", "steps": [{"id": "ask", "approval": approval}]})
    once = {**CALL, "activity": "a.once", "delivery": "at_most_once"}
    svc.publish("acme", {"name": "once", "steps": [once]})
    comp = {**CALL, "activity": "a.undo", "compensate": {"activity": "a.refund"}}
    failing = {"id": "boom", "activity": "a.boom", "timeout": "30s", "retry": {"max_attempts": 1}}
    svc.publish("acme", {"name": "undo", "steps": [comp, failing]})
    svc.publish("acme", {"name": "done", "steps": [{"id": "fin", "succeed": True}]})
    for name in ("call", "call", "call", "call", "call", "nap", "ask", "once", "undo", "done"):
        svc.start("acme", name, input={})
    first, _running = svc.claim("w", ["a.call"], limit=2, lease_ttl=TTL)
    svc.fail(first.task_id, first.attempt, first.fencing, "Busy", "later")  # waits for its retry
    assert len(svc.claim("w", ["a.once"], limit=1, lease_ttl=TTL)) == 1
    (undo,) = svc.claim("w", ["a.undo"], limit=1, lease_ttl=TTL)
    svc.complete(undo.task_id, undo.attempt, undo.fencing, {})
    (boom,) = svc.claim("w", ["a.boom"], limit=1, lease_ttl=TTL)
    svc.fail(boom.task_id, boom.attempt, boom.fencing, "Boom", "no", retryable=False)  # compensating
    clock.now += timedelta(seconds=31)
    svc.expire_leases()  # the at-most-once attempt: attention; the second call: a retry
    svc.claim("w", ["a.call"], limit=1, lease_ttl=TTL)  # running; two calls stay queued
    queued = svc.runs("acme", wait_kind="queued")
    svc.repairs.pause("acme", queued[0].run_id, "hold on")


def test_the_upgrade_backfills_the_wait_kind_lockstep_computes(
    backend: Backend, url: str, tmp_path: Path
) -> None:
    """Rows copied from a current database into one at the previous schema get, from `db upgrade`,
    exactly the wait_kind the current code wrote; finished runs NULL; a broken snapshot NULL."""
    source = open_store(f"sqlite:///{tmp_path / 'now.db'}")
    clock = Clock()
    try:
        svc = Service(source, clock=clock)
        svc.principals.create_tenant("acme")
        _one_of_each(svc, clock)
    finally:
        source.close()
    with sqlite3.connect(tmp_path / "now.db") as conn:
        rows = conn.execute(f"SELECT {COLUMNS}, wait_kind FROM runs ORDER BY run_id").fetchall()
    expected = {r[0]: r[-1] for r in rows}
    assert set(expected.values()) >= {"queued", "running", "retry", "timer", "approval", "attention"}
    assert {"paused", "compensating", None} <= set(expected.values())
    assert set(expected.values()) - {None} <= set(WAIT_KINDS)

    metrics = next(m for m in backend.migrations() if m.name == "metrics")
    backend.build_at(url, max(m.version for m in backend.migrations() if m.version < metrics.version))
    with backend.raw(url) as conn:
        marks = ", ".join("?" * 13)
        for r in rows:
            backend.run(conn, f"INSERT INTO runs ({COLUMNS}) VALUES ({marks})", list(r[:-1]))
        broken = list(rows[0][:-1])
        broken[0], broken[4], broken[7] = "r-broken-00", "running", '{"not json'  # ids end in hex
        backend.run(conn, f"INSERT INTO runs ({COLUMNS}) VALUES ({marks})", broken)
    assert any("metrics" in m for m in upgrade_store(url))
    got = dict(backend.fetch(url, "SELECT run_id, wait_kind FROM runs"))
    assert got.pop("r-broken-00") is None
    assert got == expected
