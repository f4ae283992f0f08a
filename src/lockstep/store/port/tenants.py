"""The tenants aggregate: tenants, their settings and rate buckets (implemented by sqltx/tenants.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ...core.limits import Settings

__all__ = ["TenantRow", "TenantsTx"]


@dataclass(frozen=True)
class TenantRow:
    name: str
    settings: Settings
    bucket_tokens: float | None
    bucket_at_ms: int | None
    created_at: str


class TenantsTx(Protocol):
    def tenant(self, name: str) -> TenantRow | None: ...
    def tenants(self) -> list[TenantRow]: ...
    def insert_tenant(self, name: str, settings: Settings, created_at: str) -> None: ...
    def update_tenant_settings(self, name: str, settings: Settings) -> None: ...
    def update_tenant_bucket(self, name: str, tokens: float, at_ms: int) -> None: ...
