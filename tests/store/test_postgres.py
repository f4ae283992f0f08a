"""PostgreSQL-specific guarantees of the adapter: row locks between concurrent transactions, SKIP LOCKED,
scheduler partitions shared through leases, and the partitioned events table."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from lockstep.app.service import new_run_id
from lockstep.core.commands import ClaimTask
from lockstep.core.decide import task_id
from lockstep.core.effects import effects_of
from lockstep.core.timeutil import iso
from lockstep.store import ConcurrencyError, RowLocked, SchemaError, Store, open_store
from lockstep.store.postgres.adapter import MIGRATION_LOCK, PARTITIONS

from .conftest import BACKENDS, T0, WAIT_DOC, Driver, ms
from .pgdb import PgDatabases

PG = BACKENDS["postgresql"]
DEADLINE = iso(T0 + timedelta(seconds=30))
TTL = 10_000


@pytest.fixture
def pg(pg_databases: PgDatabases) -> Iterator[str]:
    """A PostgreSQL database with the current schema and no rows."""
    url = pg_databases.migrated()
    try:
        yield url
    finally:
        pg_databases.release_migrated(url)


@pytest.fixture
def pg_store(pg: str) -> Iterator[Store]:
    """A store on `pg`, closed after the test."""
    s = open_store(pg)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def driver(pg_store: Store) -> Driver:
    """Drives runs through the real core against `pg_store`."""
    return Driver(pg_store)


def task_of(run_id: str) -> str:
    return task_id(run_id, "work", "action", 1, 2)


def wait_until_blocked(url: str, timeout: float = 10.0, until_done: threading.Thread | None = None) -> None:
    """Wait until a session of the database waits on a lock (so the order is not a guess), or until
    the thread `until_done` has ended."""
    sql = (
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    deadline = time.monotonic() + timeout
    while PG.fetch(url, sql)[0][0] == 0:
        if until_done is not None and not until_done.is_alive():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"no session waited on a lock within {timeout}s")
        time.sleep(0.01)


def in_thread(fn) -> tuple[threading.Thread, dict]:
    """Start fn() in a thread; the dict gets "result" or "error" when it ends."""
    out: dict = {}

    def run() -> None:
        try:
            out["result"] = fn()
        except Exception as exc:  # reported through `out`
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


# --- two writers on one run ----------------------------------------------------------------------


@pytest.mark.parametrize("first_outcome", ["commit", "rollback"])
def test_concurrent_writers_with_the_same_expected_seq_never_merge(pg, pg_store, driver, first_outcome):
    """Two transactions append from the same seq: the second waits; if the first commits it fails."""
    driver.start("r01")
    task = task_of("r01")
    first = driver.plan("r01", ClaimTask(task, "w1", DEADLINE))
    second = driver.plan("r01", ClaimTask(task, "w2", DEADLINE))
    appended, finish = threading.Event(), threading.Event()

    def writer_1() -> None:
        with pg_store.write() as tx:
            tx.append(first[0], first[1], first[2], effects_of(first[2]), now_ms=ms(T0))
            appended.set()
            assert finish.wait(10)
            if first_outcome == "rollback":
                raise RuntimeError("rolled back")

    def writer_2() -> str:
        assert appended.wait(10)
        with pg_store.write() as tx:
            tx.append(second[0], second[1], second[2], effects_of(second[2]), now_ms=ms(T0))
        return "committed"

    t1, out1 = in_thread(writer_1)
    t2, out2 = in_thread(writer_2)
    wait_until_blocked(pg)  # writer 2 waits on writer 1's uncommitted event (run, seq 3)
    assert out2 == {}
    finish.set()
    t1.join(10)
    t2.join(10)

    with pg_store.read() as tx:
        loaded = tx.load_run("r01")
        events = tx.events("r01")
        row = tx.task(task)
    assert [e.seq for e, _ in events] == [1, 2, 3]
    assert loaded.state.seq == 3
    if first_outcome == "commit":
        assert "result" in out1
        assert isinstance(out2.get("error"), ConcurrencyError)
        winner = "w1"
    else:
        assert isinstance(out1.get("error"), RuntimeError)
        assert out2 == {"result": "committed"}
        winner = "w2"
    assert (loaded.state.active.worker, row.lease_owner, events[-1][0].data.worker) == (winner,) * 3


def test_load_run_for_a_write_waits_for_the_holder_and_sees_its_commit(pg, pg_store, driver):
    """A write transaction's load_run waits while another holds the run, then loads the committed seq."""
    driver.start("r01")
    before, after, events = driver.plan("r01", ClaimTask(task_of("r01"), "w1", DEADLINE))
    with pg_store.write() as holder:
        assert holder.load_run("r01").state.seq == 2

        def load_seq() -> int:
            with pg_store.write() as tx:
                return tx.load_run("r01").state.seq

        t, out = in_thread(load_seq)
        wait_until_blocked(pg)
        holder.append(before, after, events, effects_of(events), now_ms=ms(T0))
    t.join(10)
    assert out == {"result": 3}


