"""A real `lockstep serve` on loopback for the client and remote-worker tests: the crash tests' cluster
(tests/runtime/prockit.py: the test activity module and its downstream ledger) plus a tenant with one
API key per role, written to files as an operator would hand them out, and `lockstep worker --url`
subprocesses that get only the URL and a key file (no --db: they never see the database)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from lab.fleet import Proc, free_port, wait_until
from lockstep import Engine
from tests.runtime.prockit import Cluster, Ledger

__all__ = ["ROLES", "Server", "one_step", "wait_until"]

TENANT = "acme"
ROLES = ("operator", "worker", "approver", "publisher", "viewer")


def one_step(name: str, *, max_attempts: int = 3, timeout: str = "60s") -> dict[str, Any]:
    """A definition whose only step runs test.step with the run input, keyed by input.order."""
    return {
        "name": name,
        "steps": [
            {
                "id": "work",
                "activity": "test.step",
                "input": "${input}",
                "timeout": timeout,
                "retry": {"max_attempts": max_attempts, "initial_interval": "100ms", "backoff": 1.0},
                "idempotency_key": "work-${input.order}",
            }
        ],
    }


class Server(Cluster):
    """`lockstep serve` on a free loopback port over `db_url`, a tenant `acme` with one user per role
    (their keys in `keys` and in files `key_files`), and the in-process `engine` on the same database."""

    def __init__(self, tmp_path: Path, db_url: str) -> None:
        super().__init__(tmp_path, db_url, Ledger(tmp_path / "ledger.db"))
        self.engine = Engine.open(db_url)
        svc = self.engine.service
        svc.principals.create_tenant(TENANT)
        self.keys: dict[str, str] = {}
        self.key_files: dict[str, Path] = {}
        for role in ROLES:
            key = svc.principals.create_user(TENANT, f"u-{role}", [role], []).api_key
            assert key is not None
            self.keys[role] = key
            path = tmp_path / f"{role}.key"
            path.write_text(key + "\n")
            path.chmod(0o600)
            self.key_files[role] = path
        self.port = free_port()
        self.proc: Proc | None = None
        self.url = f"http://127.0.0.1:{self.port}"

    def up(self) -> Server:
        """Start (or start again) `lockstep serve` on the same port; returns once /healthz answers."""
        self.proc = self.serve("serve", self.port)
        return self

    def down(self) -> None:
        """SIGKILL the server (what a crash or a host going away does)."""
        if self.proc is not None:
            self.proc.kill()

    def publish(self, definition: dict[str, Any]) -> None:
        self.engine.publish(definition, tenant=TENANT)

    def remote_worker(
        self, name: str, *, lease_ttl: str = "2s", concurrency: int = 2, wait: bool = True
    ) -> Proc:
        """`lockstep worker --url URL --api-key-file F` (no --db) running the test activities."""
        argv = [
            sys.executable,
            "-m",
            "lockstep",
            "worker",
            "--url",
            self.url,
            "--api-key-file",
            str(self.key_files["worker"]),
            "--activities",
            self.activities,
            "--worker-id",
            name,
            "--lease-ttl",
            lease_ttl,
            "--poll-wait",
            "1s",
            "--concurrency",
            str(concurrency),
        ]
        proc = self.popen(name, argv)
        if wait:
            self.wait_ready(proc, "serving")
        return proc

    def events(self, run_id: str, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.engine.events(run_id, tenant=TENANT) if e["type"] == kind]

    def shutdown(self, *, show_logs: bool = True) -> None:
        try:
            super().shutdown(show_logs=show_logs)
        finally:
            self.engine.close()
