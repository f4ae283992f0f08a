"""Fixtures for the storage contract suite: one suite, parametrized over every backend.

A backend is described by a small `Backend` object: how to make a fresh database URL, and how to reach
the database underneath the adapter (a raw DB-API connection) so a test can check what is really
stored, tamper with it, or prove that the database itself refuses something. BACKENDS has SQLite (a new
file per test) and PostgreSQL (an empty database per test in the session's throwaway cluster from
tests/conftest.py, reused between tests as pgdb.py explains; skipped without the server binaries, a
failure under CI=true).

Run ids in these tests end in two hex digits, like the ids the service makes (`new_run_id`: creation
time then random hex): PostgreSQL derives a run's scheduler partition from its last byte.

Raw SQL in tests is written with `?` placeholders; a backend whose driver uses another paramstyle
translates them in `run` (used by `fetch`/`execute`).
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

import psycopg
import pytest

from lockstep.core.commands import ClaimTask, Command, StartRun
from lockstep.core.decide import decide
from lockstep.core.definition import Definition, parse_definition
from lockstep.core.effects import effects_of
from lockstep.core.events import Event
from lockstep.core.evolve import evolve
from lockstep.core.timeutil import iso
from lockstep.store import LoadedRun, Store, open_store
from lockstep.store.migrate import Migration, migrations

from .pgdb import PgDatabases


class Backend:
    """What the contract suite needs to know about one backend, beyond the Store port itself."""

    name: str
    # The adapter package that ships this backend's migrations (`<package>/migrations/NNNN_name.sql`).
    package: str
    # The DB-API error a raw statement raises when the database refuses it (constraint, trigger).
    error: type[Exception]
    # The engine's own tables and the guards on them: whatever else later migrations add, these must exist.
    engine_schema: frozenset[tuple[str, str]]

    def url(self, tmp_path: Path, request: pytest.FixtureRequest) -> str:
        """A URL of a database that does not exist yet or is empty (opening it creates the schema)."""
        raise NotImplementedError

    def raw(self, url: str) -> AbstractContextManager[Any]:
        """A raw autocommit DB-API connection to the same database, closed on exit."""
        raise NotImplementedError

    def run(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        """Execute one statement written with `?` placeholders on a raw connection; return the cursor."""
        return conn.execute(sql, tuple(params))

    def fetch(self, url: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.raw(url) as conn:
            return [tuple(r) for r in self.run(conn, sql, params).fetchall()]

    def execute(self, url: str, sql: str, params: Sequence[Any] = ()) -> None:
        with self.raw(url) as conn:
            self.run(conn, sql, params)

    def schema_objects(self, url: str) -> set[tuple[str, str]]:
        """(kind, name) of every table, index and trigger in the database."""
        raise NotImplementedError

    def build_at(self, url: str, version: int) -> None:
        """Create a database with only the migrations up to `version` applied (an older install)."""
        raise NotImplementedError

    def migrations(self) -> list[Migration]:
        return migrations(self.package)

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
_PARTITION_OF = re.compile(
    r"^\s*CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)\s+PARTITION\s+OF\b",
    re.IGNORECASE | re.MULTILINE,
)

# Tables and indexes every backend has; each backend adds the triggers that keep events append-only.
ENGINE_TABLES = frozenset(
    {
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
    }
)


class SqliteBackend(Backend):
    """SQLite: one file per test; `sqlite_*` objects (autoindexes, sqlite_sequence) are SQLite's own."""

    name = "sqlite"
    package = "lockstep.store.sqlite"
    error = sqlite3.DatabaseError
    engine_schema = ENGINE_TABLES | {
        ("trigger", "events_append_only_update"),
        ("trigger", "events_append_only_delete"),
    }

    def url(self, tmp_path: Path, request: pytest.FixtureRequest | None = None) -> str:
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


# Objects of the public schema, by the rule in PostgresBackend's docstring. Partitions (tables and the
# indexes on them) are `relispartition`; a trigger cloned onto a partition has a parent (`tgparentid`).
_PG_SCHEMA_OBJECTS = """
SELECT 'table', c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
UNION ALL
SELECT 'index', c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('i', 'I') AND NOT c.relispartition
  AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = c.oid AND k.contype IN ('p', 'u', 'x'))
UNION ALL
SELECT 'trigger', t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND NOT t.tgisinternal AND t.tgparentid = 0
"""


