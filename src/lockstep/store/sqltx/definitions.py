"""DefinitionsTx in SQL: published workflow definitions, one row per (tenant, name, version)."""

from __future__ import annotations

import json
from typing import Any

from ...core.canonical import canonical_json
from ..port import ConcurrencyError, DefinitionRow, DefinitionVersionRow
from .base import SqlBase

__all__ = ["SqlDefinitionsTx"]


class SqlDefinitionsTx(SqlBase):
    def _def(self, name: str, row: Any) -> DefinitionRow | None:
        return DefinitionRow(name, row[0], row[1], json.loads(row[2])) if row else None

    def definition(self, tenant: str, name: str, version: int | None) -> DefinitionRow | None:
        if version is None:
            return self._def(name, self._one("definition_latest", tenant=tenant, name=name))
        return self._def(name, self._one("definition_by_version", tenant=tenant, name=name, version=version))

    def definition_by_digest(self, tenant: str, name: str, digest: str) -> DefinitionRow | None:
        return self._def(name, self._one("definition_by_digest", tenant=tenant, name=name, digest=digest))

    def insert_definition(self, tenant: str, row: DefinitionRow, created_at: str) -> None:
        try:
            self.c.execute(
                self.q["definition_insert"],
                {
                    "tenant": tenant,
                    "name": row.name,
                    "version": row.version,
                    "digest": row.digest,
                    "document": canonical_json(row.document),
                    "created_at": created_at,
                },
            )
        except self.integrity_error as exc:
            raise ConcurrencyError(str(exc)) from None

    def definitions(self, tenant: str) -> list[DefinitionVersionRow]:
        rows = self.c.execute(self.q["definitions_list"], {"tenant": tenant}).fetchall()
        return [{"name": r[0], "version": r[1], "digest": r[2], "created_at": r[3]} for r in rows]
