"""The storage contract: what every backend must guarantee to the service (run once per backend)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import threading
from dataclasses import replace
from datetime import timedelta

import msgspec
import pytest

from lockstep.app.service import Service
from lockstep.core.commands import ClaimTask, FireTimer, ReportSuccess, StartRun
from lockstep.core.decide import decide, task_id
from lockstep.core.definition import parse_definition
from lockstep.core.effects import effects_of
from lockstep.core.events import chain_hash
from lockstep.core.evolve import fold
from lockstep.core.state import SNAPSHOT_VERSION
from lockstep.core.throttle import LoginCounter
from lockstep.core.timeutil import iso
from lockstep.store import (
    ConcurrencyError,
    DefinitionRow,
    DueTimer,
    ExpiredLease,
    LoadedRun,
    SchemaError,
    UserRow,
    open_store,
    upgrade_store,
)
from lockstep.store.migrate import Migration, migrations

from .conftest import ACTIVITY_DOC, T0, WAIT_DOC, Backend, Driver, _fold, ms

GENESIS = "0" * 64


def task_of(run_id: str) -> str:
    """The task of a run started by Driver.start: attempt 1 of `work`, scheduled by event 2."""
    return task_id(run_id, "work", "action", 1, 2)


def snapshot_row(backend: Backend, url: str, run_id: str) -> tuple:
    sql = "SELECT seq, status, snapshot, last_hash FROM runs WHERE run_id = ?"
    return backend.fetch(url, sql, [run_id])[0]


def task_row(backend: Backend, url: str, task_id: str) -> tuple:
    return backend.fetch(
        url,
        "SELECT status, fencing, lease_owner, lease_expires_at, deadline FROM tasks WHERE task_id = ?",
        [task_id],
    )[0]


def event_rows(backend: Backend, url: str, run_id: str) -> list[tuple]:
    return backend.fetch(
        url, "SELECT seq, type, data, hash FROM events WHERE run_id = ? ORDER BY seq", [run_id]
    )


# --- appending events --------------------------------------------------------------------------


def test_first_append_creates_run_events_and_snapshot(store, driver: Driver):
    """A first append stores the events from seq 1, the snapshot at the last seq and the hash chain head."""
    events = driver.start("r01")
    loaded = driver.load("r01")
    assert loaded.state.seq == len(events) == 2
    with store.read() as tx:
        stored = tx.events("r01")
    assert [(e.seq, e.type) for e, _ in stored] == [(1, "RunStarted"), (2, "ActivityScheduled")]
    h = GENESIS
    for e, stored_hash in stored:
        h = chain_hash(h, "r01", e)
        assert stored_hash == h
    assert loaded.last_hash == h


def test_append_with_expected_seq_advances_the_run(driver: Driver):
    """Appending with the current seq as expected seq adds the next events and moves the snapshot on."""
    driver.start("r01")
    driver.claim("r01")
    loaded = driver.load("r01")
    assert loaded.state.seq == 3
    assert loaded.state.active is not None
    assert loaded.state.active.worker == "w1"


def test_second_append_with_same_expected_seq_is_refused_and_writes_nothing(store, backend, url, driver):
    """Two writers from the same seq: the second gets ConcurrencyError; events, snapshot, tasks stay put."""
    driver.start("r01")
    task = task_of("r01")
    first = driver.plan("r01", ClaimTask(task, "w1", iso(T0 + timedelta(seconds=30))))
    second = driver.plan("r01", ClaimTask(task, "w2", iso(T0 + timedelta(seconds=30))))
    with store.write() as tx:
        tx.append(first[0], first[1], first[2], effects_of(first[2]), now_ms=ms(T0))
    events_before = event_rows(backend, url, "r01")
    run_before = snapshot_row(backend, url, "r01")
    task_before = task_row(backend, url, task)

    with pytest.raises(ConcurrencyError), store.write() as tx:
        tx.append(second[0], second[1], second[2], effects_of(second[2]), now_ms=ms(T0))

    assert event_rows(backend, url, "r01") == events_before
    assert snapshot_row(backend, url, "r01") == run_before
    assert task_row(backend, url, task) == task_before
    assert task_before[2] == "w1"


def test_a_read_inside_a_batch_sees_the_writes_buffered_before_it(store, driver: Driver):
    """batch() holds unanswered writes back, but any read sends them first: the batch reads its own
    writes (the second transition of a run in one batch must see the first)."""
    driver.start("r01")
    before, after, events = driver.plan(
        "r01", ClaimTask(task_of("r01"), "w1", iso(T0 + timedelta(seconds=30)))
    )
    with store.write() as tx, tx.batch():
        tx.append(before, after, events, effects_of(events), now_ms=ms(T0))
        seen_task = tx.task(task_of("r01"))
        seen_run = tx.load_run("r01")
    assert seen_task is not None
    assert (seen_task.status, seen_task.lease_owner) == ("leased", "w1")
    assert seen_run is not None
    assert seen_run.state.seq == 3
    assert driver.load("r01").state.seq == 3


def test_a_batch_writes_several_appends_and_a_stale_one_fails_it_at_the_end(store, backend, url, driver):
    """Appends inside batch() all land (one round trip on PostgreSQL); a stale one is caught when the
    batch ends (ConcurrencyError), and a savepoint around the batch undoes all of its writes."""
    for rid in ("r01", "r02"):
        driver.start(rid)
    plans = [
        driver.plan(rid, ClaimTask(task_of(rid), "w1", iso(T0 + timedelta(seconds=30))))
        for rid in ("r01", "r02")
    ]
    with store.write() as tx, tx.batch():
        for before, after, events in plans:
            tx.append(before, after, events, effects_of(events), now_ms=ms(T0))
    assert [driver.load(r).state.seq for r in ("r01", "r02")] == [3, 3]

    driver.start("r03")
    fresh = driver.plan("r03", ClaimTask(task_of("r03"), "w1", iso(T0 + timedelta(seconds=30))))
    stale = driver.load("r01")
    before_r03 = event_rows(backend, url, "r03")

    def good_then_stale(tx):
        with tx.savepoint(), tx.batch():
            tx.append(fresh[0], fresh[1], fresh[2], effects_of(fresh[2]), now_ms=ms(T0))
            stale_before = LoadedRun(replace(stale.state, seq=2), stale.last_hash)
            tx.append(stale_before, stale.state, [], [], now_ms=ms(T0))

    with store.write() as tx, pytest.raises(ConcurrencyError):
        good_then_stale(tx)
    assert event_rows(backend, url, "r03") == before_r03  # the good append was undone with the batch
    assert driver.load("r01").state.seq == 3


def test_stale_snapshot_write_without_events_is_refused(store, driver: Driver):
    """The snapshot update is conditional on the expected seq even when no event collides."""
    driver.start("r01")
    stale = driver.load("r01")
    driver.claim("r01")
    with pytest.raises(ConcurrencyError), store.write() as tx:
        tx.append(stale, stale.state, [], [], now_ms=ms(T0))
    assert driver.load("r01").state.seq == 3


def test_events_must_follow_the_expected_seq(store, driver: Driver):
    """Events whose seq does not follow the expected seq contiguously are refused."""
    driver.start("r01")
    before, after, events = driver.plan("r01", ClaimTask(task_of("r01"), "w1", iso(T0)))
    gap = [msgspec.structs.replace(e, seq=e.seq + 1) for e in events]
    with pytest.raises(ConcurrencyError), store.write() as tx:
        tx.append(before, replace(after, seq=after.seq + 1), gap, [], now_ms=ms(T0))
    assert driver.load("r01").state.seq == 2


def test_starting_the_same_run_twice_is_refused(store, driver: Driver):
    """A second first-append for an existing run id raises ConcurrencyError and keeps one history."""
    driver.start("r01")
    with pytest.raises(ConcurrencyError):
        driver.start("r01")
    with store.read() as tx:
        assert len(tx.events("r01")) == 2


def test_events_are_unique_per_run_and_seq(backend, url, driver: Driver):
    """The database itself refuses a second event with the same (run, seq)."""
    driver.start("r01")
    with pytest.raises(backend.error):
        backend.execute(
            url,
            "INSERT INTO events (run_id, seq, type, at, v, data, hash) VALUES (?, ?, ?, ?, ?, ?, ?)",
            ["r01", 1, "RunStarted", iso(T0), 1, "{}", "x"],
        )


def test_events_table_is_append_only(backend, url, driver: Driver):
    """UPDATE and DELETE on events are refused by the database, not just avoided by the code."""
    driver.start("r01")
    before = event_rows(backend, url, "r01")
    with pytest.raises(backend.error, match="append-only"):
        backend.execute(url, "UPDATE events SET data = '{}' WHERE run_id = ? AND seq = 1", ["r01"])
    with pytest.raises(backend.error, match="append-only"):
        backend.execute(url, "DELETE FROM events WHERE run_id = ?", ["r01"])
    assert event_rows(backend, url, "r01") == before


# --- the outbox ----------------------------------------------------------------------------------


def test_activity_scheduled_writes_its_task_row_in_the_same_transaction(store, driver: Driver):
    """ActivityScheduled and its ready task row are committed together (the outbox)."""
    events = driver.start("r01")
    scheduled = events[-1].data
    assert scheduled.task_id == task_of("r01") == "r01/work/a1-2"
    with store.read() as tx:
        t = tx.task(scheduled.task_id)
    assert t is not None
    assert (t.run_id, t.tenant, t.step, t.attempt, t.kind) == ("r01", "t1", "work", 1, "action")
    assert (t.activity, t.queue, t.status, t.fencing, t.lease_owner) == (
        "demo.work",
        "default",
        "ready",
        None,
        None,
    )
    assert t.idempotency_key == scheduled.idempotency_key
    assert (t.definition, t.version, t.timeout_ms, t.delivery) == ("flow", 1, 30_000, "idempotent")


def test_rollback_leaves_neither_events_nor_tasks(store, driver: Driver):
    """An exception inside the write transaction rolls back the run, its events and its task row."""
    seen_inside = []

    def start_then_crash() -> None:
        with store.write() as tx:
            tx.append(None, *_start_parts(), now_ms=ms(T0))
            seen_inside.append(tx.task(task_of("r01")))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        start_then_crash()
    assert seen_inside[0] is not None  # the task row was visible inside the transaction...
    with store.read() as tx:  # ...and gone after the rollback
        assert tx.load_run("r01") is None
        assert tx.events("r01") == []
        assert tx.task(task_of("r01")) is None
        assert tx.run_ids(None) == []
        assert tx.task_counts() == {}


def _start_parts():
    events = decide(None, StartRun("r01", "t1", 1, {}), T0, parse_definition(ACTIVITY_DOC))
    return fold(events), events, effects_of(events)


def test_rollback_of_a_later_command_keeps_the_task_ready(store, backend, url, driver: Driver):
    """A rolled-back claim leaves the run at its old seq and the task ready for someone else."""
    driver.start("r01")
    before, after, events = driver.plan("r01", ClaimTask(task_of("r01"), "w1", iso(T0)))

    def claim_then_crash() -> None:
        with store.write() as tx:
            tx.append(before, after, events, effects_of(events), now_ms=ms(T0))
            raise RuntimeError("crash before commit")

    with pytest.raises(RuntimeError, match="crash"):
        claim_then_crash()
    assert driver.load("r01").state.seq == 2
    assert task_row(backend, url, task_of("r01"))[:3] == ("ready", None, None)


# --- tasks and leases ----------------------------------------------------------------------------


def test_ready_ids_filters_by_tenant_queue_activity_and_availability(store, driver: Driver):
    """ready_ids returns only ready tasks of the tenant, queue and asked types that are available by now."""
    driver.start("r01")
    with store.read() as tx:
        assert tx.ready_ids("t1", ["demo.work"], "default", ms(T0), 10) == [task_of("r01")]
        assert tx.ready_ids("t1", ["other.thing", "demo.work"], "default", ms(T0), 10) == [task_of("r01")]
        assert tx.ready_ids("t1", ["other.thing"], "default", ms(T0), 10) == []
        assert tx.ready_ids("t1", [], "default", ms(T0), 10) == []
        assert tx.ready_ids("t1", ["demo.work"], "default", ms(T0) - 1, 10) == []
        assert tx.ready_ids("t1", ["demo.work"], "default", ms(T0), 0) == []
        assert tx.ready_ids("t1", ["demo.work"], "other-queue", ms(T0), 10) == []
        assert tx.ready_ids("t2", ["demo.work"], "default", ms(T0), 10) == []


def test_ready_ids_respects_the_limit_in_availability_order(store, driver: Driver):
    """ready_ids hands out at most `limit` tasks, oldest first (at equal priority)."""
    for i in range(3):
        driver.start(f"r0{i}", now=T0 + timedelta(seconds=3 - i))
    with store.read() as tx:
        got = tx.ready_ids("t1", ["demo.work"], "default", ms(T0 + timedelta(minutes=1)), 2)
    assert got == [task_of("r02"), task_of("r01")]


def test_ready_ids_hand_out_higher_priority_first(store, driver: Driver):
    """A task of a higher-priority step is handed out before older tasks of lower priority."""
    urgent = {"name": "urgent", "steps": [{**ACTIVITY_DOC["steps"][0], "priority": 5}]}
    driver.start("old01", now=T0)
    driver.start("new02", now=T0 + timedelta(seconds=1), doc=urgent)
    with store.read() as tx:
        assert tx.task(task_of("new02")).status == "ready"
        got = tx.ready_ids("t1", ["demo.work"], "default", ms(T0 + timedelta(minutes=1)), 10)
    assert got == [task_of("new02"), task_of("old01")]


def test_ready_tenants_lists_each_tenant_with_ready_tasks_once(store, driver: Driver):
    """ready_tenants names each tenant with a ready task once, in order; leased tasks do not count."""
    with store.read() as tx:
        assert tx.ready_tenants() == []
    driver.start("b01", tenant="t2")
    driver.start("a01", tenant="t1")
    driver.start("a02", tenant="t1")
    with store.read() as tx:
        assert tx.ready_tenants() == ["t1", "t2"]
        assert tx.leased_count("t2") == 0
    driver.claim("b01")
    with store.read() as tx:
        assert tx.ready_tenants() == ["t1"]
        assert tx.leased_count("t2") == 1
        assert tx.leased_count("t1") == 0


def test_claim_leases_the_task_to_one_worker(store, driver: Driver):
    """Appending ActivityStarted leases the task: fencing, owner and deadline set; no longer ready."""
    driver.start("r01")
    fencing = driver.claim("r01", worker="w1", timeout_s=30)
    with store.read() as tx:
        t = tx.task(task_of("r01"))
        assert tx.ready_ids("t1", ["demo.work"], "default", ms(T0), 10) == []
    assert t is not None
    assert (t.status, t.fencing, t.lease_owner) == ("leased", fencing, "w1")
    assert t.deadline == ms(T0 + timedelta(seconds=30))
    assert t.lease_expires_at == t.deadline


def test_a_task_created_and_leased_in_one_append_is_stored_leased(store):
    """Eager dispatch: a task scheduled and started in one transition is one leased row (capped lease)."""
    d = parse_definition(ACTIVITY_DOC)
    started = decide(None, StartRun("r01", "t1", 1, {}, None), T0, d)
    claim = decide(
        _fold(None, started), ClaimTask(task_of("r01"), "w1", iso(T0 + timedelta(seconds=30))), T0, d
    )
    events = started + claim
    with store.write() as tx:
        tx.append(
            None,
            _fold(None, events),
            events,
            effects_of(events),
            now_ms=ms(T0),
            lease_until_ms=ms(T0 + timedelta(seconds=10)),
        )
    with store.read() as tx:
        t = tx.task(task_of("r01"))
        assert tx.ready_ids("t1", ["demo.work"], "default", ms(T0), 10) == []
    assert t is not None
    assert (t.status, t.fencing, t.lease_owner) == ("leased", claim[0].data.fencing, "w1")
    assert (t.deadline, t.lease_expires_at) == (
        ms(T0 + timedelta(seconds=30)),
        ms(T0 + timedelta(seconds=10)),
    )


def test_a_state_cached_by_one_process_is_not_used_after_another_moved_the_run(store, url):
    """The state cache answers only while the row's hash-chain head is the one it wrote: a second
    store (another process) advancing the run makes the first read the stored snapshot again."""
    mine, other = Driver(store), Driver(open_store(url))
    try:
        mine.start("r01")
        fencing = mine.claim("r01", worker="w1")
        assert store.states.get("r01", mine.load("r01").last_hash) is not None  # a leased attempt: kept
        other.command("r01", ReportSuccess(task_of("r01"), 1, fencing, {"ok": True}))
        with store.write() as tx:  # writers are the ones that consult the cache
            loaded = tx.load_run("r01")
        assert loaded is not None
        assert loaded.state == other.load("r01").state
        assert loaded.state.seq > 3
    finally:
        other.store.close()


def test_only_runs_with_a_leased_attempt_are_cached(store, driver: Driver):
    """A run that waits (here: queued, not leased) is not kept in memory: the cache stays small."""
    driver.start("r01")
    assert store.states.get("r01", driver.load("r01").last_hash) is None


def test_a_rolled_back_write_leaves_no_usable_cache_entry(store, driver: Driver):
    """A transition cached inside a transaction that then fails is never served: the head differs."""
    driver.start("r01")
    before, after, events = driver.plan(
        "r01", ClaimTask(task_of("r01"), "w1", iso(T0 + timedelta(seconds=30)))
    )

    def append_then_fail() -> None:
        with store.write() as tx:
            tx.append(before, after, events, effects_of(events), now_ms=ms(T0))
            raise RuntimeError("the commit never happens")

    with pytest.raises(RuntimeError):
        append_then_fail()
    loaded = driver.load("r01")
    assert loaded.state.seq == 2
    assert loaded.state.active.worker is None  # type: ignore[union-attr]


def test_tasks_reads_several_by_id_and_leaves_out_unknown_ones(store, driver: Driver):
    """tx.tasks returns the rows of the given ids in one query; an unknown id is simply absent."""
    driver.start("r01")
    driver.start("r02")
    driver.claim("r02")
    with store.read() as tx:
        got = tx.tasks([task_of("r01"), task_of("r02"), "nope/x/a1-2"])
    assert sorted(got) == [task_of("r01"), task_of("r02")]
    assert (got[task_of("r01")].status, got[task_of("r02")].status) == ("ready", "leased")


def test_set_lease_is_capped_at_the_deadline(store, driver: Driver):
    """set_lease shortens the lease to the given time but never sets it past the attempt's deadline."""
    driver.start("r01")
    driver.claim("r01", timeout_s=30)
    with store.write() as tx:
        tx.set_lease(task_of("r01"), ms(T0 + timedelta(seconds=5)))
        assert tx.task(task_of("r01")).lease_expires_at == ms(T0 + timedelta(seconds=5))
        tx.set_lease(task_of("r01"), ms(T0 + timedelta(hours=1)))
        assert tx.task(task_of("r01")).lease_expires_at == ms(T0 + timedelta(seconds=30))


