"""KeysTx in SQL: tenant data keys by version and run keys, both stored wrapped only (app/keys holds
the clear keys, in memory). A foreign key ties a run key to the tenant key version it is wrapped under,
so a version can be deleted only once no run key uses it."""

from __future__ import annotations

from collections.abc import Sequence
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
    """A run's key row is read once per transaction (a command opens and seals with it: one read, not
    three); this transaction's own changes to it replace the remembered row."""

    _run_keys: dict[str, RunKeyRow | None] | None = None

    def _remembered(self) -> dict[str, RunKeyRow | None]:
        if self._run_keys is None:
            self._run_keys = {}
        return self._run_keys

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
        self._run_keys = None
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

    def remember_run_keys(self, run_ids: Sequence[str]) -> None:
        """Read the key rows of several runs with one query (a batch then reads none in its middle,
        which would send its buffered writes early)."""
        seen = self._remembered()
        wanted = [r for r in run_ids if r not in seen]
        if not wanted:
            return
        rows = self.c.execute(self.q["run_keys_get_many"], {"run_ids": self.list_param(wanted)}).fetchall()
        found = {r[0]: _run_key(r) for r in rows}
        for run_id in wanted:
            seen[run_id] = found.get(run_id)

    def run_key(self, run_id: str) -> RunKeyRow | None:
        seen = self._remembered()
        if run_id not in seen:
            r = self._one("run_key_get", run_id=run_id)
            seen[run_id] = _run_key(r) if r else None
        return seen[run_id]

    def insert_run_key(self, run_id: str, tenant: str, key_version: int, wrapped: str) -> None:
        self._remembered().pop(run_id, None)
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
        self._remembered().pop(run_id, None)
        self.c.execute(self.q["run_key_forget"], {"run_id": run_id, "tenant": tenant, "at": at})

    def forget_tenant_run_keys(self, tenant: str, at: str) -> int:
        self._run_keys = None
        return int(self.c.execute(self.q["run_keys_forget_tenant"], {"tenant": tenant, "at": at}).rowcount)

    def delete_all_tenant_keys(self, tenant: str) -> int:
        self._run_keys = None
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
        self._remembered().pop(run_id, None)
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
