"""TenantsTx in SQL: tenants, their settings and the token bucket that rate-limits their starts."""

from __future__ import annotations

import json

from ...core.canonical import canonical_json
from ...core.limits import Settings
from ..port import ConcurrencyError, TenantRow
from .base import SqlBase

__all__ = ["SqlTenantsTx"]


class SqlTenantsTx(SqlBase):
    def tenant(self, name: str) -> TenantRow | None:
        r = self._one("tenant_get", name=name)
        return TenantRow(r[0], json.loads(r[1]), r[2], r[3], r[4]) if r else None

    def tenants(self) -> list[TenantRow]:
        return [
            TenantRow(r[0], json.loads(r[1]), r[2], r[3], r[4])
            for r in self.c.execute(self.q["tenants_list"])
        ]

    def insert_tenant(self, name: str, settings: Settings, created_at: str) -> None:
        try:
            self.c.execute(
                self.q["tenant_insert"],
                {"name": name, "settings": canonical_json(settings), "created_at": created_at},
            )
        except self.integrity_error:
            raise ConcurrencyError(f"tenant {name} already exists") from None

    def update_tenant_settings(self, name: str, settings: Settings) -> None:
        self.c.execute(self.q["tenant_update_settings"], {"name": name, "settings": canonical_json(settings)})

    def update_tenant_bucket(self, name: str, tokens: float, at_ms: int) -> None:
        self.c.execute(self.q["tenant_update_bucket"], {"name": name, "tokens": tokens, "at_ms": at_ms})