def test_heartbeat_needs_the_current_fencing_token(store, driver: Driver):
    """A heartbeat with a stale fencing token is refused and leaves the lease alone."""
    driver.start("r01")
    fencing = driver.claim("r01")
    task = task_of("r01")
    with store.write() as tx:
        tx.set_lease(task, ms(T0 + timedelta(seconds=5)))
    with store.write() as tx:
        assert tx.heartbeat(task, fencing + 1, ms(T0 + timedelta(seconds=20))) is False
        assert tx.task(task).lease_expires_at == ms(T0 + timedelta(seconds=5))
        assert tx.heartbeat(task, fencing, ms(T0 + timedelta(seconds=20))) is True
        assert tx.task(task).lease_expires_at == ms(T0 + timedelta(seconds=20))


def test_heartbeat_never_extends_past_the_deadline(store, driver: Driver):
    """A heartbeat asking for more time than the attempt has gets exactly the deadline."""
    driver.start("r01")
    fencing = driver.claim("r01", timeout_s=30)
    with store.write() as tx:
        assert tx.heartbeat(task_of("r01"), fencing, ms(T0 + timedelta(days=1))) is True
        assert tx.task(task_of("r01")).lease_expires_at == ms(T0 + timedelta(seconds=30))


def test_heartbeat_on_a_closed_task_is_refused(store, driver: Driver):
    """Once the result is recorded (task done), the old lease cannot be renewed."""
    driver.start("r01")
    fencing = driver.claim("r01")
    driver.command("r01", ReportSuccess(task_of("r01"), 1, fencing, {"ok": True}))
    with store.write() as tx:
        assert tx.task(task_of("r01")).status == "done"
        assert tx.heartbeat(task_of("r01"), fencing, ms(T0 + timedelta(seconds=5))) is False


