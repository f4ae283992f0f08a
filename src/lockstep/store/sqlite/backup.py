"""An online backup of a SQLite database: SQLite's backup API copies every page in one step under
a read transaction, so the copy is the database as of one committed moment while workers, schedulers
and servers go on writing (WAL lets writers continue beside the reader). The copy is checked with
`PRAGMA integrity_check` before it is reported done."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from ..port import SchemaError, StoreUnavailable

__all__ = ["BackupReport", "backup_sqlite"]


@dataclass(frozen=True)
class BackupReport:
    path: str
    pages: int
    bytes: int
    schema_version: int


def backup_sqlite(path: str, dest: str, busy_timeout_s: float = 30.0) -> BackupReport:
    """Copy the database at `path` to the new file `dest` (never over an existing file)."""
    target = Path(dest).expanduser()
    if target.exists():
        raise SchemaError(
            f"{target} exists: a backup is written to a new file only (remove it or pick another)"
        )
    if not target.parent.is_dir():
        raise SchemaError(f"cannot write {target}: directory {target.parent} does not exist")
    if not Path(path).is_file():
        raise StoreUnavailable(f"no SQLite database at {path}")
    partial = target.with_name(target.name + ".partial")
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=busy_timeout_s)) as src:
            known = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
            if src.execute(known).fetchone() is None:
                raise SchemaError(f"{path} is not a lockstep database (it has no schema_migrations table)")
            with closing(sqlite3.connect(partial)) as dst:
                src.backup(dst)  # every page in one step: one consistent snapshot
                check = dst.execute("PRAGMA integrity_check").fetchone()[0]
                if check != "ok":
                    raise StoreUnavailable(f"the copy failed its integrity check: {check}")
                pages = int(dst.execute("PRAGMA page_count").fetchone()[0])
                version = int(
                    dst.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]
                )
        partial.replace(target)  # the backup appears under its name only once it is whole
    except sqlite3.Error as exc:
        partial.unlink(missing_ok=True)
        raise StoreUnavailable(f"backup of {path} failed: {exc}") from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return BackupReport(str(target), pages, target.stat().st_size, version)
