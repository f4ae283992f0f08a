"""A PostgreSQL restart in the middle of a load: servers answer 503 with Retry-After while the database is
gone, workers keep finished results in memory and report them afterwards, schedulers resume; every run
completes with nothing lost or duplicated and no process dies."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
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

RUNS = 200
TENANT = "restart"
STEPS = ["first", "second", "third"]
RETRY = {"max_attempts": 5, "initial_interval": "100ms", "max_interval": "1s"}


def _step(sid: str) -> dict[str, object]:
    # A lease never outlives its step's timeout, so the timeout, too, is far past the outage.
    return {
        "id": sid,
        "activity": "scale.work",
        "input": {"sleep_ms": 300},
        "timeout": "300s",
        "retry": RETRY,
    }


DEFINITION = {
    "name": "restart-three",
    "steps": [_step("first"), {"id": "pause", "wait": "200ms"}, _step("second"), _step("third")],
}


def _step_history(db: Db, run_id: str, step: str) -> list[str]:
    """The events of one step of one run, as `type(attempt)` (with the `reason` of a timeout, an expired
    lease, and the worker and time of a start), for a failure message that explains itself."""
    rows = db.rows(
        "SELECT type, data::json->>'attempt', data::json->>'reason', data::json->>'worker', at FROM events "
        "WHERE run_id = %s AND data::json->>'step' = %s ORDER BY seq",
        (run_id, step),
    )
    return [
        f"{t}({a})" + (f" [{why}]" if why else "") + (f" [{who} at {at}]" if t == "ActivityStarted" else "")
        for t, a, why, who, at in rows
    ]


def _up(cluster: PgCluster) -> bool:
    try:
        with psycopg.connect(cluster.url(), connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


@pytest.fixture
def cluster_restored(pg_cluster: PgCluster) -> Iterator[PgCluster]:
    """The session's cluster; whatever happens in the test, it is running again afterwards."""
    try:
        yield pg_cluster
    finally:
        if not _up(pg_cluster):
            pg_cluster.start()


@pytest.fixture
def fleet(tmp_path: Path, pg_url: str) -> Iterator[tuple[ScaleFleet, Ledger]]:
    # The downstream service is not the engine's database: it stays up while PostgreSQL restarts.
    ledger_path = str(tmp_path / "ledger.db")
    ledger = Ledger(ledger_path)
    f = ScaleFleet(tmp_path, pg_url, ledger_path)
    try:
        yield f, ledger
    finally:
        f.shutdown()


