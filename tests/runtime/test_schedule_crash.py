"""Schedules across real crashes, on both backends: a `lockstep scheduler` firing an every-second schedule
is SIGKILLed by a fail point in the middle of a fire (the run's start written but not the schedule's
advance; the advance written but not committed; right after the commit) and a new scheduler takes over;
two schedulers fire the same schedule at once. Afterwards every slot from the schedule's first to its
next has exactly one run (by start key), no run belongs to a slot that was not due, and every run was
started by `schedule:<name>`."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prockit import Cluster, wait_until

from lockstep import Engine
from lockstep.app import failpoints
from lockstep.core.schedule import parse_cron, slot_key, upcoming
from lockstep.core.timeutil import parse_iso

pytestmark = pytest.mark.slow

NAP = {"name": "nap", "steps": [{"id": "nap", "wait": "1h"}]}
EVERY_SECOND = parse_cron("* * * * * *", "UTC")


def setup(cluster: Cluster, engine: Engine) -> int:
    """Tenant default, every-second schedule `tick` (overlap allow, catch-up all): its first slot (ms)."""
    cluster.cli("tenants", "create", "default")
    cluster.cli("tenants", "set", "default", "--max-schedule-rate", "3600")
    engine.publish(NAP)
    made = cluster.cli_json(
        "schedules", "create", "tick", "--definition", "nap", "--cron", "* * * * * *",
        "--overlap", "allow", "--catch-up", "all", "--catch-up-limit", "100",
    )  # fmt: skip
    return int(parse_iso(made["next_fire_at"]).timestamp() * 1000)


def check_each_slot_once(cluster: Cluster, engine: Engine, first: int) -> dict[str, Any]:
    """Every slot in [first, next) has one run, no other run exists; returns the schedule's view."""
    shown = cluster.cli_json("schedules", "show", "tick", "--json")
    nxt = int(parse_iso(shown["next_fire_at"]).timestamp() * 1000)
    slots = [first, *(t for t in upcoming(EVERY_SECOND, first, 10_000) if t < nxt)]
    runs = engine.runs(limit=100_000)
    keys = [r["start_key"] for r in runs]
    assert len(keys) == len(set(keys)), "a slot started two runs"
    assert sorted(keys) == sorted(slot_key("tick", t) for t in slots)
    assert shown["runs_started"] == len(slots)
    assert shown["slots_missed"] == 0
    for r in runs:
        started = engine.events(r["run_id"])[0]
        assert started["data"]["actor"] == "schedule:tick"
        slot = int(parse_iso(r["start_key"].removeprefix("tick:")).timestamp() * 1000)
        assert slot <= int(parse_iso(started["at"]).timestamp() * 1000), "a run started before its slot"
    return shown


def hits(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize(
    "point",
    [
        "schedule.started=kill@3",  # the third slot's run written, the schedule not advanced
        "schedule.advanced=kill@3",  # the advance written too, nothing committed
        "commit.StartRun=kill@3",  # inside the start itself
        "schedule.committed=kill@3",  # right after a commit: the slot must not fire again
    ],
)
def test_a_scheduler_killed_mid_fire_leaves_each_slot_once(
    cluster: Cluster, engine: Engine, tmp_path: Path, point: str
) -> None:
    log = tmp_path / "failpoints.jsonl"
    cluster.env[failpoints.LOG_ENV] = str(log)
    first = setup(cluster, engine)
    s1 = cluster.scheduler("s1", faults=point, wait=False)
    wait_until(lambda: not s1.alive(), 60, f"the scheduler to die at {point}")
    killed = [h for h in hits(log) if h["action"] == "kill"]
    assert [h["pid"] for h in killed] == [s1.pid]
    before = len(engine.runs(limit=1000))
    assert before >= 2  # two slots were fired before the kill
    cluster.scheduler("s2")
    wait_until(lambda: len(engine.runs(limit=1000)) >= before + 3, 60, "the next scheduler to fire")
    time.sleep(0.5)
    for proc in cluster.procs:
        proc.kill()
    check_each_slot_once(cluster, engine, first)


def test_two_schedulers_at_once_fire_each_slot_once(cluster: Cluster, engine: Engine) -> None:
    """Two schedulers (PostgreSQL: sharing the partitions, one leaving them to the other when killed)
    over about 8 one-second slots: each slot has exactly one run."""
    first = setup(cluster, engine)
    a = cluster.scheduler("a")
    cluster.scheduler("b")
    wait_until(lambda: len(engine.runs(limit=1000)) >= 4, 60, "slots to fire")
    a.kill()  # its partitions (PostgreSQL) move to b after their lease (--partition-ttl)
    cluster.scheduler("c")
    wait_until(lambda: len(engine.runs(limit=1000)) >= 8, 60, "more slots to fire")
    for proc in cluster.procs:
        proc.kill()
    shown = check_each_slot_once(cluster, engine, first)
    assert shown["runs_started"] >= 8
    assert datetime.now(UTC) > parse_iso(shown["last_slot"])
