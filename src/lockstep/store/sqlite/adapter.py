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

from ...core.effects import Effect
from ...core.events import Event
from ...core.timeutil import iso
from ..migrate import check_applied, migrations
from ..port import CorruptRow, LoadedRun, SchemaError, Sealer, StoreUnavailable
from ..sql import load_queries
from ..sqltx import SqlTx
from ..sqltx.base import wake_channels
from ..states import StateCache
from .shape import check_shape, integrity_problems, shape_problems, statements
from .wake import WakeDir

__all__ = ["SqliteStore", "SqliteTx"]

Q = load_queries(__package__ or "lockstep.store.sqlite", "queries.sql")


class SqliteTx(SqlTx):
    def __init__(
        self, conn: sqlite3.Connection, states: StateCache | None = None, sealer: Sealer | None = None
    ) -> None:
        super().__init__(conn, Q, sqlite3.IntegrityError, states, sealer)
        # What the transaction's commit wakes other processes on (the wake directory; only a hint)
        self.wake: set[str] = set()

    def hint(self, effects: Sequence[Effect]) -> None:
        self.wake |= wake_channels(effects)

    # A changed byte can leave a TEXT column that is not UTF-8: Python's sqlite3 then fails the whole
    # fetch. That is one damaged run (CorruptRow, with the seq), not an internal error of every reader.
    def load_run(self, run_id: str, *, skip_locked: bool = False) -> LoadedRun | None:
        try:
            return super().load_run(run_id, skip_locked=skip_locked)
        except sqlite3.OperationalError as exc:
            if _NOT_UTF8 not in str(exc):
                raise
            raise CorruptRow(run_id, None, "its text is not UTF-8") from None

    def events(self, run_id: str) -> list[tuple[Event, str]]:
        try:
            return super().events(run_id)
        except sqlite3.OperationalError as exc:
            if _NOT_UTF8 not in str(exc):
                raise
            rows = self.c.execute(
                "SELECT seq, CAST(data AS BLOB) FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
            )
            seq = next((r[0] for r in rows if not _utf8(r[1])), None)
            raise CorruptRow(run_id, seq, "its data is not UTF-8 text") from None


class SqliteStore:
    """One connection per thread; the file is the database."""

    def __init__(
        self,
        url: str,
        *,
        busy_timeout_s: float = 30.0,
        synchronous: str = "FULL",
        check_schema: bool = True,
        refuse_damaged: bool = True,
    ) -> None:
        self.url = url
        self.path = ":memory:" if url == "sqlite://:memory:" else url[len("sqlite:///") :]
        if synchronous not in ("FULL", "NORMAL", "EXTRA"):
            raise SchemaError(f"synchronous must be FULL, EXTRA or NORMAL, not {synchronous!r}")
        self.busy_timeout_s = busy_timeout_s
        self.synchronous = synchronous
        # False for `lockstep verify` alone: it must open a damaged file to say what is wrong with it.
        self.refuse_damaged = refuse_damaged
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
        self.wake = None if self.path == ":memory:" else WakeDir(str(Path(self.path).expanduser().resolve()))
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
        # Only writers use the state cache: reads (verify, show) see the stored snapshot itself.
        tx = SqliteTx(conn, self.states if begin == "BEGIN IMMEDIATE" else None, self.sealer)
        try:
            yield tx
        except sqlite3.OperationalError as exc:
            _rollback(conn)
            if _out_of_reach(exc):
                raise StoreUnavailable(self._unavailable(exc)) from None
            raise
        except BaseException:
            _rollback(conn)
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            _rollback(conn)
            raise StoreUnavailable(f"commit failed: {self._unavailable(exc)}") from None
        if tx.wake and self.wake is not None:
            self.wake.notify(tx.wake)

    def _unavailable(self, exc: sqlite3.OperationalError) -> str:
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF == _SQLITE_FULL:
            return (
                f"the disk holding {self.path} is full ({exc}): nothing was written; free space on it "
                f"and try again (no restart needed)"
            )
        return f"database {self.path} is unavailable: {exc}"

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
        if self.refuse_damaged:
            check_shape(conn, self.path)

    def check_files(self) -> list[str]:
        """What SQLite's own integrity_check finds wrong in the file (every page: slow on a big file)."""
        with self.read():
            conn = self._conn()
            return [f"schema: {p}" for p in shape_problems(conn)] + integrity_problems(conn)

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
                for stmt in statements(m.sql):
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
            _rollback(conn)
            raise
        return done

    # --- wake-ups between processes (wake.py); event partitions: PostgreSQL's, a no-op here ---------
    def listen(self, channels: Sequence[str], on_notify: Callable[[], None], stop: threading.Event) -> None:
        """Call on_notify for every wake-up on channels from another process's commit until stop is set
        (run it in a thread). Only a hint: an in-memory database returns at once; the caller polls."""
        if self.wake is not None:
            self.wake.listen(channels, on_notify, stop)

    def ensure_partitions(self) -> None:
        """SQLite's events table has no partitions: nothing to create."""

    def database_clock_ms(self) -> int | None:
        """None: SQLite has no clock but this host's (every process of one database shares the host)."""
        return None

    def close(self) -> None:
        if self.wake is not None:
            self.wake.close()
        with self._lock:
            for c in self._all:
                c.close()
            self._all.clear()
        self._local = threading.local()


def iso_now() -> str:
    """Migration bookkeeping only; engine time always comes from the service's clock."""
    return iso(datetime.now(UTC))


# Primary result codes (sqlite3.h) of a statement that failed because the database is out of reach for
# now (busy, locked, the disk full or failing), not because the statement or the schema is wrong.
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_IOERR, _SQLITE_FULL = 5, 6, 10, 13
_OUT_OF_REACH = {_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_IOERR, _SQLITE_FULL}


_NOT_UTF8 = "Could not decode to UTF-8"


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True


def _out_of_reach(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _OUT_OF_REACH


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back what is left: SQLite has already rolled the whole transaction back itself after some
    errors (SQLITE_FULL, SQLITE_IOERR), and a second ROLLBACK would hide the first error."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


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