def test_load_run_skip_locked_raises_row_locked_while_another_transaction_holds_the_run(pg_store, driver):
    """load_run(skip_locked=True) raises RowLocked at once while the run is held, loads it afterwards."""
    driver.start("r01")
    driver.start("r02")
    with pg_store.write() as holder:
        assert holder.load_run("r01") is not None  # FOR UPDATE: held until this transaction ends
        with pg_store.write() as tx:
            started = time.monotonic()
            with pytest.raises(RowLocked):
                tx.load_run("r01", skip_locked=True)
            assert time.monotonic() - started < 2
            assert tx.load_run("r02", skip_locked=True).state.run_id == "r02"  # other runs are free
            assert tx.load_run("nope00", skip_locked=True) is None  # missing is not locked
        with pg_store.read() as tx:  # reads never lock, so they are never refused
            assert tx.load_run("r01", skip_locked=True).state.seq == 2
    with pg_store.write() as tx:
        assert tx.load_run("r01", skip_locked=True).state.seq == 2


def test_due_timers_and_expired_leases_skip_rows_another_scheduler_holds(pg_store, driver):
    """Two scheduler transactions at once never get the same due timer or expired lease (SKIP LOCKED)."""
    for run in ("r01", "r02"):
        driver.start(run, doc=WAIT_DOC)
    for run in ("r03", "r04"):
        driver.start(run)
        driver.claim(run, timeout_s=30)
    later = ms(T0 + timedelta(minutes=5))
    with pg_store.write() as one:
        timers_1 = one.due_timers(later, 1)
        leases_1 = one.expired_leases(later, 1)
        with pg_store.write() as two:
            timers_2 = two.due_timers(later, 10)
            leases_2 = two.expired_leases(later, 10)
    assert len(timers_1) == len(timers_2) == len(leases_1) == len(leases_2) == 1
    assert {t.run_id for t in timers_1 + timers_2} == {"r01", "r02"}
    assert {lease.run_id for lease in leases_1 + leases_2} == {"r03", "r04"}


def test_timers_and_leases_are_filtered_by_the_run_partition(pg, pg_store, driver):
    """A run's partition is its id's last byte mod 64; partition filters select exactly those runs."""
    runs = {"r41": 1, "r02": 2, "rff": 63}  # 0x41 = 65 -> 1
    for run in runs:
        driver.start(run, doc=WAIT_DOC)
    assert dict(PG.fetch(pg, "SELECT run_id, part FROM runs")) == runs
    later = ms(T0 + timedelta(minutes=5))
    with pg_store.read() as tx:

        def due(partitions):
            return sorted(t.run_id for t in tx.due_timers(later, 10, partitions))

        assert due(None) == ["r02", "r41", "rff"]
        assert due([1]) == ["r41"]
        assert due([2, 63]) == ["r02", "rff"]
        assert due([0, 3]) == []
        assert due([]) == []
        (timer,) = tx.due_timers(later, 10, [1])
        assert (timer.run_id, timer.key) == ("r41", "wait:nap")


