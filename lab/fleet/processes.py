"""The fleet's processes: `Proc`, one subprocess with its output in a log file (kill, signal, freeze at a
moment it holds no database lock), and `Fleet`, the launcher of `lockstep` worker / scheduler / serve
processes and CLI commands on one database, which kills and reaps them all on shutdown."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import httpx

from lockstep.app import failpoints

from .. import clifork, lab_env
from .databases import SQLITE, quiescent, sql
from .waiting import wait_until

__all__ = ["Fleet", "Proc", "free_port", "stop_quiescent"]

UNSET = (failpoints.ENV, "LOCKSTEP_DEBUG", "LOCKSTEP_DB", "LOCKSTEP_TENANT")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proc:
    """One subprocess with its output (stdout and stderr) in a log file; `url` for a server."""

    def __init__(self, name: str, popen: subprocess.Popen[bytes], out: IO[bytes], log: Path) -> None:
        self.name = name
        self.popen = popen
        self._out = out
        self.log_path = log
        self.url: str | None = None

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


class Fleet:
    """lockstep processes on one database, started in `workdir` (their logs are there) with `activities`
    importable from `pythonpath` or the checkout, and `env` added to the driver's environment.
    A subclass sets its caller's defaults (the class attributes) and adds what only that caller needs."""

    WORKER_CONCURRENCY: int | None = None  # None: the CLI's default
    WORKER_LEASE_TTL: str | None = None
    WORKER_SCHEDULER = False  # whether a worker also runs the scheduler's passes
    SCHEDULER_ARGS: tuple[str, ...] = ()

    def __init__(
        self,
        workdir: Path,
        db_url: str,
        *,
        activities: str,
        env: Mapping[str, str] | None = None,
        pythonpath: Iterable[Path] = (),
        ready_timeout: float = 30.0,
    ) -> None:
        self.dir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.db_url = db_url
        self.backend = "sqlite" if db_url.startswith(SQLITE) else "postgresql"
        self.activities = activities
        self.ready_timeout = ready_timeout
        # The driver's own OTEL_* settings stay out: a process traces only when its caller says so (env).
        base = {k: v for k, v in lab_env(os.environ).items() if k not in UNSET and not k.startswith("OTEL_")}
        paths = [*map(str, pythonpath), base["PYTHONPATH"]]
        self.env = {**base, "PYTHONPATH": os.pathsep.join(paths), "PYTHONUNBUFFERED": "1", **(env or {})}
        self.procs: list[Proc] = []
        self._starts: Counter[str] = Counter()

    def popen(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> Proc:
        """Start any program in the fleet's directory (`env`, else the fleet's), its output in a fresh
        log: `name`.log, `name`.2.log for the second process of that name, and so on."""
        self._starts[name] += 1
        n = self._starts[name]
        log = self.dir / (f"{name}.log" if n == 1 else f"{name}.{n}.log")
        out = log.open("wb")
        try:
            popen = subprocess.Popen(  # noqa: S603 - argv is built by the driver, never from user text
                argv,
                env=dict(env if env is not None else self.env),
                cwd=self.dir,
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

    def spawn(
        self,
        name: str,
        args: list[str],
        *,
        faults: str = "",
        ready: str | None = None,
        db_url: str | None = None,
    ) -> Proc:
        """Start `lockstep --db URL ARGS...` with the fail points `faults` (lockstep.app.failpoints);
        wait for `ready` in its output. `db_url` reaches the same database another way (a proxy)."""
        argv = [sys.executable, "-m", "lockstep", "--db", db_url or self.db_url, *args]
        proc = self.popen(name, argv, {**self.env, failpoints.ENV: faults} if faults else self.env)
        if ready is not None:
            self.wait_ready(proc, ready)
        return proc

    def worker(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        lease_ttl: str | None = None,
        scheduler: bool | None = None,
        only: Iterable[str] = (),
        versions: Iterable[str] = (),
        extra: Iterable[str] = (),
        faults: str = "",
        wait: bool = True,
        db_url: str | None = None,
    ) -> Proc:
        """`lockstep worker --worker-id name` of the fleet's activities; None: the fleet's default."""
        args = ["worker", "--activities", self.activities, "--worker-id", name, "--poll-interval", "50ms"]
        concurrency = self.WORKER_CONCURRENCY if concurrency is None else concurrency
        lease_ttl = self.WORKER_LEASE_TTL if lease_ttl is None else lease_ttl
        if concurrency is not None:
            args += ["--concurrency", str(concurrency)]
        if lease_ttl is not None:
            args += ["--lease-ttl", lease_ttl]
        if not (self.WORKER_SCHEDULER if scheduler is None else scheduler):
            args.append("--no-scheduler")
        for activity in only:
            args += ["--only", activity]
        for version in versions:
            args += ["--versions", version]
        ready = "serving" if wait else None
        return self.spawn(name, [*args, *extra], faults=faults, ready=ready, db_url=db_url)

    def scheduler(
        self,
        name: str,
        *,
        poll_interval: str = "50ms",
        extra: Iterable[str] = (),
        faults: str = "",
        wait: bool = True,
    ) -> Proc:
        args = ["scheduler", "--poll-interval", poll_interval, *self.SCHEDULER_ARGS, *extra]
        return self.spawn(name, args, faults=faults, ready="scheduler running" if wait else None)

    def serve(
        self,
        name: str,
        port: int,
        *,
        notify: str | None = None,
        faults: str = "",
        db_url: str | None = None,
    ) -> Proc:
        """`lockstep serve` on 127.0.0.1:`port` (its base URL in `.url`), once `/healthz` answers 200."""
        args = ["serve", "--port", str(port), "--log-format", "console"]
        if notify:
            args += ["--notify", notify]
        proc = self.spawn(name, args, faults=faults, db_url=db_url)
        self.wait_healthy(proc, f"http://127.0.0.1:{port}")
        return proc

    def wait_healthy(self, proc: Proc, url: str, timeout: float | None = None) -> None:
        """Wait until the server `proc` answers 200 on `url`/healthz; its base URL goes in `.url`."""
        proc.url = url

        def healthy() -> bool:
            self._check_alive(proc)
            try:
                return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, timeout or self.ready_timeout, f"{proc.name} to be healthy", interval=0.05)

    def wait_ready(self, proc: Proc, marker: str, timeout: float | None = None) -> None:
        """Wait for the start-up line a process prints once it runs (signal handlers installed)."""

        def ready() -> bool:
            self._check_alive(proc)
            return marker in proc.log()

        wait_until(ready, timeout or self.ready_timeout, f"{proc.name} to print {marker!r}")

    @staticmethod
    def _check_alive(proc: Proc) -> None:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log()[-4000:]}")

    def cli(
        self, *args: str, expect: int | None = 0, tenant: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """One `lockstep` command on this database, as an operator would type it; its exit status must
        be `expect` (None: not checked)."""
        pre = ["--tenant", tenant] if tenant else []
        done = clifork.run(  # a forked process: the same command without a second of imports
            [sys.executable, "-m", "lockstep", "--db", self.db_url, *pre, *args],
            env=self.env,
            cwd=self.dir,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if expect is not None and done.returncode != expect:
            raise RuntimeError(
                f"lockstep {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            )
        return done

    def cli_json(self, *args: str, tenant: str | None = None) -> Any:
        return json.loads(self.cli(*args, tenant=tenant).stdout)

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """One raw statement on the fleet's database (see `sql`)."""
        return sql(self.db_url, statement, params)

    def stop_quiescent(self, proc: Proc) -> bool:
        return stop_quiescent(proc, self.db_url)

    def shutdown(self, *, show_logs: bool = False) -> None:
        """Kill and reap every process (all of them, even when one fails: the first failure is raised
        afterwards); with `show_logs`, print the tail of each log (pytest shows it when a test fails)."""
        failed: BaseException | None = None
        for proc in self.procs:
            try:
                proc.close()
            except Exception as exc:
                failed = failed or exc
            if show_logs:
                print(f"----- {proc.name} (pid {proc.pid}, exit {proc.popen.returncode}) -----")
                print(proc.log()[-20_000:])
        if failed is not None:
            raise failed