def test_close_task_is_conditional(store, driver: Driver):
    """Closing an already closed task changes nothing (done stays done)."""
    driver.start("r01")
    with store.write() as tx:
        tx.close_task(task_of("r01"), "done")
        tx.close_task(task_of("r01"), "cancelled")
        assert tx.task(task_of("r01")).status == "done"
        assert tx.task_counts() == {"done": 1}


def test_expired_leases_lists_leases_past_their_expiry(store, driver: Driver):
    """expired_leases returns a leased task once lease_expires_at <= now, with its fencing and worker."""
    driver.start("r01")
    fencing = driver.claim("r01", worker="w9", timeout_s=30)
    with store.write() as tx:
        tx.set_lease(task_of("r01"), ms(T0 + timedelta(seconds=5)))
    with store.read() as tx:
        assert tx.expired_leases(ms(T0 + timedelta(milliseconds=4999)), 10) == []
        got = tx.expired_leases(ms(T0 + timedelta(seconds=5)), 10)
        assert tx.next_wakeup_ms() == ms(T0 + timedelta(seconds=5))
    assert got == [ExpiredLease(task_of("r01"), "r01", 1, fencing, "w9", ms(T0 + timedelta(seconds=30)))]
    with store.write() as tx:
        tx.close_task(task_of("r01"), "done")
        assert tx.expired_leases(ms(T0 + timedelta(days=1)), 10) == []
        assert tx.next_wakeup_ms() is None