# --- scheduler partitions ------------------------------------------------------------------------


def _take(store: Store, owner: str, now_ms: int) -> set[int]:
    with store.write() as tx:
        got = tx.scheduler_partitions(owner, now_ms, TTL)
    assert got is not None
    assert got == sorted(got)
    return set(got)


def _leases(url: str) -> dict[str, set[int]]:
    owned: dict[str, set[int]] = {}
    for part, owner in PG.fetch(url, "SELECT part, owner FROM scheduler_leases"):
        owned.setdefault(owner, set()).add(part)
    return owned


def test_a_single_scheduler_owns_all_partitions(pg, pg_store):
    """The only scheduler gets all 64 partitions and keeps them on every renewal."""
    assert PARTITIONS == 64
    for i in range(3):
        assert _take(pg_store, "s1", i * 1000) == set(range(64))
    assert _leases(pg) == {"s1": set(range(64))}


@pytest.mark.parametrize(("owners", "shares"), [(2, [32, 32]), (3, [20, 22, 22])])
def test_schedulers_that_join_converge_to_fair_disjoint_shares(pg, pg_store, owners, shares):
    """A scheduler that joins gets a fair share within a few calls each; shares never overlap."""
    names = [f"s{i}" for i in range(owners)]
    now = 0
    held = {name: set() for name in names}
    held["s0"] = _take(pg_store, "s0", now)
    for _ in range(3):  # three rounds: every scheduler calls three times
        for name in names:
            now += 100
            held[name] = _take(pg_store, name, now)
            mine = held[name]
            assert all(not (mine & held[other]) for other in names if other != name)
    assert sorted(len(held[n]) for n in names) == shares
    assert set().union(*held.values()) == set(range(64))
    assert _leases(pg) == held
    for name in names:  # stable once converged
        now += 100
        assert _take(pg_store, name, now) == held[name]


def test_a_scheduler_that_stops_renewing_loses_its_partitions_within_one_ttl(pg, pg_store):
    """Leases of a dead scheduler are not stolen early, and pass to the live one once they expire."""
    now = 0
    for _ in range(3):
        for name in ("s1", "s2"):
            now += 100
            _take(pg_store, name, now)
    last_renewal = now - 100  # s1's last call; s2 called after it
    dead = _leases(pg)["s1"]
    assert len(dead) == 32
    assert _take(pg_store, "s2", last_renewal + TTL - 1).isdisjoint(dead)  # still s1's
    assert _take(pg_store, "s2", last_renewal + TTL + 1) == set(range(64))
    assert _leases(pg) == {"s2": set(range(64))}


def test_schedulers_pruning_each_others_membership_do_not_deadlock(pg, pg_store):
    """Two schedulers that each find the other's membership expired both finish their pass."""
    PG.execute(pg, "INSERT INTO scheduler_members (owner, expires_at) VALUES ('s1', 100), ('s2', 100)")
    s2_error = None
    with psycopg.connect(pg) as s2:  # scheduler s2 half-way through its pass, as the adapter runs it
        s2.execute(
            "INSERT INTO scheduler_members (owner, expires_at) VALUES ('s2', 11000) "
            "ON CONFLICT (owner) DO UPDATE SET expires_at = EXCLUDED.expires_at"
        )
        t, out = in_thread(lambda: _take(pg_store, "s1", 1000))
        wait_until_blocked(pg, until_done=t)  # s1 would delete s2's row, which s2 holds
        try:
            s2.execute("DELETE FROM scheduler_members WHERE expires_at < 1000")  # s2 prunes s1
            s2.commit()
        except psycopg.errors.DeadlockDetected as exc:
            s2_error = exc
            s2.rollback()
        t.join(10)
    assert s2_error is None
    assert "error" not in out, out["error"]


