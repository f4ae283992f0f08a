"""The processes of one fault scenario, on the lab's fleet harness (lab/fleet/): a database (SQLite
file or a PostgreSQL database on a throwaway cluster), the downstream payment API, real `lockstep`
worker / scheduler / serve processes started with fail points, and an in-process engine. Every log and
the fail point log are in the scenario's directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx

from lockstep.app import failpoints
from lockstep.engine import Engine
from lockstep.runtime.webhook import SECRET_ENV, new_secret
from lockstep.testing.pgcluster import PgCluster

from .. import lab_env
from ..fleet import Fleet, Proc, database, wait_until
from .activities import DOWNSTREAM_ENV
from .ledger import LedgerReader

__all__ = ["ACTIVITIES", "FaultFleet"]

ACTIVITIES = "lab.faults.activities"


class FaultFleet(Fleet):
    """Everything one scenario runs: database, downstream, lockstep processes, an in-process engine."""

    WORKER_CONCURRENCY = 8
    WORKER_LEASE_TTL = "1s"
    SCHEDULER_ARGS = ("--partition-ttl", "2s")

    def __init__(self, workdir: Path, backend: str, pg: PgCluster | None) -> None:
        url = database(backend, f"faults_{workdir.name.replace('-', '_')}", workdir, pg)
        self.failpoint_log = workdir / "failpoints.jsonl"
        env = {
            failpoints.LOG_ENV: str(self.failpoint_log),
            SECRET_ENV: new_secret(),  # `serve --notify webhook:...` signs its webhooks and needs one
        }
        super().__init__(workdir, url, activities=ACTIVITIES, env=env)
        self.pg = pg
        self.ledger = LedgerReader(workdir / "ledger.db")
        self.downstream = self._spawn_downstream()
        self.env[DOWNSTREAM_ENV] = self.downstream_url
        self.engine = Engine.open(self.db_url)

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
