"""The processes of one fault scenario: a database (SQLite file or a PostgreSQL database on a throwaway
cluster), the downstream payment API, and real `lockstep` worker / scheduler / serve processes, each a
subprocess the driver can SIGKILL, SIGSTOP and SIGCONT. Output of every process goes to a log file in
the scenario's directory; `shutdown()` kills and reaps them all.

Synchronisation is `wait_until` (poll with a deadline); a fixed sleep only ever stands for "let time
pass" (a lease running out), never for "until something happened".
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx

from lockstep.app import failpoints
from lockstep.engine import Engine
from lockstep.runtime.webhook import SECRET_ENV, new_secret
from lockstep.testing.pgcluster import PgCluster

from .. import lab_env
from .activities import DOWNSTREAM_ENV
from .downstream import LedgerReader

__all__ = ["Fleet", "Proc", "quiescent", "stop_quiescent", "wait_until"]

T = TypeVar("T")
ACTIVITIES = "lab.faults.activities"


def wait_until(
    predicate: Callable[[], T], timeout: float = 10.0, what: str = "condition", interval: float = 0.02
) -> T:
    """Poll `predicate` until it returns something truthy (returned); raise TimeoutError after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last: {value!r})")
        time.sleep(interval)


class Proc:
    """One subprocess with its output in a file."""

    def __init__(self, name: str, popen: subprocess.Popen[bytes], out: IO[bytes], log: Path) -> None:
        self.name = name
        self.popen = popen
        self._out = out
        self.log_path = log

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            self.popen.send_signal(sig)

    def kill(self) -> int:
        """SIGKILL (after SIGCONT, so a stopped process does not linger) and reap; the exit status."""
        if self.alive():
            self.popen.send_signal(signal.SIGCONT)
            self.popen.kill()
        return self.popen.wait(15)

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout)

    def close(self) -> None:
        try:
            self.kill()
        finally:
            self._out.close()


def stop_quiescent(proc: Proc, db_url: str, attempts: int = 200) -> bool:
    """SIGSTOP `proc` at a moment it holds no database lock (a frozen lock holder would freeze every
    writer, which is another fault): stop, probe, resume and retry while it was inside a transaction.
    False if no such moment came."""
    for _ in range(attempts):
        proc.signal(signal.SIGSTOP)
        # kill() returns before the kernel has stopped every thread: probe only once it has, or the
        # process could still take the write lock right after a clean probe, then freeze with it.
        if _stopped(proc.pid) and quiescent(db_url):
            return True
        proc.signal(signal.SIGCONT)
        time.sleep(0.01)
    return False


