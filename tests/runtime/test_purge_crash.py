"""The purge survives SIGKILL at any point, on both backends: a real `lockstep scheduler` process purging
finished runs past retention is frozen at a fail point (after a tombstone batch committed; inside a
delete transaction, uncommitted; after some delete batches committed), SIGKILLed by the test, and a new
scheduler finishes the job: every due run is gone with one tombstone, nothing else was touched (the
held and the unfinished run keep every row), and `lockstep verify` is green at every step."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from prockit import Cluster, wait_until

from lockstep import Engine
from lockstep.app import failpoints

pytestmark = pytest.mark.slow

NAP = {"name": "nap", "steps": [{"id": "one", "wait": "10ms"}, {"id": "two", "wait": "10ms"}]}
LONG = {"name": "long", "steps": [{"id": "nap", "wait": "1h"}]}
DUE = 12  # finished runs that fall due; with --purge-batch 5: 3 tombstone and 14 delete transactions
SCHEDULER = ["--purge-interval", "200ms", "--purge-batch", "5", "--scheduler-id", "purger"]
RUN_TABLES = ("runs", "events", "tasks", "timers")


def rows(cluster: Cluster, run_id: str) -> dict[str, int]:
    return {
        t: int(cluster.sql(f"SELECT COUNT(*) FROM {t} WHERE run_id = ?", (run_id,))[0][0]) for t in RUN_TABLES
    }


def tombstones(cluster: Cluster) -> dict[str, str]:
    return dict(cluster.sql("SELECT run_id, state FROM tombstones"))


def verify_ok(cluster: Cluster) -> dict[str, Any]:
    report = json.loads(cluster.cli("verify", "--json").stdout)
    assert report["ok"], report
    return report


def hits(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize(
    "point",
    [
        "purge.tombstoned=hold@1",  # a batch of tombstones committed, no row deleted yet
        "purge.rows=hold@2",  # inside the second delete transaction: rows deleted, not committed
        "purge.deleted=hold@3",  # three delete transactions committed
    ],
)
def test_a_scheduler_sigkilled_mid_purge_is_resumed_by_the_next_one(
    cluster: Cluster, engine: Engine, tmp_path: Path, point: str
) -> None:
    """Killed at `point`, the purge leaves tombstoned runs gone and the rest intact; the next scheduler
    completes every tombstone and deletes exactly the due runs' rows."""
    log = tmp_path / "failpoints.jsonl"
    cluster.env[failpoints.LOG_ENV] = str(log)
    cluster.cli("tenants", "create", "default")
    engine.publish(NAP)
    engine.publish(LONG)
    due = [engine.start("nap") for _ in range(DUE)]
    held = engine.start("nap")
    waiting = engine.start("long")
    cluster.cli("runs", "hold", held, "--reason", "litigation hold 7")
    cluster.cli("tenants", "set", "default", "--retention", "1s")
    s1 = cluster.scheduler("s1", extra=SCHEDULER, faults=point)
    frozen = wait_until(lambda: hits(log), 60, f"the scheduler to reach {point}")[0]
    assert frozen["pid"] == s1.pid

    assert s1.kill() == -signal.SIGKILL
    gone = tombstones(cluster)
    assert gone, "the purge had begun"
    assert set(gone) <= set(due)
    assert "purged" not in gone.values() or not point.startswith("purge.tombstoned")
    for run_id in gone:
        assert rows(cluster, run_id)["runs"] == 0  # tombstoned: gone from every view
    for run_id in (held, waiting):
        assert rows(cluster, run_id)["runs"] == 1
    verify_ok(cluster)

    cluster.scheduler("s2", extra=SCHEDULER)
    wait_until(lambda: tombstones(cluster) == dict.fromkeys(due, "purged"), 60, "every due run to be purged")
    for run_id in due:
        assert rows(cluster, run_id) == dict.fromkeys(RUN_TABLES, 0)
    # One `show` stands for all: every due run has the same purged tombstone (a CLI process costs seconds).
    shown = cluster.cli("show", due[-1], expect=9)
    assert "was purged at" in shown.stderr
    kept = engine.show(held)
    assert kept["status"] == "completed"
    assert rows(cluster, held)["events"] == kept["seq"]  # the held run keeps every event
    assert engine.show(waiting)["status"] == "waiting"
    report = verify_ok(cluster)
    assert report["runs"] == 2
    stones = json.loads(cluster.cli("retention", "tombstones", "--json").stdout)
    assert {(t["status"], t["events"], t["purged_by"]) for t in stones} == {
        ("completed", kept["seq"], "retention")
    }