# --- timers --------------------------------------------------------------------------------------


def test_due_timers_are_found_by_fire_time(store, driver: Driver):
    """A scheduled timer is due from its fire_at on, and is the next wakeup."""
    events = driver.start("r01", doc=WAIT_DOC)
    gen = events[-1].data.generation
    with store.read() as tx:
        assert tx.due_timers(ms(T0 + timedelta(milliseconds=9999)), 10) == []
        assert tx.due_timers(ms(T0 + timedelta(seconds=10)), 10) == [DueTimer("r01", "wait:nap", gen)]
        assert tx.next_wakeup_ms() == ms(T0 + timedelta(seconds=10))


def test_close_timer_is_conditional(store, backend, url, driver: Driver):
    """Closing a timer takes it off the due list; closing it again (any status) changes nothing."""
    gen = driver.start("r01", doc=WAIT_DOC)[-1].data.generation
    later = ms(T0 + timedelta(minutes=1))
    with store.write() as tx:
        tx.close_timer("r01", "wait:nap", gen, "fired")
        assert tx.due_timers(later, 10) == []
    with store.write() as tx:
        tx.close_timer("r01", "wait:nap", gen, "cancelled")
        tx.close_timer("r01", "wait:nap", gen, "fired")
        assert tx.next_wakeup_ms() is None
    rows = backend.fetch(url, "SELECT generation, status FROM timers WHERE run_id = ?", ["r01"])
    assert rows == [(gen, "fired")]