# --- the partitioned events table ----------------------------------------------------------------


MONTHS = (
    "SELECT to_char(date_trunc('month', now()) + make_interval(months => m), "
    '\'"events_y"YYYY"m"MM\') FROM generate_series(CAST(? AS INTEGER), CAST(? AS INTEGER)) AS m'
)
PARTITIONS_OF_EVENTS = (
    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
    "WHERE i.inhparent = 'events'::regclass ORDER BY c.relname"
)


def test_events_table_is_partitioned_by_run_id_range(pg):
    """events is range-partitioned on run_id with a default partition and last month to 3 months ahead."""
    strategy = "SELECT partstrat FROM pg_partitioned_table WHERE partrelid = 'events'::regclass"
    assert PG.fetch(pg, strategy) == [("r",)]
    partitions = [r[0] for r in PG.fetch(pg, PARTITIONS_OF_EVENTS)]
    months = [r[0] for r in PG.fetch(pg, MONTHS, [-1, 3])]
    assert partitions == sorted(["events_default", *months])


def test_a_runs_events_land_in_the_partition_of_its_run_ids_month(pg, driver):
    """Events of a run started now are in this month's partition; an id from long ago goes to default."""
    now = datetime.now(UTC)
    fresh, old = new_run_id(now), new_run_id(T0)
    driver.start(fresh, now=now)
    driver.start(old)
    where = "SELECT DISTINCT tableoid::regclass::text FROM events WHERE run_id = ?"
    assert PG.fetch(pg, where, [fresh]) == [(f"events_y{now:%Y}m{now:%m}",)]
    assert PG.fetch(pg, where, [old]) == [("events_default",)]
    assert PG.fetch(pg, "SELECT count(*) FROM ONLY events")[0][0] == 0  # the parent holds no rows


def test_listen_wakes_up_on_a_queued_task_and_returns_once_stopped(pg_store, driver):
    """listen calls back after a commit that queued a task (NOTIFY lockstep_tasks) and returns soon
    after its stop is set. The listener connects in its own time and a NOTIFY sent before its LISTEN
    reaches nobody, so runs are started until one wakes it."""
    stop, woke = threading.Event(), threading.Event()
    listener = threading.Thread(target=pg_store.listen, args=(["lockstep_tasks"], woke.set, stop))
    listener.start()
    try:
        deadline = time.monotonic() + 30
        n = 0
        while not woke.is_set() and time.monotonic() < deadline:
            driver.start(f"r{n:02x}")
            n += 1
            woke.wait(0.2)
        assert woke.is_set()
    finally:
        stop.set()
        listener.join(timeout=10)
    assert not listener.is_alive()


def test_ensure_partitions_is_idempotent(pg, pg_store):
    """ensure_partitions creates the coming months once; calling it again changes nothing."""
    before = [r[0] for r in PG.fetch(pg, PARTITIONS_OF_EVENTS)]
    pg_store.ensure_partitions()
    once = [r[0] for r in PG.fetch(pg, PARTITIONS_OF_EVENTS)]
    pg_store.ensure_partitions()
    pg_store.ensure_partitions()
    assert [r[0] for r in PG.fetch(pg, PARTITIONS_OF_EVENTS)] == once
    assert set(before) <= set(once)
    assert {r[0] for r in PG.fetch(pg, MONTHS, [0, 3])} <= set(once)


def test_dropping_a_month_partition_removes_only_that_months_events(pg, driver):
    """Retention drops a whole month of runs' events at once; the append-only guard stays on the rest."""
    now = datetime.now(UTC)
    fresh, old = new_run_id(now), new_run_id(T0)
    driver.start(fresh, now=now)
    driver.start(old)
    PG.execute(pg, f"DROP TABLE events_y{now:%Y}m{now:%m}")
    assert PG.fetch(pg, "SELECT DISTINCT run_id FROM events") == [(old,)]
    with pytest.raises(PG.error, match="append-only"):
        PG.execute(pg, "DELETE FROM events WHERE run_id = ?", [old])


