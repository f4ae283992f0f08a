"""Helpers for tests with real `lockstep` processes: a downstream ledger, the test activity module,
worker/scheduler subprocesses that are always killed, and `wait_until` (poll with a deadline, never sleep
as synchronisation).

The ledger plays the downstream "payment service": a SQLite file (path in LEDGER_ENV) that records every
call (`calls`, written first thing, so a test can poll for "started attempt N") and applies each effect
once per idempotency key (`effects`, like Stripe), noting on the call whether it applied the effect or
replayed the saved one.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any, TypeVar

import pytest

from lab.faults.fleet import Proc, stop_quiescent, wait_until

T = TypeVar("T")
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


class Ledger:
    """The test's view of the downstream service (every query opens and closes its own connection)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with closing(self._connect()) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(LEDGER_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30, isolation_level=None)

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with closing(self._connect()) as conn:
            return conn.execute(sql, params).fetchall()

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


class Cluster:
    """Starts lockstep worker/scheduler processes on one database; `shutdown()` kills them all."""

    def __init__(self, tmp_path: Path, db_url: str, ledger: Ledger) -> None:
        self.tmp = tmp_path
        self.db_url = db_url
        self.backend = "sqlite" if db_url.startswith("sqlite:") else "postgresql"
        self.db_path = Path(db_url[len("sqlite:///") :]) if self.backend == "sqlite" else None
        self.ledger = ledger
        (tmp_path / f"{ACTIVITY_MODULE}.py").write_text(ACTIVITY_SOURCE)
        self.env = {
            **os.environ,
            LEDGER_ENV: str(ledger.path),
            "PYTHONPATH": os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p),
            "PYTHONUNBUFFERED": "1",
        }
        self.env.pop("LOCKSTEP_DEBUG", None)
        self.procs: list[Proc] = []

    def _spawn(self, name: str, args: list[str]) -> Proc:
        log = self.tmp / f"{name}.log"
        out = log.open("wb")
        try:
            popen = subprocess.Popen(
                [sys.executable, "-m", "lockstep", "--db", self.db_url, *args],
                env=self.env,
                cwd=self.tmp,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            out.close()
            raise
        proc = Proc(name, popen, out, log)
        self.procs.append(proc)
        return proc

    def worker(
        self,
        name: str,
        *,
        scheduler: bool = True,
        lease_ttl: str = "1s",
        concurrency: int = 4,
        wait_ready: bool = True,
    ) -> Proc:
        args = [
            "worker",
            "--activities",
            ACTIVITY_MODULE,
            "--lease-ttl",
            lease_ttl,
            "--poll-interval",
            "50ms",
            "--concurrency",
            str(concurrency),
            "--worker-id",
            name,
        ]
        if not scheduler:
            args.append("--no-scheduler")
        proc = self._spawn(name, args)
        if wait_ready:
            self.wait_ready(proc, "serving")
        return proc

    def scheduler(self, name: str, *, wait_ready: bool = True) -> Proc:
        proc = self._spawn(name, ["scheduler", "--poll-interval", "50ms"])
        if wait_ready:
            self.wait_ready(proc, "scheduler running")
        return proc

    def wait_ready(self, proc: Proc, marker: str, timeout: float = 20) -> None:
        """Wait for the start-up line the CLI prints once the process is running (signal handlers follow)."""

        def ready() -> bool:
            if not proc.alive():
                raise AssertionError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log()}")
            return marker in proc.log()

        wait_until(ready, timeout, f"{proc.name} to print {marker!r}")

    def cli(self, *args: str, expect: int | None = 0) -> subprocess.CompletedProcess[str]:
        """Run one `lockstep` command on this database; check its exit status unless expect is None."""
        done = subprocess.run(
            [sys.executable, "-m", "lockstep", "--db", self.db_url, *args],
            env=self.env,
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if expect is not None:
            assert done.returncode == expect, (
                f"lockstep {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            )
        return done

    def cli_json(self, *args: str) -> Any:
        return json.loads(self.cli(*args).stdout)

    def execute(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one raw statement (`?` placeholders) on the lockstep database, past the engine, in its own
        committed transaction; returns the rows it produced (none for a statement without a result)."""
        if self.db_path is not None:
            with closing(sqlite3.connect(self.db_path)) as conn:
                rows = conn.execute(statement, params).fetchall()
                conn.commit()
                return rows
        import psycopg  # only the PostgreSQL cases need it

        with psycopg.connect(self.db_url, autocommit=True) as pg:
            cur = pg.execute(statement.replace("?", "%s").encode(), params)
            return cur.fetchall() if cur.description else []

    def stop_quiescent(self, proc: Proc) -> None:
        """SIGSTOP `proc` at a moment it holds no lock on the database (else every writer would block on
        the frozen process); see lab.faults.fleet.stop_quiescent."""
        if not stop_quiescent(proc, self.db_url):
            raise AssertionError(f"could not stop {proc.name} outside a transaction")

    def shutdown(self) -> None:
        """Kill and reap every process; print their logs (pytest shows them when a test fails)."""
        for proc in self.procs:
            try:
                proc.close()
            finally:
                print(f"----- {proc.name} (pid {proc.pid}, exit {proc.popen.returncode}) -----")
                print(proc.log())
