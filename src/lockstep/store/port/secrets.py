"""The secrets aggregate: tenants' secrets by reference (each version sealed under a data key of the
secret's own, in `run_keys`) and their egress policies; implemented by sqltx/secrets.py. The store
never sees a clear secret: `sealed` is a marker (core/sealed.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ...core.canonical import JSONObject

__all__ = ["EgressRow", "SecretRow", "SecretsTx"]


@dataclass(frozen=True)
class SecretRow:
    tenant: str
    name: str
    version: int
    key_id: str  # the id of its data key in run_keys (secret:<tenant>/<name>/<nonce>)
    sealed: str  # the sealed value: a marker's JSON text
    created_at: str
    created_by: str | None


@dataclass(frozen=True)
class EgressRow:
    tenant: str
    policy: JSONObject
    updated_at: str
    updated_by: str | None


class SecretsTx(Protocol):
    def secret_versions(self, tenant: str, name: str) -> list[SecretRow]:
        """Every stored version of one secret, oldest first."""
        ...

    def secrets_of(self, tenant: str) -> list[SecretRow]:
        """Every version of every secret of the tenant, by name then version."""
        ...

    def insert_secret(self, row: SecretRow) -> None:
        """Add a version (ConcurrencyError if that version exists already)."""
        ...

    def delete_secret(self, tenant: str, name: str, version: int | None = None) -> int:
        """Delete one version, or every version (None); how many rows went."""
        ...

    def egress_policy(self, tenant: str) -> EgressRow | None: ...
    def set_egress_policy(self, row: EgressRow) -> None: ...