def test_postgres_restart_mid_load_loses_nothing(
    cluster_restored: PgCluster, fleet: tuple[ScaleFleet, Ledger], pg_url: str
) -> None:
    """PostgreSQL stopped (immediate) under load: 503 + Retry-After meanwhile, then every run completes."""
    cluster = cluster_restored
    f, ledger = fleet
    db = Db(pg_url)
    key = f.tenant_with_admin(TENANT)
    server = f.serve("serve", free_port())
    base = str(server.url)
    scheduler = f.scheduler("scheduler")
    # Leases far longer than the outage plus PostgreSQL's crash recovery (up to ~25s on a loaded CI
    # machine): a result finished while the database is down is still accepted, not timed out.
    workers = [f.worker(f"worker-{i}", concurrency=4, lease_ttl="120s") for i in range(2)]
    procs = [server, scheduler, *workers]
    publish(base, key, DEFINITION)
    run_ids = start_runs_http([base], key, DEFINITION["name"], RUNS, prefix="restart")["run_ids"]

    wait_until(lambda: db.status_counts(TENANT).get("completed", 0) >= RUNS // 10, 60, "a tenth of the runs")
    done_before = db.status_counts(TENANT).get("completed", 0)
    # The session's earlier tests wrote a lot of WAL into this cluster: checkpoint first, so the crash
    # recovery after the immediate stop replays only this test's load (seconds, not a minute).
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    # Only then look for activities in flight: a checkpoint on a loaded machine can outlast every
    # activity that was running before it, and the stop must catch some in the middle.
    wait_until(
        lambda: ledger.value("SELECT count(*) FROM ledger_calls WHERE finished_at IS NULL") >= 4,
        30,
        "activities in flight",
        interval=0.01,
    )
    t_stop = time.time()
    cluster.stop("immediate")
    assert not _up(cluster)

    headers = {"Authorization": f"Bearer {key}"}

    def unavailable() -> httpx.Response | None:
        try:
            r = httpx.get(f"{base}/v1/runs", headers=headers, timeout=15)
        except httpx.TransportError:
            return None
        return r if r.status_code == 503 else None

    r = wait_until(unavailable, 30, "GET /v1/runs to answer 503", interval=0.1)
    assert r.headers.get("Retry-After", "").isdigit(), r.headers
    assert r.headers["content-type"].startswith("application/problem+json")
    health = httpx.get(f"{base}/healthz", timeout=15)
    assert health.status_code != 200, health.text
    # The downstream keeps finishing the activities that were in flight; their results wait in memory.
    wait_until(
        lambda: ledger.value(f"SELECT count(*) FROM ledger_calls WHERE finished_at > {t_stop}") > 0,
        15,
        "an in-flight activity to finish during the outage",
    )

    # Keep the database down until every process has run into the outage (and for at least 3s, so the
    # pools' reconnect attempts and the processes' backoff are exercised, not just one failed query).
    def everyone_noticed() -> bool:
        logs = {p.name: p.log() for p in (scheduler, *workers)}
        return (
            time.time() - t_stop >= 3
            and "scheduler pass failed" in logs["scheduler"]
            and all("PostgreSQL is unavailable" in logs[w.name] for w in workers)
        )

    wait_until(everyone_noticed, 30, "every process to notice the outage", interval=0.1)
    cluster.start()
    t_start = time.time()
    outage = t_start - t_stop

    wait_until(
        lambda: httpx.get(f"{base}/healthz", timeout=15).status_code == 200, 60, "the server to recover"
    )
    t_healthy = time.time() - t_start

    def progress() -> bool:
        counts = db.status_counts(TENANT)
        bad = {k: v for k, v in counts.items() if k in ("failed", "needs_attention", "cancelled")}
        assert not bad, f"runs ended badly: {counts}"
        return counts.get("completed", 0) == RUNS

    wait_until(progress, 120, "all runs to complete after the restart", interval=0.2)
    t_all = time.time() - t_start
    dead = [p.name for p in procs if not p.alive()]
    assert dead == [], f"processes died: {dead}"

    history = check_histories(db, TENANT, run_ids, STEPS)
    effects = check_ledger(ledger, run_ids, STEPS)
    # Results finished while the database was down were reported afterwards and accepted (same attempt).
    during = ledger.rows(
        f"SELECT run_id, step, attempt FROM ledger_calls WHERE finished_at BETWEEN {t_stop} AND {t_start}"
    )
    accepted = {
        (r, s, int(a))
        for r, s, a in db.rows(
            "SELECT run_id, data::json->>'step', data::json->>'attempt' FROM events "
            "WHERE type = 'ActivitySucceeded' AND run_id = ANY(%s)",
            (sorted({r for r, _, _ in during}),),
        )
    }
    missing = [c for c in during if (c[0], c[1], int(c[2])) not in accepted]
    assert during, "no activity finished during the outage"
    assert not missing, (
        f"results from the outage not accepted (outage {outage:.1f}s, {history}): "
        + "; ".join(f"{m}: {_step_history(db, m[0], m[1])}" for m in missing)
    )
    verify = f.cli("verify", "--json", tenant=TENANT)
    assert '"ok": true' in verify.stdout, verify.stdout
    print(
        f"\nRESTART: {RUNS} runs, {done_before} done when PostgreSQL stopped (immediate); outage "
        f"{outage:.1f}s; /healthz 200 again {t_healthy:.1f}s after the start; {len(during)} activities "
        f"finished during the outage and their results were accepted after it; the rest completed "
        f"{t_all:.1f}s after the restart; {history['timed_out']} ActivityTimedOut, "
        f"{history['ignored']} ResultIgnored; downstream {effects['calls']} calls, "
        f"{effects['replayed']} replayed by key"
    )
