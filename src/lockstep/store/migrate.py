"""The engine's own schema migrations: numbered .sql files, checksummed, applied in one transaction."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

__all__ = ["Migration", "migrations"]

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
