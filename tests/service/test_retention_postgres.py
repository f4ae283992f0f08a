"""Retention on PostgreSQL only: whole monthly event partitions are detached and dropped once every run in
them is tombstoned (rows are deleted otherwise, and a backlog defers past months' rows to the drop); a
legal hold and a purge of the same run or tenant never both commit."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from store.pgdb import PgDatabases

from lockstep.app import purge as purge_module
from lockstep.app.service import Service
from lockstep.core.timeutil import iso
from lockstep.store import Store, open_store

from .conftest import FakeClock, Raw
from .test_retention import QUICK, RUN_TABLES, finished, rows_of

JAN = datetime(2025, 1, 10, tzinfo=UTC)


@pytest.fixture
def pg_url(pg_databases: PgDatabases) -> Iterator[str]:
    url = pg_databases.migrated()
    try:
        yield url
    finally:
        pg_databases.release_migrated(url)


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    s = open_store(pg_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(JAN)


@pytest.fixture
def pg(pg_url: str) -> Raw:
    raw = Raw("postgresql", pg_url)
    for month in ("2025-01-01", "2025-02-01"):  # the months these tests' runs start in
        raw.execute(f"SELECT lockstep_ensure_event_partition('{month}')")
    return raw


@pytest.fixture
def world(pg_store: Store, clock: FakeClock, pg: Raw) -> Service:
    svc = Service(pg_store, clock=clock)
    svc.principals.create_tenant("acme")
    svc.publish("acme", QUICK)
    svc.principals.set_tenant("acme", retention=7 * 86400)
    return svc


def partitions(pg: Raw) -> set[str]:
    rows = pg.fetch(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = 'events'::regclass"
    )
    return {r[0] for r in rows}


def test_a_month_whose_runs_are_all_tombstoned_is_dropped_whole_and_one_with_a_held_run_is_not(
    world: Service, clock: FakeClock, pg: Raw
):
    """January's runs all go: its partition is detached and dropped; February keeps a held run, so its
    purged runs' rows are deleted one by one; releasing the hold lets the next pass drop February."""
    january = finished(world, clock, "acme", 4)
    clock.now = datetime(2025, 2, 5, tzinfo=UTC)
    february = finished(world, clock, "acme", 3)
    (held,) = finished(world, clock, "acme", 1)
    world.retention.hold_run("acme", held, "case 12", "alice")
    assert {"events_y2025m01", "events_y2025m02"} <= partitions(pg)
    clock.now = datetime(2025, 3, 20, tzinfo=UTC)

    report = world.retention.purge.run_pass()
    assert report.tombstoned == 7
    assert report.partitions_dropped == ["events_y2025m01"]
    assert "events_y2025m01" not in partitions(pg)
    assert "events_y2025m02" in partitions(pg)
    for run_id in [*january, *february]:
        assert rows_of(pg, run_id) == dict.fromkeys(RUN_TABLES, 0)
    assert {t.state for t in world.retention.tombstones()} == {"purged"}
    assert rows_of(pg, held)["events"] == 4
    assert all(r.ok for r in world.verify())
    assert world.retention.check_tombstones() == []
    audit = pg.fetch("SELECT action, target FROM audit WHERE action = 'retention.drop_partition'")
    assert audit == [("retention.drop_partition", "events_y2025m01")]

    world.retention.release_run("acme", held, "case 12 closed", "alice")
    again = world.retention.purge.run_pass()
    assert (again.tombstoned, again.purged, again.partitions_dropped) == (1, 1, ["events_y2025m02"])
    assert rows_of(pg, held) == dict.fromkeys(RUN_TABLES, 0)
    assert "events_y2025m02" not in partitions(pg)


def test_a_backlog_leaves_past_months_events_to_the_partition_drop(world: Service, clock: FakeClock, pg: Raw):
    """While due runs are still being tombstoned, the events of past months are not deleted row by row:
    once the month's runs all have tombstones its partition is dropped, and only the other rows (the
    timer rows here) were deleted one by one."""
    january = finished(world, clock, "acme", 5)
    clock.now = datetime(2025, 3, 1, tzinfo=UTC)
    small = purge_module.Purge(world.kernel, runs_per_batch=2, rows_per_batch=100)
    first = small.run_pass(max_batches=1)
    assert (first.tombstoned, first.rows_deleted, first.more) == (2, 0, True)
    tombstoned = [t.run_id for t in world.retention.tombstones()]
    assert all(rows_of(pg, r)["events"] == 4 for r in tombstoned)  # waiting for the drop
    deleted, dropped = 0, []
    for _ in range(10):
        report = small.run_pass(max_batches=1)
        deleted += report.rows_deleted
        dropped += report.partitions_dropped
        if not report.more:
            break
    assert dropped == ["events_y2025m01", "events_y2025m02"]  # February: past and empty
    assert deleted == len(january)  # one timer row per run: every event went with the partition
    assert {t.state for t in world.retention.tombstones()} == {"purged"}
    for run_id in january:
        assert rows_of(pg, run_id) == dict.fromkeys(RUN_TABLES, 0)


def _in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = fn()
        except Exception as exc:  # reported through `out`
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _wait_blocked(pg: Raw, timeout: float = 10.0) -> None:
    sql = (
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    deadline = time.monotonic() + timeout
    while pg.fetch(sql)[0][0] == 0:
        assert time.monotonic() < deadline, "no session waited on a lock"
        time.sleep(0.01)


def test_a_tenant_hold_being_placed_makes_the_purge_wait_and_then_purge_nothing(
    world: Service, clock: FakeClock, pg: Raw
):
    """The purge shares the tenant row (FOR KEY SHARE); a tenant hold locks it: a purge pass that comes
    while the hold is uncommitted waits for it, then sees it and tombstones nothing."""
    finished(world, clock, "acme", 2)
    clock.now = datetime(2025, 3, 1, tzinfo=UTC)
    placed, commit = threading.Event(), threading.Event()

    def hold() -> None:
        with world.store.write() as tx:
            assert tx.lock_tenant_for_hold("acme")
            tx.insert_hold("acme", None, "subpoena", "alice", iso(clock.now))
            placed.set()
            assert commit.wait(10)

    holder, _ = _in_thread(hold)
    assert placed.wait(10)
    purger, out = _in_thread(world.retention.purge.run_pass)
    _wait_blocked(pg)
    assert purger.is_alive()
    commit.set()
    holder.join(10)
    purger.join(10)
    assert out["result"].tombstoned == 0
    assert world.retention.status("acme").tenants[0].finished_runs == 2


def test_a_run_hold_being_placed_is_skipped_by_the_purge_without_waiting(world: Service, clock: FakeClock):
    """A hold locks its run row; the purge tombstones with SKIP LOCKED, so it passes that run by at once
    and the hold commits on a run that still exists."""
    (run_id,) = finished(world, clock, "acme", 1)
    clock.now = datetime(2025, 3, 1, tzinfo=UTC)
    placed, commit = threading.Event(), threading.Event()

    def hold() -> None:
        with world.store.write() as tx:
            assert tx.lock_run_for_hold(run_id) == ("acme", "completed")
            tx.insert_hold("acme", run_id, "case 4", "alice", iso(clock.now))
            placed.set()
            assert commit.wait(10)

    holder, out = _in_thread(hold)
    assert placed.wait(10)
    assert world.retention.purge.run_pass().tombstoned == 0  # did not wait for the hold
    commit.set()
    holder.join(10)
    assert "error" not in out
    assert world.show("acme", run_id).status == "completed"
    assert world.retention.purge.run_pass().tombstoned == 0  # held now
