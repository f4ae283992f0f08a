"""The metrics check of the fault suite (lab/faults/metricscheck.py) passes on counters that match the
histories and flags the ones that do not: any difference when no process was killed, only an excess
(a transition counted twice, or never committed) when some were."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from prometheus_client import generate_latest

from lab.faults.metricscheck import compare, history_counts, sums
from lockstep.app.service import Service
from lockstep.store import open_store

TTL = timedelta(seconds=10)
FLOW = {
    "name": "pay",
    "steps": [
        {
            "id": "charge",
            "activity": "p.charge",
            "timeout": "30s",
            "retry": {"max_attempts": 5, "initial_interval": "1s"},
        }
    ],
}


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_matching_counters_pass_and_any_difference_is_flagged(tmp_path: Path) -> None:
    """A failure retried, a lease expired, a stale report ignored and a success: the process's counters
    equal the history; one attempt too many is flagged either way, one too few only when exact."""
    clock = Clock()
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        svc = Service(store, clock=clock)
        svc.principals.create_tenant("acme")
        svc.publish("acme", FLOW)
        svc.start("acme", "pay", input={})
        (first,) = svc.claim("w", ["p.charge"], limit=1, lease_ttl=TTL)
        svc.fail(first.task_id, first.attempt, first.fencing, "Busy", "again")
        clock.now += timedelta(seconds=2)
        svc.fire_due_timers()
        (second,) = svc.claim("w", ["p.charge"], limit=1, lease_ttl=TTL)
        clock.now += timedelta(seconds=11)
        svc.expire_leases()
        svc.complete(second.task_id, second.attempt, second.fencing, {})  # too late: ignored
        clock.now += timedelta(seconds=2)
        svc.fire_due_timers()
        (third,) = svc.claim("w", ["p.charge"], limit=1, lease_ttl=TTL)
        svc.complete(third.task_id, third.attempt, third.fencing, {})
        with svc.read() as tx:
            histories = {rid: [e for e, _ in tx.events(rid)] for rid in tx.run_ids("acme")}
        counted = history_counts(histories)
        assert counted == {
            "lockstep_activity_attempts_total": 3,
            "lockstep_activity_completions_total": 1,
            "lockstep_step_retries_total": 2,
            "lockstep_lease_expiries_total": 1,
            "lockstep_results_ignored_total": 1,
            "lockstep_runs_finished_total": 1,
        }
        text = {"p": generate_latest(svc.metrics.exposition(database=False)).decode()}
        assert compare(sums(text, "acme"), counted, exact=True) == []
        assert compare(sums(text, "globex"), counted, exact=False) == []  # nothing counted: short only

        svc.metrics.attempts("acme", "p.charge").inc()  # one attempt counted twice
        text = {"p": generate_latest(svc.metrics.exposition(database=False)).decode()}
        for exact in (True, False):
            (problem,) = compare(sums(text, "acme"), counted, exact=exact)
            assert problem.startswith("lockstep_activity_attempts_total: the processes counted 4")
        short = {
            "lockstep_activity_attempts_total": 2.0,
            **{k: float(v) for k, v in counted.items() if "attempts" not in k},
        }
        assert len(compare(short, counted, exact=True)) == 1
        assert compare(short, counted, exact=False) == []
    finally:
        store.close()
