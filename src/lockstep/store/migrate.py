"""The engine's own schema migrations: numbered .sql files, checksummed, applied in one transaction."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

from .port import SchemaError

__all__ = ["Migration", "check_applied", "migrations"]

_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")


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
