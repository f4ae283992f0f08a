"""Fixtures for the storage contract suite: one suite, parametrized over every backend.

A backend is described by a small `Backend` object: how to make a fresh database URL, and how to reach
the database underneath the adapter (a raw DB-API connection) so a test can check what is really
stored, tamper with it, or prove that the database itself refuses something. To add PostgreSQL, write
a `PostgresBackend` with the same methods and add it to BACKENDS (skipped when no server is configured):

    BACKENDS["postgresql"] = PostgresBackend()   # url() creates a fresh schema/database per test

Raw SQL in tests is written with `?` placeholders; a backend whose driver uses another paramstyle
translates them in `fetch`/`execute`.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lockstep.core.commands import ClaimTask, Command, StartRun
from lockstep.core.decide import decide
from lockstep.core.definition import Definition, parse_definition
from lockstep.core.effects import effects_of
from lockstep.core.events import Event
from lockstep.core.state import evolve
from lockstep.core.timeutil import iso
from lockstep.store import LoadedRun, Store, open_store
from lockstep.store.migrate import Migration, migrations


class Backend:
    """What the contract suite needs to know about one backend, beyond the Store port itself."""

    name: str
    # The DB-API error a raw statement raises when the database refuses it (constraint, trigger).
    error: type[Exception]

    def url(self, tmp_path: Path) -> str:
        raise NotImplementedError

    def raw(self, url: str) -> AbstractContextManager[Any]:
        """A raw autocommit DB-API connection to the same database, closed on exit."""
        raise NotImplementedError

    def fetch(self, url: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.raw(url) as conn:
            return [tuple(r) for r in conn.execute(sql, tuple(params)).fetchall()]

    def execute(self, url: str, sql: str, params: Sequence[Any] = ()) -> None:
        with self.raw(url) as conn:
            conn.execute(sql, tuple(params))

    def schema_objects(self, url: str) -> set[tuple[str, str]]:
        """(kind, name) of every table, index and trigger in the database."""
        raise NotImplementedError

    def build_at(self, url: str, version: int) -> None:
        """Create a database with only the migrations up to `version` applied (an older install)."""
        raise NotImplementedError

    def migrations(self) -> list[Migration]:
        return migrations(f"lockstep.store.{self.name}")

    def declared_schema(self) -> set[tuple[str, str]]:
        """Every object the shipped migrations create, plus the bookkeeping table."""
        found = {("table", "schema_migrations")}
        for m in self.migrations():
            found |= {(kind.lower(), name) for kind, name in _CREATE.findall(m.sql)}
        return found


_CREATE = re.compile(
    r"^\s*CREATE\s+(?:UNIQUE\s+)?(TABLE|INDEX|TRIGGER)\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)",
    re.IGNORECASE | re.MULTILINE,
)

# The engine's own tables and the guards on them: whatever else later migrations add, these must exist.
ENGINE_SCHEMA = {
    ("table", "schema_migrations"),
    ("table", "definitions"),
    ("table", "runs"),
    ("table", "events"),
    ("table", "tasks"),
    ("table", "timers"),
    ("index", "runs_by_tenant_status"),
    ("index", "runs_by_tenant"),
    ("index", "tasks_ready"),
    ("index", "tasks_leased"),
    ("index", "timers_due"),
    ("trigger", "events_append_only_update"),
    ("trigger", "events_append_only_delete"),
}


class SqliteBackend(Backend):
    name = "sqlite"
    error = sqlite3.DatabaseError

    def url(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'lockstep.db'}"

    @staticmethod
    def path(url: str) -> str:
        return url[len("sqlite:///") :]

    @contextmanager
    def raw(self, url: str) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path(url), isolation_level=None, timeout=10)
        try:
            yield conn
        finally:
            conn.close()

    def schema_objects(self, url: str) -> set[tuple[str, str]]:
        rows = self.fetch(
            url,
            "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'index', 'trigger') "
            "AND name NOT LIKE 'sqlite_%'",
        )
        return {(r[0], r[1]) for r in rows}

    def build_at(self, url: str, version: int) -> None:
        with self.raw(url) as conn:
            conn.execute(
                "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                "checksum TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            for m in self.migrations():
                if m.version > version:
                    break
                conn.executescript(m.sql)
                conn.execute(
                    "INSERT INTO schema_migrations VALUES (?, ?, ?, ?)",
                    (m.version, m.name, m.checksum, "2025-01-01T00:00:00.000Z"),
                )


BACKENDS: dict[str, Backend] = {"sqlite": SqliteBackend()}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> Backend:
    return BACKENDS[request.param]


@pytest.fixture
def url(backend: Backend, tmp_path: Path) -> str:
    """A URL of a database that does not exist yet (opening it creates and migrates it)."""
    return backend.url(tmp_path)


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    s = open_store(url)
    try:
        yield s
    finally:
        s.close()


# --- driving runs through the port with the real core ------------------------------------------

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


ACTIVITY_DOC: dict[str, Any] = {
    "name": "flow",
    "steps": [
        {
            "id": "work",
            "activity": "demo.work",
            "timeout": "30s",
            "retry": {"max_attempts": 3, "initial_interval": "1s"},
        }
    ],
}
WAIT_DOC: dict[str, Any] = {"name": "nap", "steps": [{"id": "nap", "wait": "10s"}]}


@dataclass
class Driver:
    """Runs the pure core against a store, one command per write transaction (like the service)."""

    store: Store

    def start(
        self,
        run_id: str,
        *,
        doc: dict[str, Any] | None = None,
        tenant: str = "t1",
        key: str | None = None,
        request_digest: str | None = None,
        now: datetime = T0,
    ) -> list[Event]:
        d = parse_definition(doc or ACTIVITY_DOC)
        events = decide(None, StartRun(run_id, tenant, 1, {}, key), now, d)
        after = _fold(None, events)
        with self.store.write() as tx:
            tx.append(None, after, events, effects_of(events), now_ms=ms(now), request_digest=request_digest)
        return events

    def load(self, run_id: str) -> LoadedRun:
        with self.store.read() as tx:
            loaded = tx.load_run(run_id)
        assert loaded is not None
        return loaded

    def plan(
        self, run_id: str, command: Command, *, doc: dict[str, Any] | None = None, now: datetime = T0
    ) -> tuple[LoadedRun, Any, list[Event]]:
        """Decide a command against the stored state without writing: (before, after, events)."""
        loaded = self.load(run_id)
        events = decide(loaded.state, command, now, _definition(doc))
        return loaded, _fold(loaded.state, events), events

    def command(
        self, run_id: str, command: Command, *, doc: dict[str, Any] | None = None, now: datetime = T0
    ) -> list[Event]:
        before, after, events = self.plan(run_id, command, doc=doc, now=now)
        with self.store.write() as tx:
            tx.append(before, after, events, effects_of(events), now_ms=ms(now))
        return events

    def claim(self, run_id: str, *, worker: str = "w1", now: datetime = T0, timeout_s: int = 30) -> int:
        """Lease the run's scheduled task; return the fencing token."""
        task = self.load(run_id).state.active.task_id  # type: ignore[union-attr]
        events = self.command(
            run_id, ClaimTask(task, worker, iso(now + timedelta(seconds=timeout_s))), now=now
        )
        return int(events[0].data["fencing"])


def _definition(doc: dict[str, Any] | None) -> Definition:
    return parse_definition(doc or ACTIVITY_DOC)


def _fold(state: Any, events: list[Event]) -> Any:
    for e in events:
        state = evolve(state, e)
    return state


@pytest.fixture
def driver(store: Store) -> Driver:
    return Driver(store)
