"""KeysTx in SQL: tenant data keys by version and run keys, both stored wrapped only (app/keys holds
the clear keys, in memory). A foreign key ties a run key to the tenant key version it is wrapped under,
so a version can be deleted only once no run key uses it."""

from __future__ import annotations

from typing import Any

from ..port import ConcurrencyError, RunKeyRow, TenantKeyRow
from .base import SqlBase

__all__ = ["SqlKeysTx"]


def _tenant_key(r: Any) -> TenantKeyRow:
    return TenantKeyRow(r[0], int(r[1]), r[2], r[3], r[4], r[5])


def _run_key(r: Any) -> RunKeyRow:
    version = int(r[2]) if r[2] is not None else None
    return RunKeyRow(r[0], r[1], version, r[3], r[4], _tenant_key(r[5:]) if r[5] is not None else None)


class SqlKeysTx(SqlBase):
    def tenant_keys(self, tenant: str) -> list[TenantKeyRow]:
        return [_tenant_key(r) for r in self.c.execute(self.q["tenant_keys_of"], {"tenant": tenant})]

    def insert_tenant_key(self, row: TenantKeyRow) -> bool:
        cur = self.c.execute(
            self.q["tenant_key_insert"],
            {
                "tenant": row.tenant,
                "version": row.version,
                "wrapped": row.wrapped,
                "provider": row.provider,
                "created_at": row.created_at,
            },
        )
        return bool(cur.rowcount == 1)

    def retire_tenant_keys(self, tenant: str, below: int, at: str) -> None:
        self.c.execute(self.q["tenant_keys_retire"], {"tenant": tenant, "below": below, "at": at})

    def delete_tenant_key(self, tenant: str, version: int) -> bool:
        # A run key wrapped under this version by a transaction still in flight makes the delete fail
        # its foreign key check: then the version simply stays until the next pass.
        try:
            with self.savepoint():
                cur = self.c.execute(
                    self.q["tenant_key_delete_unused"], {"tenant": tenant, "version": version}
                )
        except self.integrity_error:
            return False
        return bool(cur.rowcount == 1)

    def run_key(self, run_id: str) -> RunKeyRow | None:
        r = self._one("run_key_get", run_id=run_id)
        return _run_key(r) if r else None

    def insert_run_key(self, run_id: str, tenant: str, key_version: int, wrapped: str) -> None:
        try:
            self.c.execute(
                self.q["run_key_insert"],
                {"run_id": run_id, "tenant": tenant, "key_version": key_version, "wrapped": wrapped},
            )
        except self.integrity_error:
            # The run has a key already (another writer), or the version was deleted meanwhile (a
            # rotation finished): either way, a fresh attempt reads the current rows.
            raise ConcurrencyError(f"the key of run {run_id} changed meanwhile") from None

    def forget_run_key(self, run_id: str, tenant: str, at: str) -> None:
        self.c.execute(self.q["run_key_forget"], {"run_id": run_id, "tenant": tenant, "at": at})

    def forget_tenant_run_keys(self, tenant: str, at: str) -> int:
        return int(self.c.execute(self.q["run_keys_forget_tenant"], {"tenant": tenant, "at": at}).rowcount)

    def delete_all_tenant_keys(self, tenant: str) -> int:
        return int(self.c.execute(self.q["tenant_keys_delete_all"], {"tenant": tenant}).rowcount)

    def rotating_tenants(self) -> list[tuple[str, int]]:
        return [(r[0], int(r[1])) for r in self.c.execute(self.q["tenant_keys_rotating"], {}).fetchall()]

    def stale_run_keys(self, limit: int) -> list[RunKeyRow]:
        out: list[RunKeyRow] = []
        for tenant, newest in self.rotating_tenants():
            if len(out) >= limit:
                break
            params = {"tenant": tenant, "newest": newest, "limit": limit - len(out)}
            out += [_run_key(r) for r in self.c.execute(self.q["run_keys_stale"], params).fetchall()]
        return out

    def rewrap_run_key(self, run_id: str, old_version: int, new_version: int, wrapped: str) -> bool:
        cur = self.c.execute(
            self.q["run_key_rewrap"],
            {"run_id": run_id, "old_version": old_version, "new_version": new_version, "wrapped": wrapped},
        )
        return bool(cur.rowcount == 1)

    def run_key_counts(self, tenant: str) -> dict[int, int]:
        rows = self.c.execute(self.q["run_key_counts"], {"tenant": tenant}).fetchall()
        return {int(r[0]): int(r[1]) for r in rows if r[0] is not None}

    def forgotten_run_keys(self, tenant: str) -> int:
        return int(self._one("run_keys_forgotten_count", tenant=tenant)[0])