def _stopped(pid: int, timeout: float = 2.0) -> bool:
    """Wait until every thread of `pid` is in the stopped state ("T" in /proc/PID/task/*/stat)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            states = [
                (Path(t) / "stat").read_text().rsplit(")", 1)[1].split()[0]
                for t in Path(f"/proc/{pid}/task").iterdir()
            ]
        except OSError:
            return False  # gone
        if states and all(st in ("T", "t") for st in states):
            return True
        time.sleep(0.001)
    return False


def quiescent(db_url: str) -> bool:
    """No session holds a write lock. SQLite: BEGIN IMMEDIATE succeeds. PostgreSQL: no other session of
    the database is running a statement or idle inside a transaction."""
    if db_url.startswith("sqlite:///"):
        # A short wait: a healthy writer's transaction lasts milliseconds; the stopped one's forever.
        with closing(sqlite3.connect(db_url[len("sqlite:///") :], timeout=0.05, isolation_level=None)) as c:
            try:
                c.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:
                return False
            c.execute("ROLLBACK")
            return True
    import psycopg  # noqa: PLC0415 - only the PostgreSQL cases need it

    time.sleep(0.05)  # a statement the stopped process had sent finishes on the server
    with psycopg.connect(db_url, autocommit=True, connect_timeout=5) as pg:
        row = pg.execute(
            b"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            b" AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            b" AND state IN ('active', 'idle in transaction')"
        ).fetchone()
    return row is not None and row[0] == 0


class Fleet:
    """Everything one scenario runs: database, downstream, lockstep processes, an in-process engine."""

    def __init__(self, workdir: Path, backend: str, pg: PgCluster | None) -> None:
        self.dir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.backend = backend
        self.pg = pg
        if backend == "sqlite":
            self.db_url = f"sqlite:///{workdir / 'lockstep.db'}"
        elif pg is not None:
            self.db_url = pg.create_database(f"faults_{workdir.name.replace('-', '_')}")
        else:
            raise ValueError("the postgresql backend needs a cluster")
        self.procs: list[Proc] = []
        self.failpoint_log = workdir / "failpoints.jsonl"
        self.ledger = LedgerReader(workdir / "ledger.db")
        self.downstream = self._spawn_downstream()
        self.env = {
            **lab_env(os.environ),
            DOWNSTREAM_ENV: self.downstream_url,
            failpoints.LOG_ENV: str(self.failpoint_log),
            "PYTHONUNBUFFERED": "1",
            SECRET_ENV: new_secret(),  # `serve --notify webhook:...` signs its webhooks and needs one
        }
        for name in (failpoints.ENV, "LOCKSTEP_DEBUG", "LOCKSTEP_DB", "LOCKSTEP_TENANT"):
            self.env.pop(name, None)
        self.engine = Engine.open(self.db_url)

    # --- processes -----------------------------------------------------------------------------
    def _spawn_downstream(self) -> Proc:
        port_file = self.dir / "downstream.port"
        args = ["-m", "lab.faults.downstream", "--ledger", str(self.dir / "ledger.db")]
        proc = self._popen(
            "downstream", [sys.executable, *args, "--port-file", str(port_file)], lab_env(os.environ)
        )
        port = wait_until(lambda: port_file.exists() and port_file.read_text().strip(), 20, "downstream")
        self.downstream_url = f"http://127.0.0.1:{int(port)}"
        return proc

    def _popen(self, name: str, argv: list[str], env: dict[str, str] | None) -> Proc:
        log = self.dir / f"{name}.log"
        out = log.open("ab")
        try:
            popen = subprocess.Popen(  # noqa: S603 - argv is built here, never from user text
                argv, env=env, cwd=self.dir, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        except BaseException:
            out.close()
            raise
        proc = Proc(name, popen, out, log)
        self.procs.append(proc)
        return proc

    def spawn(
        self,
        name: str,
        args: list[str],
        *,
        faults: str = "",
        ready: str | None = None,
        db_url: str | None = None,
    ) -> Proc:
        """Start `lockstep --db URL ARGS...` with fail points `faults`; wait for `ready` in its output.
        `db_url` reaches the same database another way (through a proxy)."""
        env = dict(self.env)
        if faults:
            env[failpoints.ENV] = faults
        url = db_url or self.db_url
        proc = self._popen(name, [sys.executable, "-m", "lockstep", "--db", url, *args], env)
        if ready is not None:
            self.wait_ready(proc, ready)
        return proc

    def worker(
        self,
        name: str,
        *,
        faults: str = "",
        lease_ttl: str = "1s",
        concurrency: int = 8,
        versions: list[str] | None = None,
        wait: bool = True,
        db_url: str | None = None,
    ) -> Proc:
        args = ["worker", "--activities", ACTIVITIES, "--lease-ttl", lease_ttl, "--poll-interval", "50ms"]
        args += ["--concurrency", str(concurrency), "--worker-id", name, "--no-scheduler"]
        for v in versions or []:
            args += ["--versions", v]
        return self.spawn(name, args, faults=faults, ready="serving" if wait else None, db_url=db_url)

    def scheduler(self, name: str, *, faults: str = "", wait: bool = True) -> Proc:
        args = ["scheduler", "--poll-interval", "50ms", "--partition-ttl", "2s"]
        return self.spawn(name, args, faults=faults, ready="scheduler running" if wait else None)

    def serve(self, name: str, port: int, *, notify: str | None = None) -> Proc:
        args = ["serve", "--port", str(port), "--log-format", "console"]
        if notify:
            args += ["--notify", notify]
        proc = self.spawn(name, args)
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            if not proc.alive():
                raise RuntimeError(f"{name} exited with {proc.popen.returncode}:\n{proc.log()[-2000:]}")
            try:
                return httpx.get(f"{base}/healthz", timeout=1).status_code < 500
            except httpx.HTTPError:
                return False

        wait_until(up, 30, f"{name} to answer")
        return proc

    def wait_ready(self, proc: Proc, marker: str, timeout: float = 30) -> None:
        def ready() -> bool:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log()[-2000:]}")
            return marker in proc.log()

        wait_until(ready, timeout, f"{proc.name} to print {marker!r}")

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """One `lockstep` command on this database (as an operator would type it)."""
        done = subprocess.run(  # noqa: S603 - argv is built here
            [sys.executable, "-m", "lockstep", "--db", self.db_url, *args],
            env=self.env,
            cwd=self.dir,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"lockstep {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
        return done

    def control(self, **settings: Any) -> None:
        """Tell the downstream to delay, fail or drop responses (see downstream.py)."""
        httpx.post(f"{self.downstream_url}/control", json=settings, timeout=10).raise_for_status()

    def failpoint_hits(self) -> list[dict[str, Any]]:
        if not self.failpoint_log.exists():
            return []
        return [json.loads(line) for line in self.failpoint_log.read_text().splitlines() if line.strip()]

    # --- database ------------------------------------------------------------------------------
    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """One raw statement (`?` placeholders) past the engine, committed on its own: the fault driver's
        way to duplicate an outbox row or read a table, never a way to repair state."""
        if self.backend == "sqlite":
            with closing(sqlite3.connect(self.dir / "lockstep.db", timeout=30)) as conn:
                rows = conn.execute(statement, params).fetchall()
                conn.commit()
                return rows
        import psycopg  # noqa: PLC0415 - only the PostgreSQL scenarios need it

        with psycopg.connect(self.db_url, autocommit=True, connect_timeout=5) as pg:
            cur = pg.execute(statement.replace("?", "%s").encode(), params)
            return cur.fetchall() if cur.description else []

    def release(self, hit: dict[str, Any]) -> None:
        """Let a thread held at a `hold` fail point go on."""
        Path(f"{self.failpoint_log}.release.{hit['pid']}.{hit['hit']}").touch()

    def stop_quiescent(self, proc: Proc) -> bool:
        return stop_quiescent(proc, self.db_url)

    def shutdown(self) -> None:
        """Kill and reap every process; close the engine."""
        for proc in self.procs:
            with contextlib.suppress(Exception):  # best effort: the next one must still be killed
                proc.close()
        self.engine.close()