def test_firing_a_timer_closes_its_row_in_the_same_transaction(store, backend, url, driver: Driver):
    """Appending TimerFired marks the timer row fired, so it is never due again."""
    gen = driver.start("r01", doc=WAIT_DOC)[-1].data.generation
    at = T0 + timedelta(seconds=10)
    driver.command("r01", FireTimer("wait:nap", gen), doc=WAIT_DOC, now=at)
    assert driver.load("r01").state.status == "completed"
    with store.read() as tx:
        assert tx.due_timers(ms(at + timedelta(days=1)), 10) == []
    assert backend.fetch(url, "SELECT status FROM timers WHERE run_id = ?", ["r01"]) == [("fired",)]


POLL_DOC = {
    "name": "poll",
    "steps": [
        {"id": "check", "activity": "demo.work", "timeout": "30s"},
        {"id": "route", "choice": [{"if": "steps.check.output.done", "next": "end"}, {"else": "pause"}]},
        {"id": "pause", "wait": "10s", "next": "check"},
    ],
}


def test_polling_loop_gets_a_fresh_task_row_on_every_pass(store, backend, url, driver: Driver):
    """Re-entering an activity step (attempt 1 again) inserts a new ready task under the new task id."""
    first = driver.start("r01", doc=POLL_DOC)[-1].data.task_id
    deadline = iso(T0 + timedelta(seconds=30))
    fencing = driver.command("r01", ClaimTask(first, "w1", deadline), doc=POLL_DOC)[0].data.fencing
    events = driver.command("r01", ReportSuccess(first, 1, fencing, {"done": False}), doc=POLL_DOC)
    gen = events[-1].data.generation
    at = T0 + timedelta(seconds=10)
    try:
        events = driver.command("r01", FireTimer("wait:pause", gen), doc=POLL_DOC, now=at)
    except backend.error as exc:
        pytest.fail(f"the database refused the second pass: {exc}")
    second = events[-1].data.task_id
    assert (events[-1].type, events[-1].data.step, events[-1].data.attempt) == (
        "ActivityScheduled",
        "check",
        1,
    )
    assert second != first
    rows = backend.fetch(
        url, "SELECT task_id, attempt, status FROM tasks WHERE run_id = ? ORDER BY created_at", ["r01"]
    )
    assert rows == [(first, 1, "done"), (second, 1, "ready")]
    claimed = driver.command("r01", ClaimTask(second, "w1", deadline), doc=POLL_DOC, now=at)
    fencing = claimed[0].data.fencing
    driver.command("r01", ReportSuccess(second, 1, fencing, {"done": True}), doc=POLL_DOC, now=at)
    assert driver.load("r01").state.status == "completed"


# --- snapshots written by an older lockstep ------------------------------------------------------


def _outdated(snapshot: str, version: int | None) -> str:
    """The snapshot as an older build wrote it: no snapshot_version (or an older one), and without the
    fields added since the first release (so loading it as it is would differ from the replay)."""
    doc = json.loads(snapshot)
    for key in ("snapshot_version", "last_output_step", "approval"):
        del doc[key]
    if version is not None:
        doc["snapshot_version"] = version
    return json.dumps(doc)


