"""The schedules' checker (lab/faults/schedcheck.py) finds each violation in a database that has it and
none in a clean one, so a green `schedules_under_faults` means something: a slot with two runs, a run
before its slot, a due slot with neither a run nor a record, a missed record the policy does not excuse,
and a run for a slot that was not due."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lab.faults.checker import Verdict
from lab.faults.schedcheck import Watched, check_schedules
from lab.fleet import sql
from lockstep import Engine
from lockstep.core.timeutil import parse_iso

NAP = {"name": "nap", "steps": [{"id": "nap", "wait": "1h"}]}


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2025, 1, 1, 0, 0, 0, 500_000, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Engine, Clock, Any, list[Watched]]]:
    """Two schedules (every second: allow+all; every two: allow+none) fired over 10 s with a gap of
    5 s without a scheduler, so `twos` recorded a missed slot its policy excuses."""
    clock = Clock()
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    engine = Engine.open(url, clock=clock)
    svc = engine.service
    svc.principals.create_tenant("default")
    svc.principals.set_tenant("default", max_schedule_rate=3600)
    engine.publish(NAP)
    watched = []
    for name, cron, catch_up in (("ones", "* * * * * *", "all"), ("twos", "*/2 * * * * *", "none")):
        view = svc.schedules.create(
            "default", name, definition="nap", cron=cron, overlap="allow", catch_up=catch_up
        )
        first = int(parse_iso(str(view.next_fire_at)).timestamp() * 1000)
        watched.append(Watched(name, cron, "allow", catch_up, 10, first))
    for step in (1, 1, 1, 5, 1, 1):
        clock.now += timedelta(seconds=step)
        svc.fire_due_schedules()
    try:
        yield engine, clock, SimpleNamespace(sql=lambda s, p=(): sql(url, s, p)), watched
    finally:
        engine.close()


def verdict(fleet: Any, watched: list[Watched]) -> dict[str, int]:
    v = Verdict()
    check_schedules(fleet, "default", watched, v)
    return {k: n for k, n in v.violations.items() if n}


def test_a_clean_history_has_no_violation(world: Any) -> None:
    _engine, _clock, fleet, watched = world
    assert verdict(fleet, watched) == {}
    missed = fleet.sql("SELECT COUNT(*) FROM schedule_slots WHERE outcome = 'missed'")[0][0]
    assert missed == 1  # the policy-excused kind, so the clean case exercises that path


def test_a_second_run_for_a_slot_is_a_duplicate(world: Any) -> None:
    engine, _clock, fleet, watched = world
    engine.start("nap", key="ones:2025-01-01T00:00:02.000Z#again")
    assert verdict(fleet, watched) == {"slots_duplicated": 1}


def test_a_run_before_its_slot_is_early(world: Any) -> None:
    _engine, _clock, fleet, watched = world
    fleet.sql(
        "UPDATE runs SET created_at = '2025-01-01T00:00:01.000Z' WHERE start_key = ?",
        ("ones:2025-01-01T00:00:03.000Z",),
    )
    assert verdict(fleet, watched) == {"slots_early": 1}


def test_a_slot_without_run_or_record_is_missed(world: Any) -> None:
    _engine, _clock, fleet, watched = world
    fleet.sql("DELETE FROM schedule_slots WHERE outcome = 'missed'")
    assert verdict(fleet, watched) == {"slots_missed": 2}  # the two slots of the deleted range


def test_a_missed_record_the_policy_does_not_excuse(world: Any) -> None:
    """The same record under catch-up `all` (limit 10) is a violation: `all` starts every slot."""
    _engine, _clock, fleet, watched = world
    strict = [
        w if w.name != "twos" else Watched(w.name, w.cron, w.overlap, "all", 10, w.first) for w in watched
    ]
    assert verdict(fleet, strict) == {"slots_missed": 1}


def test_a_run_for_a_slot_not_due_is_unknown(world: Any) -> None:
    engine, _clock, fleet, watched = world
    engine.start("nap", key="ones:2025-01-01T01:00:00.000Z")
    engine.start("nap", key="ones:2025-01-01T00:00:02.500Z")
    assert verdict(fleet, watched) == {"slots_unknown": 2}
