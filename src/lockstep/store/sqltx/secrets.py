"""SecretsTx in SQL: secret versions (sealed) and tenants' egress policies."""

from __future__ import annotations

from typing import Any

from ...core.canonical import compact_json, parse_json
from ..port import ConcurrencyError, EgressRow, SecretRow
from .base import SqlBase

__all__ = ["SqlSecretsTx"]


def _row(r: Any) -> SecretRow:
    return SecretRow(r[0], r[1], int(r[2]), r[3], r[4], r[5], r[6])


class SqlSecretsTx(SqlBase):
    def secret_versions(self, tenant: str, name: str) -> list[SecretRow]:
        rows = self.c.execute(self.q["secret_versions"], {"tenant": tenant, "name": name}).fetchall()
        return [_row(r) for r in rows]

    def secrets_of(self, tenant: str) -> list[SecretRow]:
        return [_row(r) for r in self.c.execute(self.q["secrets_of"], {"tenant": tenant}).fetchall()]

    def insert_secret(self, row: SecretRow) -> None:
        params = {
            "tenant": row.tenant,
            "name": row.name,
            "version": row.version,
            "key_id": row.key_id,
            "sealed": row.sealed,
            "created_at": row.created_at,
            "created_by": row.created_by,
        }
        try:
            self.c.execute(self.q["secret_insert"], params)
        except self.integrity_error:
            raise ConcurrencyError(f"secret {row.name} version {row.version} exists already") from None

    def delete_secret(self, tenant: str, name: str, version: int | None = None) -> int:
        if version is None:
            cur = self.c.execute(self.q["secret_delete_all"], {"tenant": tenant, "name": name})
        else:
            params = {"tenant": tenant, "name": name, "version": version}
            cur = self.c.execute(self.q["secret_delete_version"], params)
        return int(cur.rowcount)

    def egress_policy(self, tenant: str) -> EgressRow | None:
        r = self._one("egress_get", tenant=tenant)
        return EgressRow(r[0], parse_json(r[1]), r[2], r[3]) if r else None

    def set_egress_policy(self, row: EgressRow) -> None:
        params = {
            "tenant": row.tenant,
            "policy": compact_json(row.policy),
            "updated_at": row.updated_at,
            "updated_by": row.updated_by,
        }
        self.c.execute(self.q["egress_set"], params)
