"""Fixtures for service tests: a store on each backend (SQLite in tmp_path, PostgreSQL in the session's
throwaway cluster), a fake clock, raw SQL access for checking and tampering."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from store.pgdb import PgDatabases  # tests/store/pgdb.py: pytest puts tests/ on sys.path (no tests/__init__)

from lockstep.app.service import Service
from lockstep.store import Store, open_store

T0 = datetime(2025, 1, 1, tzinfo=UTC)

ORDER: dict[str, Any] = {
    "name": "order",
    "input_schema": {
        "type": "object",
        "required": ["order"],
        "properties": {"order": {"type": "integer"}},
    },
    "steps": [
        {
            "id": "reserve",
            "activity": "inventory.reserve",
            "input": {"order": "${input.order}"},
            "timeout": "30s",
            "retry": {"max_attempts": 3, "initial_interval": "1s"},
            "compensate": {"activity": "inventory.release", "input": {"order": "${input.order}"}},
        },
        {"id": "pause", "wait": "10s"},
        {
            "id": "charge",
            "activity": "payment.charge",
            "input": {"order": "${input.order}"},
            "timeout": "30s",
        },
    ],
}

NAP: dict[str, Any] = {"name": "nap", "steps": [{"id": "nap", "wait": "1h"}]}


class FakeClock:
    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> datetime:
        self.now += timedelta(**kwargs)
        return self.now


BACKENDS = ["sqlite", "postgresql"]


class Raw:
    """Raw SQL on the store's database, for checking what is stored and for tampering.

    SQL is written with `?` placeholders (translated to `%s` for psycopg) in SQL both backends accept.
    """

    def __init__(self, backend: str, url: str) -> None:
        self.backend = backend
        self.url = url

    @contextmanager
    def _connect(self) -> Iterator[Any]:
        if self.backend == "sqlite":
            conn: Any = sqlite3.connect(self.url[len("sqlite:///") :], isolation_level=None, timeout=10)
        else:
            conn = psycopg.connect(self.url, autocommit=True)
        try:
            yield conn
        finally:
            conn.close()

    def _run(self, conn: Any, sql: str, params: tuple[Any, ...]) -> Any:
        if self.backend == "sqlite":
            return conn.execute(sql, params)
        if not params:
            return conn.execute(sql)
        return conn.execute(sql.replace("%", "%%").replace("?", "%s"), params)

    def fetch(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with self._connect() as conn:
            return [tuple(r) for r in self._run(conn, sql, params).fetchall()]

    def execute(self, sql: str, *params: Any) -> None:
        with self._connect() as conn:
            self._run(conn, sql, params)

    def tamper_events(self, sql: str, *params: Any) -> None:
        """Run an UPDATE/DELETE on events past the append-only guard, as an attacker with DBA rights would:
        SQLite drops the guarding triggers; PostgreSQL skips ordinary triggers for this session."""
        with self._connect() as conn:
            if self.backend == "sqlite":
                conn.execute("DROP TRIGGER IF EXISTS events_append_only_update")
                conn.execute("DROP TRIGGER IF EXISTS events_append_only_delete")
            else:
                conn.execute("SET session_replication_role = replica")
            self._run(conn, sql, params)

    def count(self, table: str) -> int:
        return int(self.fetch(f"SELECT COUNT(*) FROM {table}")[0][0])


@pytest.fixture(scope="session")
def pg_databases(pg_cluster: Any) -> PgDatabases:
    """Migrated PostgreSQL databases, reused across tests (see tests/store/pgdb.py for why and how)."""
    return PgDatabases(pg_cluster)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each backend in turn (PostgreSQL tests skip, or fail under CI=true, without the server binaries)."""
    return str(request.param)


@pytest.fixture
def db_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """An empty database with the current schema (SQLite: a new file, migrated when opened)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'lockstep.db'}"
        return
    databases: PgDatabases = request.getfixturevalue("pg_databases")
    url = databases.migrated()
    try:
        yield url
    finally:
        databases.release_migrated(url)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A SQLite file path, for the tests that are about SQLite itself."""
    return tmp_path / "lockstep.db"


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    """The store on `db_url`, closed after the test."""
    s = open_store(db_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def clock() -> FakeClock:
    """A clock that only moves when the test advances it."""
    return FakeClock()


@pytest.fixture
def svc(store: Store, clock: FakeClock) -> Service:
    """The service over `store` with the fake clock."""
    return Service(store, clock=clock)


@pytest.fixture
def raw(backend: str, db_url: str, store: Store) -> Raw:
    """Raw SQL on the service's database (after the store opened, so migrated, it)."""
    return Raw(backend, db_url)