@pytest.mark.parametrize("version", [None, 1], ids=["unversioned", "version-1"])
def test_outdated_snapshot_is_rebuilt_from_the_events(store, backend, url, driver: Driver, version):
    """An older-version snapshot loads as the replay, verifies clean, and is rewritten on the next append."""
    assert version != SNAPSHOT_VERSION
    driver.start("r01")
    fencing = driver.claim("r01")
    driver.command("r01", ReportSuccess(task_of("r01"), 1, fencing, {"ok": True}))  # sets last_output_step
    driver.start("r02", doc=WAIT_DOC)
    rows_before = {r: snapshot_row(backend, url, r) for r in ("r01", "r02")}
    for run_id in ("r01", "r02"):
        old = _outdated(rows_before[run_id][2], version)
        backend.execute(url, "UPDATE runs SET snapshot = ? WHERE run_id = ?", [old, run_id])

    with store.read() as tx:
        replays = {r: fold([e for e, _ in tx.events(r)]) for r in ("r01", "r02")}
        loaded = {r: tx.load_run(r) for r in ("r01", "r02")}
        listed = {s.run_id: s for s in tx.runs("t1", status=None, definition=None, after="", limit=10)}
    for run_id, replay in replays.items():
        assert replay is not None
        assert loaded[run_id] is not None
        assert loaded[run_id].state.to_json() == replay.to_json()
        assert loaded[run_id].last_hash == rows_before[run_id][3]
        assert listed[run_id].to_json() == replay.to_json()
    assert loaded["r01"].state.last_output_step == "work"  # the outdated snapshot had none
    assert loaded["r01"].state.status == "completed"

    report = Service(store, clock=lambda: T0).verify()
    assert [(r.run_id, r.ok, r.problems) for r in report] == [("r01", True, []), ("r02", True, [])]

    # An in-flight run goes on from the rebuilt state; its next append stores the current version.
    gen = loaded["r02"].state.timers["wait:nap"].generation
    driver.command("r02", FireTimer("wait:nap", gen), doc=WAIT_DOC, now=T0 + timedelta(seconds=10))
    seq, status, snapshot, _ = snapshot_row(backend, url, "r02")
    assert (seq, status) == (4, "completed")
    assert json.loads(snapshot)["snapshot_version"] == SNAPSHOT_VERSION


# --- definitions and start keys ------------------------------------------------------------------


def test_definition_rows_are_unique_per_tenant_name_and_digest(store):
    """The same digest cannot get a second version, a version cannot be reused, other tenants are separate."""
    doc = {"name": "flow", "steps": []}
    with store.write() as tx:
        tx.insert_definition("t1", DefinitionRow("flow", 1, "sha256:a", doc), iso(T0))
    with pytest.raises(ConcurrencyError), store.write() as tx:
        tx.insert_definition("t1", DefinitionRow("flow", 2, "sha256:a", doc), iso(T0))
    with pytest.raises(ConcurrencyError), store.write() as tx:
        tx.insert_definition("t1", DefinitionRow("flow", 1, "sha256:b", doc), iso(T0))
    with store.write() as tx:
        tx.insert_definition("t1", DefinitionRow("flow", 2, "sha256:b", {**doc, "x": 1}), iso(T0))
        tx.insert_definition("t2", DefinitionRow("flow", 1, "sha256:a", doc), iso(T0))
    with store.read() as tx:
        assert tx.definition("t1", "flow", None) == DefinitionRow("flow", 2, "sha256:b", {**doc, "x": 1})
        assert tx.definition("t1", "flow", 1) == DefinitionRow("flow", 1, "sha256:a", doc)
        assert tx.definition("t1", "flow", 3) is None
        assert tx.definition_by_digest("t1", "flow", "sha256:b").version == 2
        assert tx.definition_by_digest("t3", "flow", "sha256:a") is None
        assert [(d["name"], d["version"]) for d in tx.definitions("t1")] == [("flow", 1), ("flow", 2)]
        assert [(d["name"], d["version"]) for d in tx.definitions("t2")] == [("flow", 1)]


def test_start_key_is_unique_per_tenant(store, driver: Driver):
    """run_by_key finds a run by (tenant, key); a second run with the key in that tenant is refused."""
    driver.start("r01", tenant="t1", key="order-42", request_digest="sha256:req")
    with pytest.raises(ConcurrencyError):
        driver.start("r02", tenant="t1", key="order-42")
    driver.start("r03", tenant="t2", key="order-42")
    with store.read() as tx:
        assert tx.run_by_key("t1", "order-42") == ("r01", "sha256:req")
        assert tx.run_by_key("t2", "order-42") == ("r03", None)
        assert tx.run_by_key("t1", "other") is None
        assert tx.load_run("r02") is None
        assert tx.events("r02") == []


def test_runs_are_listed_per_tenant_with_filters_and_paging(store, driver: Driver):
    """runs() lists only the tenant's runs, filtered by status/definition, paged by run id."""
    driver.start("a01", tenant="t1")
    driver.start("a02", tenant="t1", doc=WAIT_DOC)
    driver.start("a03", tenant="t1")
    driver.start("b01", tenant="t2")
    with store.read() as tx:

        def ids(tenant="t1", status=None, definition=None, after="", limit=100):
            found = tx.runs(tenant, status=status, definition=definition, after=after, limit=limit)
            return [s.run_id for s in found]

        assert ids() == ["a01", "a02", "a03"]
        assert ids(tenant="t2") == ["b01"]
        assert ids(status="waiting") == ["a02"]
        assert ids(definition="flow") == ["a01", "a03"]
        assert ids(after="a01", limit=1) == ["a02"]
        assert tx.run_ids("t1") == ["a01", "a02", "a03"]
        assert tx.run_ids(None) == ["a01", "a02", "a03", "b01"]


# --- users, sessions and login counters ----------------------------------------------------------


def _user(tenant: str, name: str) -> UserRow:
    return UserRow(tenant, name, ("viewer",), (), f"hash-{tenant}-{name}", None, False, iso(T0))


