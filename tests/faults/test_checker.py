"""The fault checker finds each kind of violation in a history or ledger that has it, and none in a
clean one (so a green fault report means something)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from lab.faults import checker
from lab.faults.activities import DOWNSTREAM_ENV
from lab.faults.base import pay_definition
from lab.faults.checker import Expect, Verdict, check
from lab.faults.downstream import Downstream, LedgerReader
from lockstep import Engine
from lockstep.core.events import Event
from lockstep.runtime.activity import Registry

T = "2026-01-01T00:00:00Z"


def history(*items: tuple[str, dict[str, Any]]) -> list[Event]:
    """Events as a store would read them, with only the fields the checker looks at."""
    return [event(kind, data, i + 1) for i, (kind, data) in enumerate(items)]


def event(kind: str, data: dict[str, Any], seq: int) -> Event:
    return Event.from_json({"seq": seq, "type": kind, "at": T, "v": 1, "data": data})


def flags(fn: Any, *args: Any) -> dict[str, int]:
    v = Verdict()
    fn("run1", *args, v)
    return {k: n for k, n in v.violations.items() if n}


def ok(step: str, attempt: int = 1, **extra: Any) -> tuple[str, dict[str, Any]]:
    return (
        "ActivitySucceeded",
        {"step": step, "task_id": f"run1/{step}/{attempt}", "attempt": attempt, **extra},
    )


def test_a_clean_history_has_no_violations() -> None:
    """Start, one success, a timer, the end, then a late result recorded as evidence: nothing flagged."""
    events = history(
        ("RunStarted", {"definition": {"name": "pay", "version": 1}}),
        ok("charge"),
        ("TimerFired", {"key": "settle", "generation": 1}),
        ("RunCompleted", {}),
        ("ResultIgnored", {"task_id": "run1/charge/1"}),
    )
    assert flags(checker._transitions, events) == {}


def test_two_outcomes_of_one_attempt_are_a_duplicate_transition() -> None:
    """The same (task, attempt) succeeding twice is flagged (as an attempt and as a step)."""
    events = history(ok("charge"), ok("charge"))
    assert flags(checker._transitions, events) == {"duplicate_transitions": 2}


def test_a_step_may_succeed_again_only_after_an_operator_retry() -> None:
    """A second success of a step after StepRetried is allowed; without it, it is flagged."""
    retried = history(ok("charge", 1), ("StepRetried", {"step": "charge"}), ok("charge", 2))
    assert flags(checker._transitions, retried) == {}
    assert flags(checker._transitions, history(ok("charge", 1), ok("charge", 2))) == {
        "duplicate_transitions": 1
    }


def test_a_timer_generation_firing_twice_is_flagged() -> None:
    """TimerFired twice for one (key, generation) is a duplicate transition."""
    fired = ("TimerFired", {"key": "settle", "generation": 1})
    assert flags(checker._transitions, history(fired, fired)) == {"duplicate_transitions": 1}


def test_a_transition_after_the_end_is_state_going_back() -> None:
    """Anything but audit-only evidence after RunCompleted means a finished run changed."""
    events = history(("RunCompleted", {}), ok("ship"))
    assert flags(checker._transitions, events) == {"state_went_back": 1}


def test_one_link_deciding_twice_is_a_token_consumed_twice() -> None:
    """Two decisions carrying one link id (or one approver counted twice) are flagged."""
    decision = ("ApprovalDecisionRecorded", {"request_id": "q1", "approver": "alice", "link_id": "l1"})
    assert flags(checker._approvals, history(decision, decision)) == {"tokens_consumed_twice": 2}


def test_a_success_carrying_another_steps_effect_is_an_effect_lost() -> None:
    """A ship success whose result is the charge's downstream effect is flagged (the ship never ran)."""
    by_id = {"charge_1": {"run_id": "run1", "step": "charge", "response": {"id": "charge_1"}}}
    events = history(
        ("ActivityScheduled", {"task_id": "run1/ship/1", "activity": "pay.ship"}),
        ok("ship", output={"id": "charge_1"}),
    )
    assert flags(checker._effects, events, by_id) == {"effects_lost": 1}
    events[1] = event(
        "ActivitySucceeded", {**events[1].data_json(), "step": "charge", "task_id": "run1/ship/1"}, 2
    )
    assert flags(checker._effects, events, by_id) == {}


def test_a_task_started_by_a_worker_of_another_version_is_flagged() -> None:
    """After a migration to v2, a v1-only worker starting the run's task is flagged."""
    events = history(
        ("RunStarted", {"definition": {"name": "pay", "version": 1}}),
        ("ActivityStarted", {"worker": "v1-a"}),
        ("WorkflowMigrated", {"definition": {"name": "pay", "version": 2}}),
        ("ActivityStarted", {"worker": "v1-a"}),
        ("ActivityStarted", {"worker": "v2-a"}),
    )
    v = Verdict()
    checker._versions("run1", events, {"v1-a": {1}, "v2-a": {2}}, v)
    assert v.violations["wrong_version"] == 1


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Engine, Downstream]]:
    """An engine on a SQLite file and the downstream service, with the suite's activities registered."""
    ds = Downstream(tmp_path / "ledger.db")
    ds.start()
    monkeypatch.setenv(DOWNSTREAM_ENV, ds.url)
    engine = Engine.open(f"sqlite:///{tmp_path / 'l.db'}")
    try:
        yield engine, ds
    finally:
        engine.close()
        ds.stop()


