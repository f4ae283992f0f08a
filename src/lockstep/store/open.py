"""Opening a store from its URL: the one place that knows every adapter, so the port knows none."""

from __future__ import annotations

from .port import SchemaError, Store
from .sqlite.backup import BackupReport

__all__ = ["backup_store", "open_store", "upgrade_store"]


def open_store(
    url: str,
    *,
    busy_timeout_s: float = 30.0,
    synchronous: str = "FULL",
    check_schema: bool = True,
    refuse_damaged: bool = True,
) -> Store:
    """Open a store from a URL: `sqlite:///path.db`, `sqlite://:memory:` or `postgresql://...`.

    An empty database is set up on first use; one whose schema is behind is refused (see upgrade_store),
    and so is one whose tables (SQLite: also columns, indexes, triggers) are damaged, unless
    `refuse_damaged` is False (`lockstep verify`, which reports them through `check_files`)."""
    if url.startswith("sqlite:///") or url == "sqlite://:memory:":
        from .sqlite.adapter import SqliteStore  # noqa: PLC0415 - adapters load only when their URL is used

        return SqliteStore(
            url,
            busy_timeout_s=busy_timeout_s,
            synchronous=synchronous,
            check_schema=check_schema,
            refuse_damaged=refuse_damaged,
        )
    if url.startswith(("postgresql://", "postgres://")):
        from .postgres.adapter import PgStore  # noqa: PLC0415

        return PgStore(url, check_schema=check_schema, refuse_damaged=refuse_damaged)
    raise SchemaError(f"unsupported database URL {url!r}: use sqlite:///path/to/file.db or postgresql://...")


def upgrade_store(url: str) -> list[str]:
    """Apply pending migrations; returns the names applied (empty when already current)."""
    store = open_store(url, check_schema=False)
    try:
        return store.upgrade()
    finally:
        store.close()


def backup_store(url: str, dest: str) -> BackupReport:
    """An online, consistent copy of a SQLite database in the new file `dest` (sqlite/backup.py).
    PostgreSQL has its own tools for this (pg_basebackup and WAL archiving, or pg_dump)."""
    if url.startswith("sqlite:///"):
        from .sqlite.backup import backup_sqlite  # noqa: PLC0415

        return backup_sqlite(url[len("sqlite:///") :], dest)
    if url.startswith(("postgresql://", "postgres://")):
        raise SchemaError(
            "lockstep db backup copies SQLite files; back up PostgreSQL with pg_basebackup and WAL "
            "archiving (point-in-time recovery) or pg_dump: docs/operations.md, Database"
        )
    raise SchemaError(f"cannot back up {url!r}: give the sqlite:///path/to/file.db of a database file")
