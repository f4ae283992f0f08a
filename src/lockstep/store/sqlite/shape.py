"""The start-up check of a SQLite database's shape, and the full file check `lockstep verify` runs.

The migration record (schema_migrations) says which migrations were applied; it does not prove their
tables are still there. A table dropped or a column lost by hand (or a restore of a partial copy) would
otherwise surface later as "no such table" in the middle of a command. So every process compares, when
it opens the database, the tables, columns, indexes and triggers the shipped migrations create with what
the file holds: a few catalogue reads (milliseconds), against an in-memory database built from the same
migrations once per process. What the file holds beyond that (an operator's own index) is allowed.

Page-level corruption is a different, slow check (it reads every page): `PRAGMA integrity_check`, run
by `lockstep verify`, not at start-up."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from functools import cache

from ..migrate import migrations
from ..port import SchemaError

__all__ = ["check_shape", "integrity_problems", "shape_problems", "statements"]

Shape = dict[str, tuple[str, frozenset[str]]]  # name -> (type, columns; empty for indexes and triggers)


def statements(sql: str) -> list[str]:
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


def _shape(conn: sqlite3.Connection) -> Shape:
    out: Shape = {}
    rows = conn.execute(
        "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'index', 'trigger') "
        "AND name NOT LIKE 'sqlite_%'"
    ).fetchall()
    for kind, name in rows:
        cols: frozenset[str] = frozenset()
        if kind == "table":
            cols = frozenset(r[1] for r in conn.execute("SELECT * FROM pragma_table_info(?)", (name,)))
        out[name] = (kind, cols)
    return out


@cache
def _expected() -> Shape:
    with closing(sqlite3.connect(":memory:", isolation_level=None)) as conn:
        conn.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, "
            "name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        conn.execute("BEGIN")  # one transaction: the schema is parsed once, not after every statement
        for m in migrations("lockstep.store.sqlite"):
            for stmt in statements(m.sql):
                conn.execute(stmt)
        conn.execute("COMMIT")
        return _shape(conn)


def shape_problems(conn: sqlite3.Connection) -> list[str]:
    """The tables, columns, indexes and triggers of the recorded schema that the file lacks."""
    have = _shape(conn)
    problems = []
    for name, (kind, cols) in sorted(_expected().items()):
        if name not in have:
            problems.append(f"{kind} {name} is missing")
            continue
        lost = sorted(cols - have[name][1])
        if lost:
            problems.append(f"table {name} lacks column(s) {', '.join(lost)}")
    return problems


def check_shape(conn: sqlite3.Connection, where: str) -> None:
    """Refuse a database that lacks a table, column, index or trigger of its recorded schema."""
    problems = shape_problems(conn)
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise SchemaError(
            f"database {where} is damaged: {shown}. Its migration record says the schema is complete, "
            f"so something removed these; restore the database from a backup (`lockstep db backup` "
            f"copies) and run `lockstep verify`"
        )


def integrity_problems(conn: sqlite3.Connection) -> list[str]:
    """What `PRAGMA integrity_check` finds wrong in the file's pages and indexes; empty when sound."""
    try:
        rows = [str(r[0]) for r in conn.execute("PRAGMA integrity_check(20)")]
    except sqlite3.DatabaseError as exc:  # so damaged that the check itself cannot read it
        return [f"the file cannot be checked: {exc}"]
    return [] if rows == ["ok"] else rows
