"""The processes of one fault scenario, on the lab's fleet harness (lab/fleet/): a database (SQLite
file or a PostgreSQL database on a throwaway cluster), the downstream payment API, real `lockstep`
worker / scheduler / serve processes started with fail points, and an in-process engine. Every log and
the fail point log are in the scenario's directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx

from lockstep.app import failpoints
from lockstep.engine import Engine
from lockstep.runtime.webhook import SECRET_ENV, new_secret
from lockstep.testing.pgcluster import PgCluster

from .. import lab_env
from ..fleet import Fleet, Proc, database, free_port, wait_until
from .activities import DOWNSTREAM_ENV
from .ledger import LedgerReader

__all__ = ["ACTIVITIES", "FaultFleet"]

ACTIVITIES = "lab.faults.activities"


class FaultFleet(Fleet):
    """Everything one scenario runs: database, downstream, lockstep processes, an in-process engine."""

    WORKER_CONCURRENCY = 8
    WORKER_LEASE_TTL = "1s"
    # The scrub (app/scrub.py) every second over 50 runs: under the scenarios' crashes and races it must
    # never mark a sound run (the checker's verify reports any mark as that run's problem).
    SCHEDULER_ARGS = ("--partition-ttl", "2s", "--scrub-interval", "1s", "--scrub-batch", "50")

    def __init__(
        self,
        workdir: Path,
        backend: str,
        pg: PgCluster | None,
        *,
        http: bool = False,
        server_faults: str = "",
        db_dir: Path | None = None,
    ) -> None:
        url = database(backend, f"faults_{workdir.name.replace('-', '_')}", db_dir or workdir, pg)
        self.failpoint_log = workdir / "failpoints.jsonl"
        env = {
            failpoints.LOG_ENV: str(self.failpoint_log),
            SECRET_ENV: new_secret(),  # `serve --notify webhook:...` signs its webhooks and needs one
        }
        if http:  # the driver scrapes serve's /metrics (and, so, every process's) with this token
            env["LOCKSTEP_METRICS_TOKEN"] = secrets.token_urlsafe(16)
        super().__init__(workdir, url, activities=ACTIVITIES, env=env)
        self.pg = pg
        self.ledger = LedgerReader(workdir / "ledger.db")
        self.downstream = self._spawn_downstream()
        self.env[DOWNSTREAM_ENV] = self.downstream_url
        self.engine = Engine.open(self.db_url)
        # `http`: every worker is a remote one (`lockstep worker --url`, an API key, no database) on the
        # task API of one `lockstep serve`, which commits what they report (and also does scheduler
        # duties). Its names are in `remote`: they serve no metrics of their own (serve counts).
        self.http = http
        self.remote: set[str] = set()
        self.server: Proc | None = None
        if http:
            key = self.engine.service.principals.create_user(
                "default", "fault-worker", ["worker"], []
            ).api_key
            self.key_file = workdir / "worker.key"
            self.key_file.write_text(f"{key}\n")
            self.server = self.serve("serve", free_port(), faults=server_faults)

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
        """A worker as the fleet's defaults say; with `http`, `lockstep worker --url` of the fleet's
        server with the worker key's file (its metrics options dropped: the server counts)."""
        if not self.http:
            return super().worker(
                name,
                concurrency=concurrency,
                lease_ttl=lease_ttl,
                scheduler=scheduler,
                only=only,
                versions=versions,
                extra=extra,
                faults=faults,
                wait=wait,
                db_url=db_url,
            )
        if self.server is None or self.server.url is None:
            raise RuntimeError("the HTTP workers' server is not running")
        rest = list(extra)
        while "--metrics-port" in rest:  # the option and its value
            i = rest.index("--metrics-port")
            del rest[i : i + 2]
        args = ["worker", "--url", self.server.url, "--api-key-file", str(self.key_file)]
        args += ["--activities", self.activities, "--worker-id", name, "--poll-wait", "1s"]
        args += ["--concurrency", str(concurrency or self.WORKER_CONCURRENCY)]
        args += ["--lease-ttl", lease_ttl or self.WORKER_LEASE_TTL or "1s"]
        for activity in only:
            args += ["--only", activity]
        for version in versions:
            args += ["--versions", version]
        argv = [sys.executable, "-m", "lockstep", *args, *rest]
        proc = self.popen(name, argv, {**self.env, failpoints.ENV: faults} if faults else self.env)
        self.remote.add(name)
        if wait:
            self.wait_ready(proc, "serving")
        return proc

    def _spawn_downstream(self) -> Proc:
        port_file = self.dir / "downstream.port"
        args = ["-m", "lab.faults.downstream", "--ledger", str(self.dir / "ledger.db")]
        argv = [sys.executable, *args, "--port-file", str(port_file)]
        proc = self.popen("downstream", argv, lab_env(os.environ))
        port = wait_until(lambda: port_file.exists() and port_file.read_text().strip(), 20, "downstream")
        self.downstream_url = f"http://127.0.0.1:{int(port)}"
        return proc

    def control(self, **settings: Any) -> None:
        """Tell the downstream to delay, fail or drop responses (see downstream.py)."""
        httpx.post(f"{self.downstream_url}/control", json=settings, timeout=10).raise_for_status()

    def failpoint_hits(self) -> list[dict[str, Any]]:
        if not self.failpoint_log.exists():
            return []
        return [json.loads(line) for line in self.failpoint_log.read_text().splitlines() if line.strip()]

    def release(self, hit: dict[str, Any]) -> None:
        """Let a thread held at a `hold` fail point go on."""
        Path(f"{self.failpoint_log}.release.{hit['pid']}.{hit['hit']}").touch()

    def shutdown(self, *, show_logs: bool = False) -> None:
        """Kill and reap every process; close the engine. Best effort: the logs stay in the directory and
        the matrix goes on with the next scenario."""
        with contextlib.suppress(Exception):
            super().shutdown(show_logs=show_logs)
        self.engine.close()
