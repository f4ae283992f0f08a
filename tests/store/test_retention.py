"""The storage contract of retention, on every backend: tombstones, legal holds, the purge's reads and
deletes, and what the database itself refuses (each refusal written as the attack: raw SQL past the
engine, as someone with the engine's database credentials would send it)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from lockstep.core.commands import FireTimer
from lockstep.core.timeutil import iso
from lockstep.store import ConcurrencyError, Store

from .conftest import T0, WAIT_DOC, Backend, Driver

DONE_AT = T0 + timedelta(seconds=10)
TOMBSTONE_INSERT = (
    "INSERT INTO tombstones (run_id, tenant, definition, version, status, started_at, finished_at, events, "
    "last_hash, purged_at, purged_by, reason, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def finished(driver: Driver, run_id: str, *, at=DONE_AT, tenant: str = "t1") -> None:
    """A run of `nap` (one 10 s wait) started at T0 and completed at `at`."""
    gen = driver.start(run_id, doc=WAIT_DOC, tenant=tenant)[-1].data.generation
    driver.command(run_id, FireTimer("wait:nap", gen), doc=WAIT_DOC, now=at)
    assert driver.load(run_id).state.status == "completed"


def tombstone(store: Store, run_id: str, **kw):
    with store.write() as tx:
        return tx.tombstone_run(
            run_id, purged_at=iso(DONE_AT), purged_by=kw.get("by", "retention"), reason="test"
        )


def forged(backend: Backend, url: str, run_id: str, **changes) -> None:
    """Insert a tombstone by hand, with the run's own values unless `changes` says otherwise."""
    seq, status, last_hash = backend.fetch(
        url, "SELECT seq, status, last_hash FROM runs WHERE run_id = ?", [run_id]
    )[0]
    row = {
        "run_id": run_id,
        "tenant": "t1",
        "definition": "nap",
        "version": 1,
        "status": status,
        "started_at": iso(T0),
        "finished_at": iso(DONE_AT),
        "events": seq,
        "last_hash": last_hash,
        "purged_at": iso(DONE_AT),
        "purged_by": "mallory",
        "reason": "raw SQL",
        "state": "purging",
        **changes,
    }
    backend.execute(url, TOMBSTONE_INSERT, list(row.values()))


def count(backend: Backend, url: str, table: str, run_id: str) -> int:
    return int(backend.fetch(url, f"SELECT COUNT(*) FROM {table} WHERE run_id = ?", [run_id])[0][0])


# --- the retention clock --------------------------------------------------------------------------


def test_a_run_that_finishes_is_recorded_with_the_time_of_its_terminal_event(backend, url, driver: Driver):
    """finished_runs gets a row (tenant, terminal time) exactly when a run ends, from any write path."""
    driver.start("r01", doc=WAIT_DOC)
    assert backend.fetch(url, "SELECT COUNT(*) FROM finished_runs") == [(0,)]
    finished(driver, "r02")
    assert backend.fetch(url, "SELECT run_id, tenant, finished_at FROM finished_runs") == [
        ("r02", "t1", iso(DONE_AT))
    ]


def test_purge_candidates_are_the_due_unheld_finished_runs_oldest_first(store, driver: Driver):
    """Due means finished at or before the cutoff; a held run is left out; the next one is reported."""
    for i, run_id in enumerate(["r03", "r01", "r02", "r04"]):
        finished(driver, run_id, at=DONE_AT + timedelta(seconds=i))
    driver.start("r05", doc=WAIT_DOC)  # unfinished
    cutoff = iso(DONE_AT + timedelta(seconds=2))
    with store.write() as tx:
        tx.insert_hold("t1", "r01", "case 7", "alice", iso(T0))
        assert tx.purge_candidates("t1", cutoff, 10) == ["r03", "r02"]
        assert tx.purge_candidates("t1", cutoff, 1) == ["r03"]
        assert tx.purge_candidates("t2", cutoff, 10) == []
        assert tx.purge_due("t1", cutoff) == (2, iso(DONE_AT + timedelta(seconds=3)))
        assert tx.finished_count("t1") == 4


# --- tombstones and the purge's deletes -----------------------------------------------------------


