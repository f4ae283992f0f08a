"""What the scale-out tests add to the lab's process harness (lab/fleet/): their activity module and
the downstream ledger it writes to, their defaults for real `lockstep` processes (serve, scheduler,
worker) on one PostgreSQL database, HTTP and SQL probes, and the invariant checks shared by the tests (no
duplicate transition, no lost work, each effect applied once per key).

Every process writes its output to a file in tmp_path; `ScaleFleet.shutdown()` SIGKILLs and reaps them
all and prints their logs (pytest shows them when a test fails). Synchronisation is `wait_until`: poll
with a deadline, never a fixed sleep.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

import lab.fleet
from lab.fleet import Fleet, free_port, sql, wait_until

__all__ = [
    "Db",
    "Ledger",
    "ScaleFleet",
    "check_histories",
    "check_ledger",
    "free_port",
    "publish",
    "start_runs_http",
    "wait_until",
]

ACTIVITY_MODULE = "scale_activities"
LEDGER_ENV = "LOCKSTEP_SCALE_LEDGER"

# The downstream "service" the activities call: `calls` logs every call (before the work, like a request
# log), `effects` applies the business effect once per idempotency key (insert-or-ignore, like Stripe).
PG_LEDGER_SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger_calls (
    id BIGSERIAL PRIMARY KEY, run_id TEXT NOT NULL, step TEXT NOT NULL, attempt INT NOT NULL,
    idempotency_key TEXT NOT NULL, pid INT NOT NULL, applied INT, finished_at DOUBLE PRECISION);
CREATE TABLE IF NOT EXISTS ledger_effects (
    idempotency_key TEXT PRIMARY KEY, run_id TEXT NOT NULL, step TEXT NOT NULL, attempt INT NOT NULL,
    pid INT NOT NULL);
"""
SQLITE_LEDGER_SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger_calls (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, step TEXT NOT NULL, attempt INT NOT NULL,
    idempotency_key TEXT NOT NULL, pid INT NOT NULL, applied INT, finished_at REAL);
CREATE TABLE IF NOT EXISTS ledger_effects (
    idempotency_key TEXT PRIMARY KEY, run_id TEXT NOT NULL, step TEXT NOT NULL, attempt INT NOT NULL,
    pid INT NOT NULL);
