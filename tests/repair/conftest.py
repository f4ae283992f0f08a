"""Fixtures for the service-level repair tests: an Engine on a SQLite file in tmp_path with a fake clock,
a tenant with an approver and an operator, and in-process workers that are always stopped."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lockstep.app.approvals import Approvals
from lockstep.app.principals import Principals
from lockstep.app.repair import Repairs
from lockstep.engine import Engine
from lockstep.runtime.activity import Registry
from lockstep.runtime.worker import Worker

TENANT = "acme"
T0 = datetime(2025, 3, 1, 9, 0, 0, tzinfo=UTC)
TABLES = ("runs", "events", "tasks", "timers")


class FakeClock:
    def __init__(self, start: datetime = T0) -> None:
        self.now = start
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self.now

    def advance(self, **kw: float) -> datetime:
        with self._lock:
            self.now += timedelta(**kw)
            return self.now


@dataclass
class World:
    """One engine and the services a repair scenario needs, with helpers that read as the scenario."""

    engine: Engine
    db_path: Path
    clock: FakeClock | None
    principals: Principals
    repairs: Repairs
    approvals: Approvals
    workers: list[Worker] = field(default_factory=list)

    @property
    def svc(self) -> Any:
        return self.engine.service

    def publish(self, doc: dict[str, Any]) -> int:
        return int(self.engine.publish(doc, tenant=TENANT)["version"])

    def start(self, name: str, input: Any = None, version: int | None = None) -> str:
        return self.engine.start(name, input={} if input is None else input, tenant=TENANT, version=version)

    def show(self, run_id: str) -> dict[str, Any]:
        return self.engine.show(run_id, tenant=TENANT)

    def events(self, run_id: str) -> list[dict[str, Any]]:
        return self.engine.events(run_id, tenant=TENANT)

    def types(self, run_id: str) -> list[str]:
        return [e["type"] for e in self.events(run_id)]

    def of_type(self, run_id: str, kind: str) -> list[dict[str, Any]]:
        return [e["data"] for e in self.events(run_id) if e["type"] == kind]

    def wait_for(self, run_id: str, *statuses: str, timeout: float = 15.0) -> dict[str, Any]:
        return self.engine.wait_for(run_id, statuses or ("completed",), timeout=timeout, tenant=TENANT)

    def wait_until(self, what: str, cond: Callable[[], bool], timeout: float = 15.0) -> None:
        """Poll a condition (not a fixed sleep): the engine's own wait_for polls the same way."""
        done = threading.Event()
        deadline = datetime.now(UTC) + timedelta(seconds=timeout)
        while not cond():
            if datetime.now(UTC) > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            done.wait(0.02)

    def totals(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of the run tables, to prove that a refused command wrote nothing."""
        with closing(sqlite3.connect(self.db_path)) as conn:
            return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in TABLES}

    def task_rows(self, run_id: str) -> list[tuple[str, str, int]]:
        with closing(sqlite3.connect(self.db_path)) as conn:
            rows = conn.execute(
                "SELECT task_id, status, version FROM tasks WHERE run_id = ? ORDER BY task_id", (run_id,)
            ).fetchall()
        return [(str(a), str(b), int(c)) for a, b, c in rows]

    def verify_ok(self) -> None:
        report = self.svc.verify()
        assert report, "verify checked no run"
        assert all(r.ok for r in report), report

    @contextmanager
    def worker(self, registry: Registry, **kw: Any) -> Iterator[Worker]:
        """A real in-process worker (no scheduler unless asked: tests drive timers and leases)."""
        kw.setdefault("scheduler", False)
        kw.setdefault("poll_interval", timedelta(milliseconds=10))
        kw.setdefault("lease_ttl", timedelta(seconds=5))
        w = self.engine.worker(registry, **kw).start()
        self.workers.append(w)
        try:
            yield w
        finally:
            w.stop(timeout=20)


def _world(path: Path, clock: FakeClock | None) -> World:
    engine = Engine.open(f"sqlite:///{path}", clock=clock) if clock else Engine.open(f"sqlite:///{path}")
    principals = engine.service.principals
    principals.create_tenant(TENANT)
    principals.create_user(TENANT, "alice", ["approver"], [])
    principals.create_user(TENANT, "op", ["operator"], [])
    return World(engine, path, clock, principals, engine.service.repairs, engine.service.approvals)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    """An engine with a fake clock (timers fire and leases expire only when the test says so)."""
    w = _world(tmp_path / "lockstep.db", FakeClock())
    try:
        yield w
    finally:
        for wk in w.workers:
            wk.stop(timeout=20)
        w.engine.close()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[World]:
    """An engine on the real clock, for the scenario where the scheduler itself fires a short timer."""
    w = _world(tmp_path / "lockstep.db", None)
    try:
        yield w
    finally:
        for wk in w.workers:
            wk.stop(timeout=20)
        w.engine.close()