def _run_all(engine: Engine, n: int) -> list[str]:
    from lab.faults import activities

    registry = Registry()
    for name, fn in (("pay.charge", activities.charge), ("pay.ship", activities.ship)):
        registry.register(name, fn)
    engine.publish(pay_definition(wait="10ms"))
    runs = [engine.start("pay", input={"amount": i, "ref": f"r{i}"}) for i in range(n)]
    worker = engine.worker(registry, lease_ttl=timedelta(seconds=5)).start()
    try:
        for run in runs:
            assert engine.wait_for(run, timeout=30)["status"] == "completed"
    finally:
        worker.stop()
    return runs


def test_check_passes_real_runs_and_catches_a_duplicated_effect_and_a_stuck_run(
    world: tuple[Engine, Downstream], tmp_path: Path
) -> None:
    """Completed runs check clean; a second effect for one step and a run nobody serves are flagged."""
    engine, _ds = world
    runs = _run_all(engine, 3)
    ledger = LedgerReader(tmp_path / "ledger.db")
    clean = check(engine, ledger, Expect(), refs=True)
    assert clean.ok, clean.examples
    assert clean.outcomes == {"started": 3, "completed": 3}

    with closing(sqlite3.connect(tmp_path / "ledger.db")) as conn:
        conn.execute(
            "INSERT INTO effects SELECT idempotency_key || '-again', kind, run_id, step, attempt, body_sha,"
            " response, at FROM effects WHERE run_id = ? AND step = 'charge'",
            (runs[0],),
        )
        conn.commit()
    engine.start("pay", input={"amount": 9, "ref": "r-stuck"})  # no worker will ever take it
    found = check(engine, ledger, Expect(), refs=True)
    assert found.violations["effects_duplicated"] == 1
    assert found.violations["stuck"] == 1
    assert found.outcomes["stuck"] == 1


def test_a_success_carrying_another_attempts_result_is_a_stale_result_accepted() -> None:
    """Attempt 2 recorded with the result attempt 1 produced (a late report) is flagged; its own is not."""
    by_id = {"charge_1": {"run_id": "run1", "step": "charge", "response": {"id": "charge_1"}}}
    scheduled = ("ActivityScheduled", {"task_id": "run1/charge/2", "activity": "pay.charge"})
    late = history(
        scheduled, ok("charge", 2, task_id="run1/charge/2", output={"id": "charge_1", "attempt": 1})
    )
    assert flags(checker._effects, late, by_id) == {"stale_results_accepted": 1}
    own = history(
        scheduled, ok("charge", 2, task_id="run1/charge/2", output={"id": "charge_1", "attempt": 2})
    )
    assert flags(checker._effects, own, by_id) == {}


def _shape(step: str = "fulfil") -> list[tuple[str, dict[str, Any]]]:
    lanes = [f"{step}.a", f"{step}.b"]
    opened = {"step": step, "lanes": lanes, "join": "all", "need": 2, "tolerant": []}
    return [
        ("ParallelStarted", opened),
        *(("LaneStarted", {"step": step, "lane": lane, "index": i}) for i, lane in enumerate(lanes)),
        *(
            (
                "LaneFinished",
                {"step": step, "lane": lane, "outcome": "succeeded", "output": None, "error": None},
            )
            for lane in lanes
        ),
    ]


def _join(step: str = "fulfil") -> tuple[str, dict[str, Any]]:
    return (
        "JoinDecided",
        {"step": step, "outcome": "succeeded", "reason": "all", "cancelling": [], "error": None},
    )


def _joined(step: str = "fulfil") -> tuple[str, dict[str, Any]]:
    return ("StepJoined", {"step": step, "output": {}, "succeeded": 2, "failed": 0, "cancelled": 0})


def test_a_join_decided_or_ended_twice_is_flagged_and_a_loop_is_not() -> None:
    """One visit joins once; a second JoinDecided, a second end or an end before the join is flagged,
    while the same step visited again (a loop) joins once more without a flag."""
    once = history(*_shape(), _join(), _joined(), *_shape(), _join(), _joined())
    assert flags(checker._joins, once) == {}
    twice = history(*_shape(), _join(), _join(), _joined(), _joined())
    assert flags(checker._joins, twice) == {"joins_repeated": 3}
    early = history(*_shape(), _joined())
    assert flags(checker._joins, early) == {"joins_repeated": 1}


def test_a_lane_finishing_twice_in_one_visit_is_flagged() -> None:
    """A branch that finishes twice (its effect would be reported twice) is a repeated join input."""
    lane = (
        "LaneFinished",
        {"step": "fulfil", "lane": "fulfil.a", "outcome": "succeeded", "output": None, "error": None},
    )
    assert flags(checker._joins, history(*_shape(), lane, _join(), _joined())) == {"joins_repeated": 1}