"""

# Written into tmp_path and imported by the worker processes (`--activities scale_activities`).
ACTIVITY_SOURCE = f'''
"""Scale-test activities. The ledger is PostgreSQL (URL) or SQLite (file path), from ${LEDGER_ENV}."""

import os
import sqlite3
import threading
import time

from lockstep import activity

LEDGER = os.environ[{LEDGER_ENV!r}]
PG = LEDGER.startswith("postgresql://")
_local = threading.local()


def _conn():
    conn = getattr(_local, "conn", None)
    if conn is None:
        if PG:
            import psycopg

            conn = psycopg.connect(LEDGER, autocommit=True, connect_timeout=5)
        else:
            conn = sqlite3.connect(LEDGER, timeout=30, isolation_level=None)
            conn.execute("PRAGMA busy_timeout=30000")
        _local.conn = conn
    return conn


def _sql(statement, params):
    if not PG:
        statement = statement.replace("%s", "?").replace("ON CONFLICT (idempotency_key) DO NOTHING", "")
        statement = statement.replace("INSERT INTO ledger_effects", "INSERT OR IGNORE INTO ledger_effects")
    try:
        cur = _conn().execute(statement, params)
    except Exception:
        _local.conn = None  # reconnect on the next call (the ledger may have restarted)
        raise
    return cur


def _work(input, ctx):
    input = input or {{}}
    call = _sql(
        "INSERT INTO ledger_calls (run_id, step, attempt, idempotency_key, pid) VALUES (%s, %s, %s, %s, %s)"
        + (" RETURNING id" if PG else ""),
        (ctx.run_id, ctx.step_id, ctx.attempt, ctx.idempotency_key, os.getpid()),
    )
    call_id = call.fetchone()[0] if PG else call.lastrowid
    if input.get("sleep_ms"):
        time.sleep(input["sleep_ms"] / 1000)
    applied = _sql(
        "INSERT INTO ledger_effects (idempotency_key, run_id, step, attempt, pid) "
        "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (idempotency_key) DO NOTHING",
        (ctx.idempotency_key, ctx.run_id, ctx.step_id, ctx.attempt, os.getpid()),
    ).rowcount
    _sql(
        "UPDATE ledger_calls SET applied = %s, finished_at = %s WHERE id = %s",
        (applied, time.time(), call_id),
    )
    return {{"step": ctx.step_id, "attempt": ctx.attempt, "applied": applied}}


@activity("scale.work")
def work(input, ctx):
    return _work(input, ctx)


@activity("scale.other")
def other(input, ctx):
    return _work(input, ctx)
'''


class Db:
    """Direct SQL on a PostgreSQL database (the test's probe; a fresh connection per call)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def rows(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return sql(self.url, statement, params)

    def value(self, statement: str, params: tuple[Any, ...] = ()) -> Any:
        return self.rows(statement, params)[0][0]

    def status_counts(self, tenant: str) -> dict[str, int]:
        rows = self.rows("SELECT status, count(*) FROM runs WHERE tenant = %s GROUP BY status", (tenant,))
        return {str(s): int(n) for s, n in rows}


class Ledger(lab.fleet.Ledger):
    """The test's view of the downstream service: PostgreSQL (a URL) or SQLite (a file path)."""

    def __init__(self, where: str) -> None:
        pg = where.startswith("postgresql://")
        super().__init__(where, PG_LEDGER_SCHEMA if pg else SQLITE_LEDGER_SCHEMA)


class ScaleFleet(Fleet):
    """lockstep processes on one database running the scale activities, which write to `ledger`;
    `shutdown()` kills them all and prints their logs (always call it in teardown)."""

    WORKER_CONCURRENCY = 4
    WORKER_LEASE_TTL = "2s"

    def __init__(self, tmp_path: Path, db_url: str, ledger: str) -> None:
        (tmp_path / f"{ACTIVITY_MODULE}.py").write_text(ACTIVITY_SOURCE)
        env = {LEDGER_ENV: ledger}
        super().__init__(tmp_path, db_url, activities=ACTIVITY_MODULE, env=env, pythonpath=[tmp_path])

    def tenant_with_admin(self, tenant: str, **settings: str) -> str:
        """Create `tenant` (with the given `tenants set` options) and an admin user; returns its API key."""
        self.cli("tenants", "create", tenant)
        if settings:
            opts: list[str] = []
            for k, v in settings.items():
                opts += [f"--{k.replace('_', '-')}", v]
            self.cli("tenants", "set", tenant, *opts)
        created = self.cli_json("users", "create", "admin", "--tenant", tenant, "--roles", "admin")
        return str(created["api_key"])

    def shutdown(self, *, show_logs: bool = True) -> None:
        super().shutdown(show_logs=show_logs)


def publish(base: str, key: str, document: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(
        f"{base}/v1/definitions",
        content=json.dumps(document),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        timeout=30,
    )
    assert r.status_code in (200, 201), r.text
    return dict(r.json())


def start_runs_http(
    bases: list[str], key: str, definition: str, n: int, prefix: str, threads: int = 8
) -> dict[str, Any]:
    """Start n runs spread round-robin over the servers, each with its own Idempotency-Key; a 503 or a
    transport error is retried with the same key (so a lost response cannot start a second run)."""
    headers = {"Authorization": f"Bearer {key}"}
    clients = [httpx.Client(base_url=b, headers=headers, timeout=30) for b in bases]
    retries = {"count": 0}

    def one(i: int) -> tuple[str, int]:
        client = clients[i % len(clients)]
        body = {"definition": definition, "input": {"n": i}}
        for _ in range(20):
            try:
                r = client.post("/v1/runs", json=body, headers={"Idempotency-Key": f"{prefix}-{i}"})
            except httpx.TransportError:
                retries["count"] += 1
                time.sleep(0.2)
                continue
            if r.status_code in (429, 503):
                retries["count"] += 1
                time.sleep(float(r.headers.get("Retry-After", "1")))
                continue
            assert r.status_code in (200, 201), f"start {i}: {r.status_code} {r.text}"
            return str(r.json()["run_id"]), i % len(clients)
        raise AssertionError(f"start {i} kept failing")

    try:
        with ThreadPoolExecutor(threads) as pool:
            results = list(pool.map(one, range(n)))
    finally:
        for c in clients:
            c.close()
    per_server = [sum(1 for _, s in results if s == k) for k in range(len(bases))]
    return {"run_ids": [r for r, _ in results], "per_server": per_server, "retries": retries["count"]}


def check_histories(db: Db, tenant: str, run_ids: list[str], activity_steps: list[str]) -> dict[str, int]:
    """The invariants of every run: completed once, events 1..n contiguous with the run's seq, exactly one
    ActivitySucceeded per activity step (none for the same step and attempt twice), no task left behind."""
    assert len(set(run_ids)) == len(run_ids), "a run id was returned for two different starts"
    counts = db.status_counts(tenant)
    assert counts == {"completed": len(run_ids)}, f"run statuses: {counts}"
    gaps = db.rows(
        "SELECT e.run_id, count(*), min(e.seq), max(e.seq), r.seq FROM events e JOIN runs r USING (run_id) "
        "WHERE r.tenant = %s GROUP BY e.run_id, r.seq "
        "HAVING count(*) <> max(e.seq) OR min(e.seq) <> 1 OR max(e.seq) <> r.seq",
        (tenant,),
    )
    assert gaps == [], f"event sequences not contiguous 1..n = run seq: {gaps[:5]}"
    dup_attempt = db.rows(
        "SELECT e.run_id, e.data::json->>'step', e.data::json->>'attempt', count(*) FROM events e "
        "JOIN runs r USING (run_id) WHERE r.tenant = %s AND e.type = 'ActivitySucceeded' "
        "GROUP BY 1, 2, 3 HAVING count(*) > 1",
        (tenant,),
    )
    assert dup_attempt == [], f"two ActivitySucceeded for one (run, step, attempt): {dup_attempt[:5]}"
    per_step = db.rows(
        "SELECT e.data::json->>'step', count(*), count(DISTINCT e.run_id) FROM events e "
        "JOIN runs r USING (run_id) WHERE r.tenant = %s AND e.type = 'ActivitySucceeded' GROUP BY 1",
        (tenant,),
    )
    want = {s: (len(run_ids), len(run_ids)) for s in activity_steps}
    assert {s: (c, d) for s, c, d in per_step} == want, f"ActivitySucceeded per step: {per_step}"
    finished = db.rows(
        "SELECT e.type, count(*), count(DISTINCT e.run_id) FROM events e JOIN runs r USING (run_id) "
        "WHERE r.tenant = %s AND e.type IN ('RunCompleted', 'RunFailed', 'RunCancelled') GROUP BY 1",
        (tenant,),
    )
    assert finished == [("RunCompleted", len(run_ids), len(run_ids))], f"terminal events: {finished}"
    left = db.rows(
        "SELECT status, count(*) FROM tasks WHERE tenant = %s AND status IN ('ready', 'leased', 'dead') "
        "GROUP BY status",
        (tenant,),
    )
    assert left == [], f"tasks left behind: {left}"
    ids = {r[0] for r in db.rows("SELECT run_id FROM runs WHERE tenant = %s", (tenant,))}
    assert ids == set(run_ids), "the database's runs differ from the runs the API started"

    def count(event_type: str | None) -> int:
        sql = "SELECT count(*) FROM events e JOIN runs r USING (run_id) WHERE r.tenant = %s"
        if event_type is None:
            return int(db.value(sql, (tenant,)))
        return int(db.value(sql + " AND e.type = %s", (tenant, event_type)))

    return {"events": count(None), "timed_out": count("ActivityTimedOut"), "ignored": count("ResultIgnored")}


def check_ledger(ledger: Ledger, run_ids: list[str], steps: list[str]) -> dict[str, int]:
    """Each (run, step) applied its effect exactly once, under one stable idempotency key."""
    effects = ledger.rows("SELECT run_id, step, idempotency_key FROM ledger_effects")
    got = {(r, s) for r, s, _ in effects}
    want = {(r, s) for r in run_ids for s in steps}
    assert got == want, f"effects missing: {len(want - got)}, unexpected: {len(got - want)}"
    assert len(effects) == len(want), "more than one effect for a (run, step)"
    keys_per_step = ledger.rows(
        "SELECT run_id, step, count(DISTINCT idempotency_key) FROM ledger_calls GROUP BY run_id, step "
        "HAVING count(DISTINCT idempotency_key) > 1"
    )
    assert keys_per_step == [], f"a step called the downstream with two keys: {keys_per_step[:5]}"
    applied_twice = ledger.rows(
        "SELECT idempotency_key, count(*) FROM ledger_calls WHERE applied = 1 GROUP BY idempotency_key "
        "HAVING count(*) > 1"
    )
    assert applied_twice == [], f"an effect applied twice for one key: {applied_twice[:5]}"
    calls = int(ledger.value("SELECT count(*) FROM ledger_calls"))
    replays = int(ledger.value("SELECT count(*) FROM ledger_calls WHERE applied = 0"))
    return {"calls": calls, "effects": len(effects), "replayed": replays}
