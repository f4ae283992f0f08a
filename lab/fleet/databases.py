"""The fleet's databases: a SQLite file or a throwaway PostgreSQL database for a fleet, one raw SQL
statement on either (a driver's probe or fault), a test downstream's ledger, and whether any session holds
a write lock (the moment at which a process may be frozen)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import psycopg

from lockstep.testing.pgcluster import PgCluster

__all__ = ["SQLITE", "Ledger", "database", "postgres", "quiescent", "sql", "sqlite_path"]

SQLITE = "sqlite:///"


def sqlite_path(where: str | Path) -> Path:
    """The file of a SQLite database given as a `sqlite:///` URL or a plain path."""
    text = str(where)
    return Path(text[len(SQLITE) :] if text.startswith(SQLITE) else text)


def sql(where: str | Path, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """One statement (`?` placeholders; `%s` also works on PostgreSQL) on a PostgreSQL URL, a SQLite URL
    or a SQLite file, on a connection of its own, committed; the rows it produced (none for a statement
    without a result). A driver's probe or fault, never a way to repair state."""
    if str(where).startswith(("postgresql://", "postgres://")):
        with psycopg.connect(str(where), autocommit=True, connect_timeout=5) as pg:
            cur = pg.execute(statement.replace("?", "%s").encode(), params or None)
            return cur.fetchall() if cur.description else []
    with closing(sqlite3.connect(sqlite_path(where), timeout=30, isolation_level=None)) as conn:
        return conn.execute(statement, params).fetchall()


def database(backend: str, name: str, workdir: Path, pg: PgCluster | None) -> str:
    """A fresh database's URL: the SQLite file `name`.db in `workdir`, or the PostgreSQL database `name`
    on the cluster `pg`."""
    if backend == "sqlite":
        workdir.mkdir(parents=True, exist_ok=True)
        return f"{SQLITE}{workdir / f'{name}.db'}"
    if pg is None:
        raise ValueError("the postgresql backend needs a cluster")
    return pg.create_database(name)


@contextmanager
def postgres(wanted: bool = True) -> Iterator[PgCluster | None]:
    """A throwaway PostgreSQL server for the block (None when not `wanted`), destroyed afterwards. It has
    its own temporary directory: PgCluster hands it to the postgres OS user (ours may be 0700)."""
    cluster = PgCluster().init().start() if wanted else None
    try:
        yield cluster
    finally:
        if cluster is not None:
            cluster.destroy()


class Ledger:
    """What a test's downstream service recorded: a SQLite file (WAL) or a PostgreSQL database that the
    test's activities write and the driver reads while they run; each query opens its own connection,
    so the driver never holds a lock between two reads."""

    def __init__(self, where: str | Path, schema: str) -> None:
        self.where = str(where)
        self.pg = self.where.startswith("postgresql://")
        if self.pg:
            sql(self.where, schema)
        else:
            with closing(sqlite3.connect(self.where, isolation_level=None)) as conn:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript(schema)

    def rows(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return sql(self.where, statement, params)

    def value(self, statement: str, params: tuple[Any, ...] = ()) -> Any:
        return self.rows(statement, params)[0][0]


def quiescent(db_url: str) -> bool:
    """No session holds a write lock. SQLite: BEGIN IMMEDIATE succeeds. PostgreSQL: no other session of
    the database is running a statement or idle inside a transaction."""
    if db_url.startswith(SQLITE):
        # A short wait: a healthy writer's transaction lasts milliseconds; the stopped one's forever.
        with closing(sqlite3.connect(sqlite_path(db_url), timeout=0.05, isolation_level=None)) as c:
            try:
                c.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:
                return False
            c.execute("ROLLBACK")
            return True
    time.sleep(0.05)  # a statement the stopped process had sent finishes on the server
    with psycopg.connect(db_url, autocommit=True, connect_timeout=5) as pg:
        row = pg.execute(
            b"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            b" AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            b" AND state IN ('active', 'idle in transaction')"
        ).fetchone()
    return row is not None and row[0] == 0