def test_end_sessions_raises_the_generation_and_deletes_only_that_users_sessions(store):
    """end_sessions bumps the user's credential generation by one per call and deletes that user's
    sessions (other users' stay); sessions keep the generation they were opened with."""
    with store.write() as tx:
        tx.insert_tenant("acme", {}, iso(T0))
        tx.insert_user(_user("acme", "alice"))
        tx.insert_user(_user("acme", "bob"))
        tx.insert_session("s-alice", "acme", "alice", "csrf-a", 1, 10**13, 0)
        tx.insert_session("s-bob", "acme", "bob", "csrf-b", 1, 10**13, 0)
    with store.write() as tx:
        assert tx.end_sessions("acme", "alice") == 1
        assert tx.end_sessions("acme", "alice") == 2
        assert tx.end_sessions("acme", "nobody") is None
        tx.insert_session("s-alice-2", "acme", "alice", "csrf-c", 2, 10**13, 2)
    with store.read() as tx:
        alice = tx.user("acme", "alice")
        assert alice is not None
        assert alice.generation == 2
        assert tx.user("acme", "bob").generation == 0
        assert tx.session("s-alice") is None
        assert tx.session("s-bob") == ("acme", "bob", "csrf-b", 10**13, 0)
        assert tx.session("s-alice-2") == ("acme", "alice", "csrf-c", 10**13, 2)


def test_login_counters_start_fresh_and_keep_what_is_saved(store):
    """A key without a counter gets a fresh one (no attempts, window from now); a saved counter reads back
    as saved; a deleted one is fresh again."""
    key = "user:acme/alice"
    with store.write() as tx:
        assert tx.login_counters([key, "address:192.0.2.1"], 1000) == {
            key: LoginCounter(key, 0, 1000),
            "address:192.0.2.1": LoginCounter("address:192.0.2.1", 0, 1000),
        }
        tx.save_login_counter(LoginCounter(key, 5, 1000, 61_000, 1), 961_000)
    with store.write() as tx:
        assert tx.login_counters([key], 2000)[key] == LoginCounter(key, 5, 1000, 61_000, 1)
        tx.delete_login_counter(key)
    with store.write() as tx:
        assert tx.login_counters([key], 3000)[key] == LoginCounter(key, 0, 3000)


def test_expired_login_counters_are_pruned(store, backend, url):
    """Counters whose expiry has passed are deleted when counters are next read; others stay."""
    with store.write() as tx:
        tx.login_counters(["a", "b"], 0)
        tx.save_login_counter(LoginCounter("a", 1, 0), 500)
        tx.save_login_counter(LoginCounter("b", 1, 0), 5000)
    with store.write() as tx:
        tx.login_counters(["c"], 1000)
    keys = [r[0] for r in backend.fetch(url, "SELECT key FROM login_counters ORDER BY key")]
    assert keys == ["b", "c"]


def test_counting_login_attempts_from_threads_loses_none(store):
    """Transactions that read a counter with login_counters and save it plus one run one after the other:
    twenty threads at once leave exactly twenty attempts (no lost update, no error)."""
    key = "user:acme/alice"
    start = threading.Barrier(20)
    errors: list[BaseException] = []

    def count_one() -> None:
        start.wait(timeout=30)
        try:
            with store.write() as tx:
                c = tx.login_counters([key, "address:192.0.2.1"], 1000)[key]
                tx.save_login_counter(replace(c, attempts=c.attempts + 1), 10**9)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=count_one) for _ in range(20)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert errors == []
    with store.write() as tx:
        assert tx.login_counters([key], 1000)[key].attempts == 20


# --- wake-up hints and partitions: port methods on every backend ----------------------------------


def test_listen_returns_once_stopped_and_ensure_partitions_may_always_run(store, driver: Driver):
    """`listen` and `ensure_partitions` are on every store (no-ops where the database has no
    notifications or partitions): a listener returns soon after its stop is set, and ensure_partitions
    may run at any time, again and again, without changing what is stored."""
    stop = threading.Event()
    listener = threading.Thread(target=store.listen, args=(["lockstep_tasks"], lambda: None, stop))
    listener.start()
    store.ensure_partitions()
    driver.start("r01")
    store.ensure_partitions()
    stop.set()
    listener.join(timeout=10)
    assert not listener.is_alive()
    with store.read() as tx:
        assert [e.type for e, _ in tx.events("r01")] == ["RunStarted", "ActivityScheduled"]


# --- schema and migrations -----------------------------------------------------------------------


def test_fresh_database_is_migrated_on_open(backend, url, store):
    """Opening a new database applies every migration, creating exactly the objects they declare."""
    objects = backend.schema_objects(url)
    assert objects == backend.declared_schema()
    assert objects >= backend.engine_schema
    rows = backend.fetch(url, "SELECT version, name, checksum FROM schema_migrations ORDER BY version")
    assert rows == [(m.version, m.name, m.checksum) for m in backend.migrations()]
    assert store.upgrade() == []
    assert upgrade_store(url) == []


def test_reopening_keeps_data_and_does_not_migrate_again(backend, url, store, driver: Driver):
    """A second open of a current database applies nothing and sees the committed runs."""
    driver.start("r01")
    again = open_store(url)
    try:
        with again.read() as tx:
            assert tx.load_run("r01") is not None
        assert again.upgrade() == []
    finally:
        again.close()
    assert len(backend.fetch(url, "SELECT version FROM schema_migrations")) == len(backend.migrations())


def _open_refused(url: str) -> SchemaError:
    with pytest.raises(SchemaError) as info:
        open_store(url).close()
    return info.value