def test_event_partition_bounds_are_utc_month_starts_in_any_session_timezone(pg):
    """A month's partition holds the run ids of that UTC month, whatever TimeZone the session has."""
    lo, hi = (f"{ms(datetime(2031, month, 1, tzinfo=UTC)):012x}" for month in (1, 2))
    with psycopg.connect(pg) as conn:  # one transaction, rolled back: the database keeps its partitions
        try:
            conn.execute("SET LOCAL TimeZone = 'America/New_York'")
            conn.execute("SELECT lockstep_ensure_event_partition('2031-01-01')")
            conn.execute("SET LOCAL TimeZone = 'UTC'")
            conn.execute("SELECT lockstep_ensure_event_partition('2031-02-01')")
            row = conn.execute(
                "SELECT pg_get_expr(relpartbound, oid) FROM pg_class WHERE relname = 'events_y2031m01'"
            ).fetchone()
        finally:
            conn.rollback()
    assert row == (f"FOR VALUES FROM ('{lo}') TO ('{hi}')",)


# --- schema checks on open -----------------------------------------------------------------------


def test_a_refused_open_leaves_no_connection_behind(pg):
    """When open_store refuses a database, its connection pool is closed: no session stays open."""
    (checksum,) = PG.fetch(pg, "SELECT checksum FROM schema_migrations WHERE version = 1")[0]
    PG.execute(pg, "UPDATE schema_migrations SET checksum = 'changed'")
    with pytest.raises(SchemaError, match="changed"):
        open_store(pg)
    sessions = (
        # Client sessions only: an autovacuum worker may be visiting this database at any moment.
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
    )
    deadline = time.monotonic() + 15
    while PG.fetch(pg, sessions)[0][0] and time.monotonic() < deadline:
        time.sleep(0.02)  # a closed connection's server process exits a moment later
    assert PG.fetch(pg, sessions) == [(0,)]
    PG.execute(pg, "UPDATE schema_migrations SET checksum = ? WHERE version = 1", [checksum])  # reusable


def test_open_during_another_process_migration_waits_instead_of_refusing(pg_databases):
    """A database another session is migrating (bookkeeping table made, lock held) is opened after it."""
    url = pg_databases.empty()
    try:
        with psycopg.connect(url, autocommit=True) as migrating:
            migrating.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
            migrating.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                "name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            t, out = in_thread(lambda: open_store(url))
            wait_until_blocked(url, until_done=t)  # waiting on the migration lock is the right thing
        t.join(10)  # the migrating session ended (lock released): the opener migrates itself
        if "result" in out:
            out["result"].close()
        assert not isinstance(out.get("error"), SchemaError), out.get("error")
        assert "result" in out
    finally:
        pg_databases.release_empty(url)


def test_a_read_sends_no_begin_and_leaves_its_connection_as_it_found_it(pg_store: Store) -> None:
    """A read runs its statements in autocommit (no BEGIN/COMMIT round trips); a snapshot read's own
    transaction is rolled back at the end, even when the read fails, and the connection goes back to
    the pool idle and not in autocommit (writers still get one transaction)."""
    store: Any = pg_store
    with store.read() as tx:
        assert tx.c.autocommit is True
        tx.c.execute("SELECT 1")
        assert tx.c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE  # no BEGIN was sent
    seen: list[Any] = []

    def failing_snapshot_read() -> None:
        with store.read() as tx:
            seen.append(tx.c)
            tx.audit_snapshot()
            assert tx.c.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            raise RuntimeError("the read failed halfway")

    with pytest.raises(RuntimeError, match="halfway"):
        failing_snapshot_read()
    conn = seen[0]
    assert conn.autocommit is False
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with store.write() as tx:
        assert tx.c.autocommit is False
        assert tx.c.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
