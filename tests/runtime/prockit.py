"""What the crash tests add to the lab's process harness (lab/fleet/): a downstream ledger, the test
activity module, and their defaults for worker/scheduler subprocesses (always killed); `wait_until` (poll
with a deadline, never sleep as synchronisation) comes from the harness.

The ledger plays the downstream "payment service": a SQLite file (path in LEDGER_ENV) that records every
call (`calls`, written first thing, so a test can poll for "started attempt N") and applies each effect
once per idempotency key (`effects`, like Stripe), noting on the call whether it applied the effect or
replayed the saved one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

import lab.fleet
from lab.fleet import Fleet, Proc, wait_until

__all__ = ["BACKENDS", "Cluster", "Ledger", "sqlite_only", "wait_until"]

F = TypeVar("F", bound=Callable[..., object])

BACKENDS = ("sqlite", "postgresql")


def sqlite_only(reason: str) -> Callable[[F], F]:
    """Run the test on SQLite only; its PostgreSQL case is reported as skipped with `reason`."""
    return pytest.mark.parametrize(
        "backend",
        ["sqlite", pytest.param("postgresql", marks=pytest.mark.skip(reason=f"SQLite-only: {reason}"))],
        indirect=True,
    )


LEDGER_ENV = "LOCKSTEP_TEST_LEDGER"
ACTIVITY_MODULE = "lockstep_test_activities"

LEDGER_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    id INTEGER PRIMARY KEY, run_id TEXT, step TEXT, attempt INT, idempotency_key TEXT, pid INT,
    applied INT, finished INT NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS effects (
    idempotency_key TEXT PRIMARY KEY, run_id TEXT, step TEXT, attempt INT, pid INT);
CREATE TABLE IF NOT EXISTS crashes (
    idempotency_key TEXT, attempt INT, PRIMARY KEY (idempotency_key, attempt));
"""

# Written into tmp_path and imported by the worker subprocesses (`--activities lockstep_test_activities`).
ACTIVITY_SOURCE = f'''
"""Test activities: behaviour is chosen by the step input (see prockit.py)."""

import os
import signal
import sqlite3
import time
from pathlib import Path

from lockstep import ActivityError, activity

LEDGER_SCHEMA = {LEDGER_SCHEMA!r}


def _ledger():
    conn = sqlite3.connect(os.environ[{LEDGER_ENV!r}], timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(LEDGER_SCHEMA)
    return conn


def _run(sql, params=()):
    conn = _ledger()
    try:
        return conn.execute(sql, params).rowcount
    finally:
        conn.close()


@activity("test.step")
def step(input, ctx):
    input = input or {{}}
    call = _ledger()
    try:
        call_id = call.execute(
            "INSERT INTO calls (run_id, step, attempt, idempotency_key, pid) VALUES (?, ?, ?, ?, ?)",
            (ctx.run_id, ctx.step_id, ctx.attempt, ctx.idempotency_key, os.getpid()),
        ).lastrowid
    finally:
        call.close()
    if ctx.attempt == input.get("block_attempt"):
        # Block until the test drops the release file (or the process is killed / stopped).
        release = Path(os.environ[{LEDGER_ENV!r}]).parent / f"release-{{ctx.run_id}}-{{ctx.attempt}}"
        deadline = time.monotonic() + 120
        while not release.exists():
            if time.monotonic() > deadline:
                raise ActivityError("NeverReleased", "the test never released this attempt")
            time.sleep(0.02)
    if input.get("sleep_ms"):
        time.sleep(input["sleep_ms"] / 1000)
    if ctx.attempt <= input.get("fail_attempts", 0):
        raise ActivityError("Flaky", f"attempt {{ctx.attempt}} fails on purpose")
    applied = _run(
        "INSERT OR IGNORE INTO effects VALUES (?, ?, ?, ?, ?)",
        (ctx.idempotency_key, ctx.run_id, ctx.step_id, ctx.attempt, os.getpid()),
    )
    _run("UPDATE calls SET applied = ? WHERE id = ?", (applied, call_id))
    if ctx.attempt == input.get("crash_after_effect_attempt"):
        # The effect is applied downstream; die before the worker can report it (lost response).
        _run("INSERT INTO crashes VALUES (?, ?)", (ctx.idempotency_key, ctx.attempt))
        os.kill(os.getpid(), signal.SIGKILL)
    _run("UPDATE calls SET finished = 1 WHERE id = ?", (call_id,))
    return {{"pid": os.getpid(), "attempt": ctx.attempt, "replayed": applied == 0}}
'''


class Ledger(lab.fleet.Ledger):
    """The test's view of the downstream service (every query opens and closes its own connection)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, LEDGER_SCHEMA)
        self.path = path

    def calls(self, run_id: str | None = None) -> list[dict[str, Any]]:
        cols = ("run_id", "step", "attempt", "idempotency_key", "pid", "applied", "finished")
        where, params = ("WHERE run_id = ?", (run_id,)) if run_id else ("", ())
        return [
            dict(zip(cols, r, strict=True))
            for r in self.rows(f"SELECT {', '.join(cols)} FROM calls {where} ORDER BY id", params)
        ]

    def effects(self, run_id: str | None = None) -> list[dict[str, Any]]:
        cols = ("idempotency_key", "run_id", "step", "attempt", "pid")
        where, params = ("WHERE run_id = ?", (run_id,)) if run_id else ("", ())
        return [
            dict(zip(cols, r, strict=True))
            for r in self.rows(f"SELECT {', '.join(cols)} FROM effects {where}", params)
        ]

    def started(self, run_id: str, attempt: int) -> dict[str, Any] | None:
        """The call of `attempt` of the run, once the activity has begun (the "started" marker)."""
        found = [c for c in self.calls(run_id) if c["attempt"] == attempt]
        return found[0] if found else None

    def release(self, run_id: str, attempt: int) -> None:
        """Let a blocked attempt (input `block_attempt`) go on."""
        (self.path.parent / f"release-{run_id}-{attempt}").touch()


class Cluster(Fleet):
    """lockstep worker/scheduler processes on one database running the test activities; `shutdown()`
    kills them all and prints their logs (pytest shows them when a test fails)."""

    WORKER_CONCURRENCY = 4
    WORKER_LEASE_TTL = "1s"
    WORKER_SCHEDULER = True

    def __init__(self, tmp_path: Path, db_url: str, ledger: Ledger) -> None:
        (tmp_path / f"{ACTIVITY_MODULE}.py").write_text(ACTIVITY_SOURCE)
        env = {LEDGER_ENV: str(ledger.path)}
        super().__init__(tmp_path, db_url, activities=ACTIVITY_MODULE, env=env, pythonpath=[tmp_path])
        self.ledger = ledger

    def stop_quiescent(self, proc: Proc) -> bool:
        """SIGSTOP `proc` at a moment it holds no lock on the database (else every writer would block on
        the frozen process); see lab.fleet.stop_quiescent."""
        if not super().stop_quiescent(proc):
            raise AssertionError(f"could not stop {proc.name} outside a transaction")
        return True

    def shutdown(self, *, show_logs: bool = True) -> None:
        super().shutdown(show_logs=show_logs)