def test_older_schema_is_refused_until_db_upgrade(backend, url):
    """A database behind this build is refused naming `lockstep db upgrade`; upgrading makes it usable."""
    shipped = backend.migrations()
    if len(shipped) < 2:
        pytest.skip(
            f"{backend.name} ships {len(shipped)} migration(s): building an older schema needs at least "
            f"two (test_schema_behind_a_newer_build_is_refused_until_db_upgrade covers the refusal)"
        )
    backend.build_at(url, shipped[-2].version)
    err = _open_refused(url)
    assert "lockstep db upgrade" in str(err)
    assert f"schema version {shipped[-2].version}" in str(err)
    assert f"needs {shipped[-1].version}" in str(err)
    assert upgrade_store(url) == [f"{shipped[-1].version:04d}_{shipped[-1].name}"]
    open_store(url).close()
    assert backend.schema_objects(url) == backend.declared_schema()
    assert upgrade_store(url) == []


def test_schema_behind_a_newer_build_is_refused_until_db_upgrade(backend, url, store, monkeypatch):
    """A build shipping one more migration refuses the current database until `lockstep db upgrade`."""
    store.close()
    shipped = backend.migrations()
    probe = Migration(shipped[-1].version + 1, "probe", "CREATE TABLE probe_added (x INTEGER);\n")
    adapter = importlib.import_module(f"{backend.package}.adapter")
    monkeypatch.setattr(adapter, "migrations", lambda package: [*migrations(package), probe])
    err = _open_refused(url)
    assert "lockstep db upgrade" in str(err)
    assert f"schema version {shipped[-1].version}" in str(err)
    assert f"needs {probe.version}" in str(err)
    assert upgrade_store(url) == [f"{probe.version:04d}_probe"]
    open_store(url).close()
    assert ("table", "probe_added") in backend.schema_objects(url)
    assert upgrade_store(url) == []


def test_newer_schema_is_refused(backend, url, store):
    """A database migrated by a newer lockstep is refused (the fix is a newer lockstep, not db upgrade)."""
    store.close()
    backend.execute(
        url, "INSERT INTO schema_migrations VALUES (?, ?, ?, ?)", [9999, "future", "0" * 64, iso(T0)]
    )
    err = _open_refused(url)
    assert "9999" in str(err)
    assert "newer" in str(err)
    assert "upgrade lockstep" in str(err)


def test_changed_migration_checksum_is_refused(backend, url, store):
    """A database whose applied migration has a different checksum than the shipped file is refused."""
    store.close()
    backend.execute(url, "UPDATE schema_migrations SET checksum = ? WHERE version = 1", ["f" * 64])
    err = _open_refused(url)
    assert "0001_initial" in str(err)
    assert "changed" in str(err)


@pytest.mark.parametrize("setup", ["foreign_events_table", "migration_record_deleted"])
def test_unrecognised_existing_schema_is_refused_with_schema_error(backend, url, setup):
    """A database that has tables but no record of lockstep migrations is refused with SchemaError."""
    if setup == "foreign_events_table":
        with backend.raw(url) as conn:
            backend.run(conn, "CREATE TABLE events (something TEXT)")
    else:
        open_store(url).close()
        backend.execute(url, "DELETE FROM schema_migrations")
    try:
        with pytest.raises(SchemaError, match="not a lockstep database"):
            open_store(url).close()
    except backend.error as exc:
        raise AssertionError(f"raw {type(exc).__name__}: {exc}") from None


def _in_threads(n: int, fn) -> list:
    """Run fn() in n threads released together; return results in any order, re-raise any error."""
    barrier = threading.Barrier(n)
    results, errors = [], []
    lock = threading.Lock()

    def run() -> None:
        barrier.wait()
        try:
            out = fn()
        except Exception as exc:  # collected and re-raised below
            with lock:
                errors.append(exc)
        else:
            with lock:
                results.append(out)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert len(results) == n
    return results


def _all_names(backend: Backend) -> list[str]:
    return [f"{m.version:04d}_{m.name}" for m in backend.migrations()]


def test_concurrent_upgrade_from_threads_applies_each_migration_once(backend, url):
    """Eight threads upgrading the same fresh database at once: every migration is applied by exactly one."""
    results = _in_threads(8, lambda: upgrade_store(url))
    assert sorted(name for applied in results for name in applied) == _all_names(backend)
    assert sum(1 for applied in results if applied) == 1  # one upgrade runs all, the rest find nothing
    assert backend.schema_objects(url) == backend.declared_schema()


def test_concurrent_open_from_threads_migrates_once_without_errors(backend, url):
    """Eight threads opening the same fresh database at once all succeed and it is migrated once."""
    stores = _in_threads(8, lambda: open_store(url))
    for s in stores:
        s.close()
    rows = backend.fetch(url, "SELECT version FROM schema_migrations")
    assert sorted(r[0] for r in rows) == [m.version for m in backend.migrations()]
    assert backend.schema_objects(url) == backend.declared_schema()


UPGRADE_SCRIPT = """
import sys
from lockstep.store import upgrade_store
print(",".join(upgrade_store(sys.argv[1])))
"""


def test_concurrent_upgrade_from_processes_applies_each_migration_once(backend, url):
    """Four processes upgrading the same fresh database at once: each migration is applied exactly once."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", UPGRADE_SCRIPT, url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    results = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [err for _, err in results]
    applied = [name for out, _ in results for name in out.strip().split(",") if name]
    assert sorted(applied) == _all_names(backend)
    rows = backend.fetch(url, "SELECT version FROM schema_migrations")
    assert sorted(r[0] for r in rows) == [m.version for m in backend.migrations()]
    assert backend.schema_objects(url) == backend.declared_schema()