def test_a_tombstone_is_what_the_run_was_and_its_run_row_goes_with_it(store, backend, url, driver: Driver):
    """tombstone_run copies tenant, definition, status, times, event count and chain head, and deletes
    the run row (snapshot) and its retention-clock row in the same transaction; events stay for now."""
    finished(driver, "r01")
    loaded = driver.load("r01")
    t = tombstone(store, "r01")
    assert t is not None
    assert (t.tenant, t.definition, t.version, t.status) == ("t1", "nap", 1, "completed")
    assert (t.started_at, t.finished_at) == (iso(T0), iso(DONE_AT))
    assert (t.events, t.last_hash, t.state) == (loaded.state.seq, loaded.last_hash, "purging")
    with store.read() as tx:
        assert tx.load_run("r01") is None
        assert tx.tombstone("r01") == t
        assert tx.run_ids(None) == []
    assert count(backend, url, "finished_runs", "r01") == 0
    assert count(backend, url, "events", "r01") == loaded.state.seq


def test_the_purge_deletes_a_runs_rows_in_bounded_batches_then_its_tombstone_is_done(
    store, backend, url, driver: Driver
):
    """purge_run_rows deletes at most `limit` rows per call (events first, then the other tables);
    fewer than the limit means none is left, and only then may the tombstone become 'purged'."""
    finished(driver, "r01")
    events = count(backend, url, "events", "r01")
    assert count(backend, url, "timers", "r01") == 1
    tombstone(store, "r01")
    taken = []
    while True:
        with store.write() as tx:
            n = tx.purge_run_rows("r01", 2)
        taken.append(n)
        if n < 2:
            break
    assert sum(taken) == events + 1
    assert max(taken) == 2
    for table in ("events", "timers", "tasks"):
        assert count(backend, url, table, "r01") == 0
    with store.write() as tx:
        assert tx.finish_tombstone("r01", iso(DONE_AT)) is True
        assert tx.finish_tombstone("r01", iso(DONE_AT)) is False
        assert tx.tombstone("r01").state == "purged"  # type: ignore[union-attr]
        assert tx.tombstone_counts("t1") == {"purged": 1}
        assert tx.tombstones_with_rows(None, 10) == []


def test_an_unfinished_run_gets_no_tombstone(store, backend, url, driver: Driver):
    """The store skips a running run, and a tombstone inserted by hand for it is refused by the database."""
    driver.start("r01", doc=WAIT_DOC)
    assert tombstone(store, "r01") is None
    with pytest.raises(backend.error, match="only for an existing finished run"):
        forged(backend, url, "r01", status="completed")
    with pytest.raises(backend.error, match="only for an existing finished run"):
        forged(backend, url, "r01")  # its real status, waiting
    assert backend.fetch(url, "SELECT COUNT(*) FROM tombstones") == [(0,)]
    assert driver.load("r01").state.status == "waiting"


def test_a_forged_tombstone_that_misstates_the_run_is_refused(backend, url, driver: Driver):
    """A tombstone must carry the run's own tenant, definition, status, event count and chain head."""
    finished(driver, "r01")
    for lie in (
        {"tenant": "t2"},
        {"definition": "other"},
        {"version": 2},
        {"status": "failed"},
        {"events": 1},
        {"last_hash": "0" * 64},
        {"state": "purged"},
    ):
        with pytest.raises(backend.error, match="tombstone"):
            forged(backend, url, "r01", **lie)
    assert backend.fetch(url, "SELECT COUNT(*) FROM tombstones") == [(0,)]


def test_raw_deletes_of_a_live_runs_rows_are_refused(backend, url, driver: Driver):
    """Without a tombstone, no event, run, task or timer row of a run can be deleted, finished or not."""
    driver.start("r01")  # an activity run: a task row
    finished(driver, "r02")  # a finished run: a timer row
    before = {
        t: count(backend, url, t, r) for t in ("events", "runs", "tasks", "timers") for r in ("r01", "r02")
    }
    with pytest.raises(backend.error, match="append-only"):
        backend.execute(url, "DELETE FROM events WHERE run_id = ? AND seq = 2", ["r01"])
    with pytest.raises(backend.error, match="append-only"):
        backend.execute(url, "DELETE FROM events WHERE run_id = ?", ["r02"])
    for table, run_id in (("runs", "r01"), ("runs", "r02"), ("tasks", "r01"), ("timers", "r02")):
        with pytest.raises(backend.error, match="purge"):
            backend.execute(url, f"DELETE FROM {table} WHERE run_id = ?", [run_id])
    after = {
        t: count(backend, url, t, r) for t in ("events", "runs", "tasks", "timers") for r in ("r01", "r02")
    }
    assert after == before


