"""Scale-out on one PostgreSQL: 2 `serve`, 2 `scheduler` and 3 `worker` processes run 1,000 runs while one
scheduler and one worker are SIGKILLed; nothing is lost, nothing is transitioned twice, each downstream
effect is applied once per idempotency key."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockstep.testing import PgCluster

from .scalekit import (
    Db,
    Ledger,
    ScaleFleet,
    check_histories,
    check_ledger,
    free_port,
    publish,
    start_runs_http,
    wait_until,
)

pytestmark = pytest.mark.slow

RUNS = 1_000
TENANT = "scale"
STEPS = ["reserve", "charge", "ship"]
RETRY = {"max_attempts": 5, "initial_interval": "100ms", "max_interval": "1s"}


def _step(sid: str) -> dict[str, object]:
    return {"id": sid, "activity": "scale.work", "input": {"sleep_ms": 30}, "timeout": "20s", "retry": RETRY}


DEFINITION = {
    "name": "scale-three",
    "steps": [_step("reserve"), {"id": "cool-off", "wait": "200ms"}, _step("charge"), _step("ship")],
}


@pytest.fixture
def fleet(tmp_path: Path, pg_url: str, pg_cluster: PgCluster) -> Iterator[tuple[ScaleFleet, Ledger]]:
    ledger_url = pg_cluster.create_database(f"ledger_{uuid.uuid4().hex[:12]}")
    ledger = Ledger(ledger_url)
    f = ScaleFleet(tmp_path, pg_url, ledger_url)
    try:
        yield f, ledger
    finally:
        f.shutdown()


def test_thousand_runs_on_two_servers_two_schedulers_three_workers_with_kills(
    fleet: tuple[ScaleFleet, Ledger], pg_url: str
) -> None:
    """1,000 runs on 2 servers, 2 schedulers, 3 workers; a scheduler and a worker SIGKILLed; all complete."""
    f, ledger = fleet
    db = Db(pg_url)
    key = f.tenant_with_admin(TENANT)
    servers = [f.serve(f"serve-{i}", free_port()) for i in range(2)]
    bases = [str(s.url) for s in servers]
    schedulers = [f.scheduler(f"scheduler-{i}") for i in range(2)]
    workers = [f.worker(f"worker-{i}", concurrency=4) for i in range(3)]
    assert publish(bases[0], key, DEFINITION)["version"] == 1

    t0 = time.monotonic()
    started = start_runs_http(bases, key, DEFINITION["name"], RUNS, prefix="scale")
    t_started = time.monotonic() - t0
    run_ids = started["run_ids"]
    assert len(run_ids) == RUNS

    # Kill one worker while it holds leases (its attempts must be timed out and retried elsewhere) and
    # one scheduler while it owns partitions (the others must take them over). SIGSTOP first so the
    # leases it held at its death can be read, then SIGKILL.
    victim_w, victim_s = workers[0], schedulers[0]
    wait_until(lambda: db.status_counts(TENANT).get("completed", 0) >= RUNS // 5, 60, "a fifth of the runs")

    def stopped_holding_leases() -> list[tuple[str]]:
        victim_w.popen.send_signal(signal.SIGSTOP)
        held = db.rows("SELECT task_id FROM tasks WHERE status = 'leased' AND lease_owner = 'worker-0'")
        if not held:
            victim_w.popen.send_signal(signal.SIGCONT)
        return held

    held = wait_until(stopped_holding_leases, 60, "worker-0 to hold a lease", interval=0.01)
    victim_w.popen.send_signal(signal.SIGKILL)
    owner_like = f"%:{victim_s.pid}:%"
    owned = db.value("SELECT count(*) FROM scheduler_leases WHERE owner LIKE %s", (owner_like,))
    victim_s.popen.send_signal(signal.SIGKILL)
    t_kill = time.monotonic()
    done_at_kill = db.status_counts(TENANT).get("completed", 0)
    assert victim_w.popen.wait(10) == -signal.SIGKILL
    assert victim_s.popen.wait(10) == -signal.SIGKILL
    assert owned > 0, "the killed scheduler owned no partitions (nothing to take over)"

    # Its partitions go to the surviving schedulers (the other scheduler and the two servers') within
    # about one partition lease period (10s) plus a renewal interval.
    def taken_over() -> bool:
        dead = db.value("SELECT count(*) FROM scheduler_leases WHERE owner LIKE %s", (owner_like,))
        live = db.value(
            "SELECT count(*) FROM scheduler_leases WHERE expires_at > extract(epoch FROM now()) * 1000"
        )
        return bool(dead == 0 and live == 64)

    wait_until(taken_over, 30, "the dead scheduler's partitions to be taken over")
    takeover = time.monotonic() - t_kill

    def progress() -> bool:
        counts = db.status_counts(TENANT)
        bad = {k: v for k, v in counts.items() if k in ("failed", "needs_attention", "cancelled")}
        assert not bad, f"runs ended badly: {counts}"
        return counts.get("completed", 0) == RUNS

    wait_until(progress, 180, "all runs to complete", interval=0.2)
    wall = time.monotonic() - t0
    dead = [p.name for p in [*schedulers[1:], *workers[1:], *servers] if not p.alive()]
    assert dead == [], f"processes died: {dead}"

    history = check_histories(db, TENANT, run_ids, STEPS)
    effects = check_ledger(ledger, run_ids, STEPS)
    # The leases worker-0 held when it died were given up (timed out) and retried by another worker.
    for (task_id,) in held:
        status = db.value("SELECT status FROM tasks WHERE task_id = %s", (task_id,))
        assert status != "leased", f"task {task_id} of the dead worker is still leased"
    # (At least one: a report whose COMMIT was already on the wire at SIGSTOP may still have landed.)
    assert history["timed_out"] >= 1, history
    verify = f.cli("verify", "--json", tenant=TENANT)
    assert '"ok": true' in verify.stdout, verify.stdout

    print(
        f"\nSCALE: {RUNS} runs x 3 activities + 1 timer; 2 serve, 2 scheduler, 3 worker (4 each); "
        f"started in {t_started:.1f}s ({RUNS / t_started:.0f} starts/s, per server {started['per_server']}, "
        f"{started['retries']} start retries); all completed in {wall:.1f}s = {RUNS / wall:.1f} runs/s "
        f"({3 * RUNS / wall:.0f} activities/s); killed worker-0 holding {len(held)} lease(s) and a "
        f"scheduler owning {owned} partition(s) with {done_at_kill} runs done; partitions taken over in "
        f"{takeover:.1f}s; {history['events']} events, {history['timed_out']} ActivityTimedOut, "
        f"{history['ignored']} ResultIgnored; downstream {effects['calls']} calls, {effects['effects']} "
        f"effects, {effects['replayed']} replayed by key"
    )
