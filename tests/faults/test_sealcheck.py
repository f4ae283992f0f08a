"""The key checks of the fault suite (lab/faults/sealing.py, and purgecheck.py's sealed_left and
transactions_failed) find each violation in a database, ledger or log that has it, and none in a clean
one, so a green `purge_under_load` or `rotate_under_load` means something."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from lab.faults import activities
from lab.faults.activities import DOWNSTREAM_ENV
from lab.faults.base import pay_definition
from lab.faults.checker import Verdict
from lab.faults.downstream import Downstream, LedgerReader
from lab.faults.purgecheck import PurgeWatch, Tracked, check_processes, check_sealed
from lab.faults.sealing import Started, check_given, check_values, rotation_left, sealed_definition
from lab.fleet import Proc, sql
from lockstep import Engine
from lockstep.app.keys import create_key_file
from lockstep.runtime.activity import Registry


@dataclass
class World:
    engine: Engine
    fleet: Any  # what the checks read through: raw SQL on the database, its backend
    ledger: LedgerReader
    started: dict[str, Started]


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """Three sealed runs of the suite's pay definition (input and charge output sensitive) completed
    against the downstream by a worker in this process, on a SQLite file with a key."""
    ds = Downstream(tmp_path / "ledger.db")
    ds.start()
    monkeypatch.setenv(DOWNSTREAM_ENV, ds.url)
    key = tmp_path / "lockstep.key"
    create_key_file(key)
    url = f"sqlite:///{tmp_path / 'l.db'}"
    engine = Engine.open(url, keys=key)
    engine.service.principals.create_tenant("default")
    registry = Registry()
    for name, fn in (("pay.charge", activities.charge), ("pay.ship", activities.ship)):
        registry.register(name, fn)
    engine.publish(sealed_definition(pay_definition(wait="10ms"), output=True))
    started = {}
    for i in range(3):
        doc = {"amount": 100 + i, "card": f"CARD-{i}", "ref": f"r{i}"}
        started[engine.start("pay", input=doc)] = Started("default", doc)
    worker = engine.worker(registry, lease_ttl=timedelta(seconds=5)).start()
    try:
        for run_id in started:
            assert engine.wait_for(run_id, timeout=30)["status"] == "completed"
    finally:
        worker.stop()
    fleet = SimpleNamespace(sql=lambda s, p=(): sql(url, s, p), backend="sqlite")
    try:
        yield World(engine, fleet, LedgerReader(tmp_path / "ledger.db"), started)
    finally:
        engine.close()
        ds.stop()


def found(check: Any, *args: Any) -> dict[str, int]:
    v = Verdict()
    check(*args, v)
    return {k: n for k, n in v.violations.items() if n}


def test_sealed_runs_that_open_to_their_own_values_are_clean(world: World) -> None:
    """Each run's input and charge output open to what it was started with and the downstream got."""
    assert found(check_values, world.engine, world.started) == {}
    assert found(check_given, world.ledger, world.started) == {}
    v = Verdict()
    assert check_values(world.engine, world.started, v) == 3
    assert check_given(world.ledger, world.started, v) == 3


def test_a_value_that_opens_to_something_else_or_not_at_all_is_keys_lost(world: World) -> None:
    """A run whose input opens to other values, and one whose key row is gone, are both flagged."""
    first, second, _third = world.started
    wrong = dict(world.started)
    wrong[first] = Started("default", {**world.started[first].input, "amount": 7})
    world.fleet.sql("DELETE FROM run_keys WHERE run_id = ?", (second,))
    # first: input, RunStarted input and charge output differ; second: does not open at all.
    assert found(check_values, world.engine, wrong) == {"keys_lost": 4}
    # The downstream was sent 100, not 7.
    assert found(check_given, world.ledger, wrong) == {"keys_lost": 1}


def test_a_rotation_is_finished_only_once_every_run_key_moved_and_old_versions_are_gone(
    world: World,
) -> None:
    """After a rotation the run keys are on v1 (pending); the re-wrap passes move them and retire v1."""
    assert rotation_left(world.fleet, "default", 1) is None
    world.engine.service.keys.rotate("default", "test")
    assert "run keys on older versions {1: 3}" in str(rotation_left(world.fleet, "default", 2))
    while world.engine.service.rewrap_keys(1):
        pass
    assert rotation_left(world.fleet, "default", 2) is None
    assert check_values(world.engine, world.started, Verdict()) == 3


def test_a_purged_run_leaving_its_key_or_a_sealed_value_is_sealed_left(world: World) -> None:
    """A clean purge leaves nothing; a key row put back, a ciphertext copied into another table and a
    purged run whose values the watcher never read are each flagged."""
    watch = PurgeWatch(world.fleet)
    watch.sample()  # the runs are finished: it reads their sealed values now
    runs = list(world.started)
    assert all(len(watch.sealed[r]) >= 3 for r in runs)
    world.engine.service.principals.set_tenant("default", retention=0.01)
    time.sleep(0.05)
    assert world.engine.service.retention.purge.run_pass().purged == 3
    tracked = {r: Tracked("default") for r in runs}
    assert found(check_sealed, world.fleet, tracked, watch) == {}

    world.fleet.sql(
        "INSERT INTO run_keys (run_id, tenant, key_version, wrapped) SELECT ?, tenant, version, wrapped"
        " FROM tenant_keys LIMIT 1",
        (runs[0],),
    )
    payload = sorted(watch.sealed[runs[1]])[0]
    world.fleet.sql("UPDATE definitions SET document = document || ?", (payload,))
    del watch.sealed[runs[2]]
    assert found(check_sealed, world.fleet, tracked, watch) == {"sealed_left": 3}


def test_deadlocks_unexpected_failures_and_unexplained_deaths_are_transactions_failed() -> None:
    """A lost race in a log is counted; a deadlock, an unexpected failure and a death without a fail
    point are flagged; a death by a fail point is not."""

    def proc(name: str, pid: int, log: str, *, alive: bool = True) -> Proc:
        return cast(Proc, SimpleNamespace(name=name, pid=pid, log=lambda: log, alive=lambda: alive))

    procs = [
        proc("s1", 1, "WARNING purge pass failed: could not serialize access; retrying in 0s\n"),
        proc("s2", 2, "scheduler running\n", alive=False),  # killed by its fail point
        proc("s3", 3, "ERROR psycopg.errors.DeadlockDetected: deadlock detected\n"),
        proc("s4", 4, "ERROR scheduler pass failed unexpectedly\n"),
        proc("w1", 5, "worker w1 serving pay.charge\n", alive=False),
    ]
    v = Verdict()
    assert check_processes(procs, {2}, v) == {"passes retried (lost race)": 1}
    assert v.violations["transactions_failed"] == 3
    assert check_processes(procs[:2], {2}, Verdict()) == {"passes retried (lost race)": 1}
