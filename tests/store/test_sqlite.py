"""SQLite-specific behaviour of the adapter: opening, durability settings, busy databases, odd files."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from lockstep.store import SchemaError, StoreUnavailable, open_store
from lockstep.store.sqlite import adapter

from .conftest import SqliteBackend


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return SqliteBackend().url(tmp_path)


def test_connections_use_wal_and_full_sync(sqlite_url):
    """Every connection runs in WAL mode with synchronous=FULL by default (acknowledged = durable)."""
    s = open_store(sqlite_url)
    try:
        with s.read() as tx:
            assert tx.c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert tx.c.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
            assert tx.c.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    finally:
        s.close()


def test_synchronous_setting_is_validated(sqlite_url):
    """An unknown synchronous level is refused before anything is opened."""
    with pytest.raises(SchemaError, match="synchronous"):
        open_store(sqlite_url, synchronous="OFF")


def test_unsupported_url_is_refused():
    """A URL no adapter understands is refused with the expected form in the message."""
    with pytest.raises(SchemaError, match=r"sqlite:///"):
        open_store("mysql://localhost/db")


def test_missing_directory_is_unavailable(tmp_path: Path):
    """A database path in a directory that does not exist is reported as unavailable, naming it."""
    with pytest.raises(StoreUnavailable, match="does not exist"):
        open_store(f"sqlite:///{tmp_path / 'nope' / 'x.db'}")


def test_a_file_that_is_not_a_database_is_unavailable(tmp_path: Path):
    """Opening a file that is not SQLite raises StoreUnavailable, not a raw sqlite3 error."""
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database, just some text " * 100)
    with pytest.raises(StoreUnavailable, match="cannot open"):
        open_store(f"sqlite:///{path}")


def test_write_on_a_locked_database_is_unavailable_after_the_busy_timeout(sqlite_url):
    """When another writer holds the lock past busy_timeout, write() raises StoreUnavailable."""
    s = open_store(sqlite_url, busy_timeout_s=0.05)
    blocker = sqlite3.connect(SqliteBackend.path(sqlite_url), isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailable, match="busy"), s.write():
            pass  # pragma: no cover - BEGIN IMMEDIATE fails first
        with s.read() as tx:  # readers are not blocked in WAL mode
            assert tx.run_ids(None) == []
        blocker.execute("ROLLBACK")
        with s.write() as tx:  # and the store is usable again once the lock is gone
            assert tx.run_ids(None) == []
    finally:
        blocker.close()
        s.close()


def test_each_thread_gets_its_own_connection_and_close_closes_all(sqlite_url):
    """Connections are per thread; close() closes every one of them."""
    s = open_store(sqlite_url)
    conns = []

    def use() -> None:
        with s.read() as tx:
            conns.append(tx.c)

    use()
    t = threading.Thread(target=use)
    t.start()
    t.join()
    assert conns[0] is not conns[1]
    s.close()
    for c in conns:
        with pytest.raises(sqlite3.ProgrammingError):
            c.execute("SELECT 1")


def test_refused_open_closes_its_connection(sqlite_url, monkeypatch):
    """When open_store refuses a database, the connection it opened to check the schema is closed."""
    open_store(sqlite_url).close()
    with sqlite3.connect(SqliteBackend.path(sqlite_url)) as raw:
        raw.execute("UPDATE schema_migrations SET checksum = 'changed'")
    raw.close()
    opened: list[sqlite3.Connection] = []
    real_connect = sqlite3.connect

    def tracking_connect(*args, **kwargs):
        conn = real_connect(*args, **kwargs)
        opened.append(conn)
        return conn

    monkeypatch.setattr(adapter.sqlite3, "connect", tracking_connect)
    with pytest.raises(SchemaError):
        open_store(sqlite_url)
    monkeypatch.undo()
    assert opened
    leaked = []
    for c in opened:
        try:
            c.execute("SELECT 1")
            leaked.append(c)
        except sqlite3.ProgrammingError:
            pass
    for c in leaked:
        c.close()
    assert leaked == []


def test_in_memory_store_is_one_database_across_threads():
    """A store opened on sqlite://:memory: shows the same (migrated) database to every thread."""
    s = open_store("sqlite://:memory:")
    errors: list[Exception] = []

    def use() -> None:
        try:
            with s.read() as tx:
                tx.run_ids(None)
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    try:
        t = threading.Thread(target=use)
        t.start()
        t.join()
    finally:
        s.close()
    assert errors == [], errors


def test_listen_stops_with_its_event_and_ensure_partitions_does_nothing(sqlite_url):
    """listen waits for wake-ups from other processes (store/sqlite/wake.py) until its stop is set, and
    calls back for none of its own; an in-memory database has no other process: it returns at once;
    SQLite has no partitions: ensure_partitions leaves the schema as it was."""
    s = open_store(sqlite_url)
    memory = open_store("sqlite://:memory:")
    try:
        woke: list[int] = []
        stop = threading.Event()
        stop.set()
        s.listen(["lockstep_tasks"], lambda: woke.append(1), stop)
        memory.listen(["lockstep_tasks"], lambda: woke.append(1), threading.Event())
        schema = "SELECT type, name, sql FROM sqlite_master ORDER BY name"
        with s.read() as tx:
            before = tx.c.execute(schema).fetchall()
        s.ensure_partitions()
        with s.read() as tx:
            assert tx.c.execute(schema).fetchall() == before
    finally:
        s.close()
        memory.close()
    assert woke == []
