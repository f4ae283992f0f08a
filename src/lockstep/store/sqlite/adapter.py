"""SQLite adapter: WAL, synchronous=FULL by default, writers serialised by BEGIN IMMEDIATE.

A transition is acknowledged only after COMMIT returns, and with synchronous=FULL the WAL is fsynced
by then, so an acknowledged transition survives a process crash or power loss.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path

from ...core.timeutil import iso
from ..migrate import check_applied, migrations
from ..port import SchemaError, Sealer, StoreUnavailable
from ..sql import load_queries
from ..sqltx import SqlTx
from ..states import StateCache

__all__ = ["SqliteStore", "SqliteTx"]

Q = load_queries(__package__ or "lockstep.store.sqlite", "queries.sql")


class SqliteTx(SqlTx):
    def __init__(
        self, conn: sqlite3.Connection, states: StateCache | None = None, sealer: Sealer | None = None
    ) -> None:
        super().__init__(conn, Q, sqlite3.IntegrityError, states, sealer)


class SqliteStore:
    """One connection per thread; the file is the database."""

    def __init__(
        self, url: str, *, busy_timeout_s: float = 30.0, synchronous: str = "FULL", check_schema: bool = True
    ) -> None:
        self.url = url
        self.path = ":memory:" if url == "sqlite://:memory:" else url[len("sqlite:///") :]
        if synchronous not in ("FULL", "NORMAL", "EXTRA"):
            raise SchemaError(f"synchronous must be FULL, EXTRA or NORMAL, not {synchronous!r}")
        self.busy_timeout_s = busy_timeout_s
        self.synchronous = synchronous
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        # Threads of this process queue here for the write lock instead of in SQLite's busy handler,
        # which sleeps in steps up to 100 ms: under contention that sleep, not the disk, set the pace.
        self._writer = threading.RLock()
        self.states = StateCache()
        self.sealer: Sealer | None = None
        if self.path != ":memory:":
            parent = Path(self.path).expanduser().resolve().parent
            if not parent.is_dir():
                raise StoreUnavailable(f"cannot open {self.path}: directory {parent} does not exist")
        # An in-memory database is shared by all threads of this store through a named shared cache;
        # the first connection stays open for the store's lifetime so the database lives that long.
        self._target = self.path
        self._uri = False
        if self.path == ":memory:":
            self._target = f"file:lockstep-mem-{id(self)}?mode=memory&cache=shared"
            self._uri = True
        if check_schema:
            try:
                self._check_schema()
            except BaseException:
                self.close()
                raise

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(
                    self._target,
                    isolation_level=None,
                    timeout=self.busy_timeout_s,
                    check_same_thread=False,
                    uri=self._uri,
                )
                _with_retry(conn, "PRAGMA journal_mode=WAL", self.busy_timeout_s)
                conn.execute(f"PRAGMA synchronous={self.synchronous}")
                conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
                conn.execute("PRAGMA foreign_keys=ON")
            except sqlite3.Error as exc:
                raise StoreUnavailable(f"cannot open SQLite database {self.path}: {exc}") from None
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def _tx(self, begin: str) -> Iterator[SqliteTx]:
        conn = self._conn()
        try:
            conn.execute(begin)
        except sqlite3.OperationalError as exc:
            raise StoreUnavailable(f"database is busy or unavailable: {exc}") from None
        try:
            # Only writers use the state cache: reads (verify, show) see the stored snapshot itself.
            yield SqliteTx(conn, self.states if begin == "BEGIN IMMEDIATE" else None, self.sealer)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            conn.execute("ROLLBACK")
            raise StoreUnavailable(f"commit failed: {exc}") from None

    @contextmanager
    def write(self) -> Iterator[SqliteTx]:
        if not self._writer.acquire(timeout=self.busy_timeout_s):
            raise StoreUnavailable(f"no write turn within {self.busy_timeout_s:.0f}s (database busy)")
        try:
            with self._tx("BEGIN IMMEDIATE") as tx:
                yield tx
        finally:
            self._writer.release()

    def read(self) -> AbstractContextManager[SqliteTx]:
        return self._tx("BEGIN")

    # --- schema --------------------------------------------------------------------------------
    def _applied(self, conn: sqlite3.Connection) -> dict[int, str]:
        has = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_migrations'")
        if has.fetchone() is None:
            return {}
        return {r[0]: r[1] for r in conn.execute("SELECT version, checksum FROM schema_migrations")}

    def _check_schema(self) -> None:
        conn = self._conn()
        wanted = migrations("lockstep.store.sqlite")
        applied = self._applied(conn)
        if not applied:
            self.upgrade(fresh_only=True)  # checks for foreign tables under the write lock
            return
        check_applied(wanted, applied, self.path)

    def upgrade(self, fresh_only: bool = False) -> list[str]:
        """Apply pending migrations; safe when several processes run it at once (BEGIN IMMEDIATE).

        With `fresh_only` (opening a database), refuse one that has tables but no migration record."""
        conn = self._conn()
        done = []
        conn.execute("BEGIN IMMEDIATE")
        try:
            if fresh_only and not self._applied(conn):
                tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
                if tables:
                    raise SchemaError(
                        f"{self.path} has tables ({', '.join(sorted(tables)[:5])}) but no lockstep schema "
                        f"record: it is not a lockstep database, or its schema_migrations table was removed; "
                        f"use another file"
                    )
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                "name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            applied = self._applied(conn)
            for m in migrations("lockstep.store.sqlite"):
                if m.version in applied:
                    continue
                for stmt in _statements(m.sql):
                    conn.execute(stmt)
                if m.name == "audit_chain":  # hashes SQL cannot compute here: the rows written before
                    SqliteTx(conn).chain_legacy_audit()
                conn.execute(
                    "INSERT INTO schema_migrations VALUES (?, ?, ?, ?)",
                    (m.version, m.name, m.checksum, iso_now()),
                )
                done.append(f"{m.version:04d}_{m.name}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return done

    # --- notifications and event partitions: PostgreSQL's, no-ops here ----------------------------
    def listen(self, channels: Sequence[str], on_notify: Callable[[], None], stop: threading.Event) -> None:
        """SQLite has no notifications: returns at once, and waiting processes poll (the port's contract)."""

    def ensure_partitions(self) -> None:
        """SQLite's events table has no partitions: nothing to create."""

    def close(self) -> None:
        with self._lock:
            for c in self._all:
                c.close()
            self._all.clear()
        self._local = threading.local()


def iso_now() -> str:
    """Migration bookkeeping only; engine time always comes from the service's clock."""
    return iso(datetime.now(UTC))


def _statements(sql: str) -> list[str]:
    """Split a migration into statements; sqlite3.complete_statement keeps triggers whole."""
    out, buf = [], ""
    for line in sql.splitlines(keepends=True):
        if not buf and line.strip().startswith("--"):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out


def _with_retry(conn: sqlite3.Connection, statement: str, timeout_s: float) -> None:
    """Switching a new file to WAL needs an exclusive lock that the busy handler does not wait for;
    several processes opening the same new file at once would otherwise fail with "locked"."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn.execute(statement)
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