class PostgresBackend(Backend):
    """PostgreSQL: an empty database per test in the session's throwaway cluster, so opening it runs the
    migrations: created without a template the first time, afterwards the same database with its
    `public` schema dropped and made anew (pgdb.py: creating databases is the slow part).

    Schema comparison rule: `schema_objects` lists the tables, indexes and triggers of the `public`
    schema that a migration creates by name, and `declared_schema` lists the names the migrations
    declare with CREATE TABLE / [UNIQUE] INDEX / TRIGGER. Left out on both sides, because they are
    storage details PostgreSQL or lockstep derives from a declared object:
      - partitions of a partitioned table (`relispartition`): `events_default`, declared with
        `CREATE TABLE ... PARTITION OF`, and the monthly `events_yYYYYmMM` created at run time by
        `lockstep_ensure_event_partition` (test_postgres.py checks those);
      - indexes that back a PRIMARY KEY, UNIQUE or EXCLUDE constraint (`*_pkey`, `*_key`: the
        counterpart of SQLite's `sqlite_autoindex_*`) and indexes on partitions;
      - triggers cloned onto partitions from the partitioned table's trigger (`tgparentid <> 0`).
    Functions and sequences (BIGSERIAL) are not compared.
    """

    name = "postgresql"
    package = "lockstep.store.postgres"  # the package is `postgres`; the backend is `postgresql`
    error = psycopg.DatabaseError
    engine_schema = ENGINE_TABLES | {("trigger", "events_append_only")}  # BEFORE UPDATE OR DELETE

    def url(self, tmp_path: Path, request: pytest.FixtureRequest) -> str:
        databases: PgDatabases = request.getfixturevalue("pg_databases")
        url = databases.empty()
        request.addfinalizer(lambda: databases.release_empty(url))
        return url

    @contextmanager
    def raw(self, url: str) -> Iterator[psycopg.Connection[Any]]:
        conn = psycopg.connect(url, autocommit=True)
        try:
            yield conn
        finally:
            conn.close()

    def run(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        if not params:  # no parameters: psycopg sends the text as it is (a literal % stays a %)
            return conn.execute(sql)
        return conn.execute(sql.replace("%", "%%").replace("?", "%s"), tuple(params))

    def schema_objects(self, url: str) -> set[tuple[str, str]]:
        return {(r[0], r[1]) for r in self.fetch(url, _PG_SCHEMA_OBJECTS)}

    def declared_schema(self) -> set[tuple[str, str]]:
        partitions = {name for m in self.migrations() for name in _PARTITION_OF.findall(m.sql)}
        return {(kind, name) for kind, name in super().declared_schema() if name not in partitions}

    def build_at(self, url: str, version: int) -> None:
        with self.raw(url) as conn:
            conn.execute(
                "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                "checksum TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            for m in self.migrations():
                if m.version > version:
                    break
                with conn.transaction():
                    conn.execute(m.sql.encode())
                    conn.execute(
                        "INSERT INTO schema_migrations VALUES (%s, %s, %s, %s)",
                        (m.version, m.name, m.checksum, "2025-01-01T00:00:00.000Z"),
                    )


BACKENDS: dict[str, Backend] = {"sqlite": SqliteBackend(), "postgresql": PostgresBackend()}


@pytest.fixture(scope="session")
def pg_databases(pg_cluster: Any) -> PgDatabases:
    """Empty and migrated PostgreSQL databases, reused across tests (see pgdb.py for why and how)."""
    return PgDatabases(pg_cluster)


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend in turn (PostgreSQL tests skip, or fail under CI=true, without the server binaries)."""
    return BACKENDS[request.param]


@pytest.fixture
def url(backend: Backend, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A URL of a database that does not exist yet or is empty (opening it creates and migrates it)."""
    return backend.url(tmp_path, request)


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    """The store on `url`, opened (so migrated) before the test and closed after it."""
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
        return int(events[0].data.fencing)


def _definition(doc: dict[str, Any] | None) -> Definition:
    return parse_definition(doc or ACTIVITY_DOC)


def _fold(state: Any, events: list[Event]) -> Any:
    for e in events:
        state = evolve(state, e)
    return state


@pytest.fixture
def driver(store: Store) -> Driver:
    return Driver(store)
