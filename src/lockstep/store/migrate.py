"""The engine's own schema migrations: numbered .sql files, checksummed, applied in one transaction."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

from .port import SchemaError

__all__ = [
    "Migration",
    "check_applied",
    "created_indexes",
    "created_tables",
    "created_triggers",
    "migrations",
]

_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")
# A table a migration creates by name (not a partition: retention drops those, and `%I` ones are dynamic).
_CREATE = re.compile(
    r"^\s*CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)(?![^;]*PARTITION\s+OF)",
    re.IGNORECASE | re.MULTILINE,
)

# Indexes and triggers a migration creates by name (no migration drops or renames one): the start-up
# check that none went missing, and that no append-only trigger was switched off.
_INDEX = re.compile(
    r"^\s*CREATE\s+(?:UNIQUE\s+)?INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.IGNORECASE | re.MULTILINE
)
_TRIGGER = re.compile(r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?TRIGGER\s+(\w+)", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def migrations(package: str) -> list[Migration]:
    """All migrations shipped in `package/migrations`, in version order."""
    out = []
    for entry in resources.files(package).joinpath("migrations").iterdir():
        m = _FILE.match(entry.name)
        if m:
            out.append(Migration(int(m.group(1)), m.group(2), entry.read_text()))
    out.sort(key=lambda m: m.version)
    return out


def check_applied(wanted: list[Migration], applied: dict[int, str], where: str) -> None:
    """Refuse a database whose migrations differ from this build's: changed, missing or newer ones."""
    for m in wanted:
        if m.version in applied and applied[m.version] != m.checksum:
            raise SchemaError(
                f"migration {m.version:04d}_{m.name} was changed after it was applied to {where}; "
                f"restore the original file"
            )
    missing = [m for m in wanted if m.version not in applied]
    if missing:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in missing)
        raise SchemaError(
            f"database {where} is at schema version {max(applied)} and lacks migration(s) {names}; "
            f"this lockstep needs {wanted[-1].version}: run `lockstep db upgrade` first"
        )
    if max(applied) > wanted[-1].version:
        raise SchemaError(
            f"database {where} has schema version {max(applied)}, newer than this lockstep "
            f"({wanted[-1].version}): upgrade lockstep"
        )


def created_tables(wanted: list[Migration]) -> list[str]:
    """The tables the migrations create by name: the start-up check that none of them went missing."""
    return sorted({name for m in wanted for name in _CREATE.findall(m.sql)})


def created_indexes(wanted: list[Migration]) -> list[str]:
    return sorted({name for m in wanted for name in _INDEX.findall(m.sql)})


def created_triggers(wanted: list[Migration]) -> list[str]:
    return sorted({name for m in wanted for name in _TRIGGER.findall(m.sql)})