def test_events_are_never_updated_not_even_those_of_a_purged_run(store, backend, url, driver: Driver):
    """A tombstone allows deleting a run's events, never rewriting them."""
    finished(driver, "r01")
    tombstone(store, "r01")
    with pytest.raises(backend.error, match="append-only"):
        backend.execute(url, "UPDATE events SET data = '{}' WHERE run_id = ?", ["r01"])
    backend.execute(url, "DELETE FROM events WHERE run_id = ? AND seq = 1", ["r01"])  # a tombstone: allowed
    assert count(backend, url, "events", "r01") == 3


def test_a_held_run_gets_no_tombstone(store, backend, url, driver: Driver):
    """An active hold on the run, or on its tenant, makes the database refuse its tombstone."""
    finished(driver, "r01")
    with store.write() as tx:
        hold = tx.insert_hold("t1", "r01", "case 7", "alice", iso(T0))
    with pytest.raises(backend.error, match="held run is never purged"):
        forged(backend, url, "r01")
    with pytest.raises(backend.error, match="held run is never purged"):
        tombstone(store, "r01")
    with store.write() as tx:
        assert tx.release_hold(hold.id, "bob", iso(DONE_AT), "case closed")
        tx.insert_hold("t1", None, "tenant under audit", "carol", iso(DONE_AT))
    with pytest.raises(backend.error, match="held run is never purged"):
        tombstone(store, "r01")
    assert driver.load("r01").state.status == "completed"


def test_a_tombstone_is_done_only_when_nothing_is_left_and_is_never_rewritten(
    store, backend, url, driver: Driver
):
    """'purged' while events remain, any other change of a tombstone, and deleting one are refused."""
    finished(driver, "r01")
    tombstone(store, "r01")
    with pytest.raises(backend.error, match="neither the run row nor any of its events"):
        backend.execute(
            url, "UPDATE tombstones SET state = 'purged', done_at = 'x' WHERE run_id = ?", ["r01"]
        )
    with pytest.raises(backend.error, match="only moves from purging to purged"):
        backend.execute(url, "UPDATE tombstones SET reason = 'nothing happened' WHERE run_id = ?", ["r01"])
    with pytest.raises(backend.error, match="kept for good"):
        backend.execute(url, "DELETE FROM tombstones WHERE run_id = ?", ["r01"])
    with store.write() as tx:
        while tx.purge_run_rows("r01", 100) == 100:
            pass
        assert tx.finish_tombstone("r01", iso(DONE_AT))
    with pytest.raises(backend.error, match="only moves from purging to purged"):
        backend.execute(
            url, "UPDATE tombstones SET state = 'purging', done_at = NULL WHERE run_id = ?", ["r01"]
        )


def test_holds_are_one_per_target_released_once_and_kept(store, backend, url, driver: Driver):
    """A second active hold on a target is refused; a release is once, with who and why; a hold row is
    never edited or deleted by hand; a purged run cannot be held."""
    driver.start("r01", doc=WAIT_DOC)
    with store.write() as tx:
        h = tx.insert_hold("t1", "r01", "case 7", "alice", iso(T0))
        tenant_hold = tx.insert_hold("t1", None, "audit", "alice", iso(T0))
    with pytest.raises(ConcurrencyError), store.write() as tx:
        tx.insert_hold("t1", "r01", "again", "bob", iso(T0))
    with store.write() as tx:
        assert tx.active_hold("t1", "r01") == h
        assert tx.active_hold("t1", None) == tenant_hold
        assert tx.run_holds_count("t1") == 1
        assert tx.release_hold(h.id, "bob", iso(DONE_AT), "closed")
        assert not tx.release_hold(h.id, "bob", iso(DONE_AT), "closed twice")
        assert tx.active_hold("t1", "r01") is None
        released = tx.holds_of_run("r01")[0]
    assert (released.released_by, released.release_reason) == ("bob", "closed")
    with pytest.raises(backend.error, match="released, once"):
        backend.execute(url, "UPDATE holds SET reason = 'nothing' WHERE id = ?", [h.id])
    with pytest.raises(backend.error, match="holds are kept"):
        backend.execute(url, "DELETE FROM holds WHERE id = ?", [tenant_hold.id])
    with pytest.raises(backend.error, match="placed unreleased"):
        backend.execute(
            url,
            "INSERT INTO holds (tenant, run_id, reason, held_by, held_at, released_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            ["t1", "r01", "pre-released", "mallory", iso(T0), iso(T0)],
        )
    with store.write() as tx:
        assert tx.release_hold(tenant_hold.id, "bob", iso(DONE_AT), "audit done")
    finished(driver, "r02")
    tombstone(store, "r02")
    with pytest.raises(ConcurrencyError), store.write() as tx:
        tx.insert_hold("t1", "r02", "too late", "alice", iso(DONE_AT))
