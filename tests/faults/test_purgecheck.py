"""The retention checker (lab/faults/purgecheck.py) finds each purge violation in a database that has it,
and none in a clean one, so a green `purge_under_load` means something."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lab.faults.checker import Verdict
from lab.faults.purgecheck import PurgeWatch, Seen, Tracked, check_purge
from lab.fleet import sql
from lockstep import Engine
from lockstep.core.timeutil import parse_iso

QUICK = {"name": "quick", "steps": [{"id": "nap", "wait": "1s"}]}
KEEP = {"default": 2.0}


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2025, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Engine, Clock, Any]]:
    """An engine with a fake clock on a SQLite file, and the raw-SQL handle the checker reads through."""
    clock = Clock()
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    engine = Engine.open(url, clock=clock)
    engine.service.principals.create_tenant("default")
    engine.publish(QUICK)
    engine.service.principals.set_tenant("default", retention=2)
    try:
        yield engine, clock, SimpleNamespace(sql=lambda s, p=(): sql(url, s, p), backend="sqlite")
    finally:
        engine.close()


def finish(engine: Engine, clock: Clock, n: int) -> list[str]:
    ids = [engine.start("quick") for _ in range(n)]
    clock.now += timedelta(seconds=1)
    engine.service.fire_due_timers()
    return ids


def seen_as_stored(fleet: Any, run_ids: list[str]) -> dict[str, Seen]:
    """What a watcher would have recorded: unfinished at start, then the finished row."""
    out = {}
    for run_id, status, seq, last_hash, created, updated in fleet.sql(
        "SELECT run_id, status, seq, last_hash, created_at, updated_at FROM runs"
    ):
        if run_id in run_ids:
            out[run_id] = Seen(
                unfinished_at=parse_iso(created).timestamp(),
                finished=(status, seq, last_hash),
                finished_at=parse_iso(updated).timestamp(),
            )
    return out


def run_check(fleet: Any, tracked: dict[str, Tracked], seen: dict[str, Seen]) -> dict[str, int]:
    watch = PurgeWatch(fleet)
    watch.seen = seen
    v = Verdict()
    check_purge(fleet, tracked, watch, KEEP, period_s=0.5, allowance_s=1.0, held_tenants={"vault"}, v=v)
    return {k: n for k, n in v.violations.items() if n}


def test_a_clean_purge_has_no_violations(world: Any) -> None:
    """Due runs purged with complete tombstones, a held one kept: nothing flagged."""
    engine, clock, fleet = world
    ids = finish(engine, clock, 3)
    engine.service.retention.hold_run("default", ids[0], "case", "driver")
    seen = seen_as_stored(fleet, ids)
    clock.now += timedelta(seconds=3)
    assert engine.service.retention.purge.run_pass().purged == 2
    tracked = {r: Tracked("default", held=r == ids[0]) for r in ids}
    assert run_check(fleet, tracked, seen) == {}


def test_each_purge_violation_is_found(world: Any) -> None:
    """A lost run, a purged unfinished, held or early run, a due run kept, an incomplete or wrong
    tombstone: each is flagged under its own name."""
    engine, clock, fleet = world
    ids = finish(engine, clock, 6)
    seen = seen_as_stored(fleet, ids)
    clock.now += timedelta(seconds=3)
    with engine.service.store.write() as tx:  # a tombstone whose rows are never deleted
        tx.tombstone_run(ids[5], purged_at="2025-01-01T00:00:04.000Z", purged_by="x", reason="y")
    for run_id in ids[:4]:
        engine.service.retention.purge_run("default", run_id, "erasure", "ops")
    # ids[4]: finished, never purged, though its retention passed long ago (by the wall clock).
    tracked = {r: Tracked("default") for r in ids}
    tracked["0" * 32] = Tracked("default")  # started, then gone without a tombstone
    tracked[ids[0]] = Tracked("default", can_finish=False)
    tracked[ids[1]] = Tracked("default", held=True)
    seen[ids[2]] = Seen(
        unfinished_at=parse_iso("2025-01-01T00:00:04.000Z").timestamp(), finished=seen[ids[2]].finished
    )
    status, seq, last_hash = seen[ids[3]].finished  # type: ignore[misc]
    seen[ids[3]] = Seen(unfinished_at=0.0, finished=(status, seq - 1, last_hash))
    assert run_check(fleet, tracked, seen) == {
        "runs_lost": 1,
        "purged_unfinished": 1,
        "purged_held": 1,
        "purged_early": 1,
        "kept_past_retention": 1,
        "purge_incomplete": 1,
        "tombstone_mismatch": 1,
    }


def test_a_purge_before_the_end_plus_retention_is_early_even_unwatched(world: Any) -> None:
    """A run purged 1 s after its terminal event (retention 2 s) is purged_early by its tombstone's own
    times, though the watcher never saw it unfinished; one purged 3 s after is not."""
    engine, clock, fleet = world
    ids = finish(engine, clock, 2)
    seen = {r: Seen(finished=s.finished) for r, s in seen_as_stored(fleet, ids).items()}
    clock.now += timedelta(seconds=1)
    engine.service.retention.purge_run("default", ids[0], "erasure", "ops")
    clock.now += timedelta(seconds=2)
    engine.service.retention.purge_run("default", ids[1], "erasure", "ops")
    assert run_check(fleet, {r: Tracked("default") for r in ids}, seen) == {"purged_early": 1}
