"""The keys aggregate: tenant data keys (wrapped by the key provider) and run keys (wrapped by a tenant
key), implemented by sqltx/keys.py; the store never sees a clear key. Beside them `SealTx`, what sealing
and opening need of a transaction, and `Sealer`, the application layer's key ring that the store calls
to open a loaded run: kept here because a Sealer's methods take a SealTx, which is KeysTx + AuditTx."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .audit import AuditTx

__all__ = ["KeysTx", "RunKeyRow", "SealTx", "Sealer", "TenantKeyRow"]


@dataclass(frozen=True)
class TenantKeyRow:
    tenant: str
    version: int
    wrapped: str  # base64 of nonce || ciphertext+tag: the provider's wrapping of the tenant's data key
    provider: str  # which key provider (and key) wrapped it, e.g. local:<fingerprint>
    created_at: str
    retired_at: str | None  # set when a newer version exists: no new run keys are wrapped under it


@dataclass(frozen=True)
class RunKeyRow:
    """A run's data key, wrapped under its tenant's key `key_version`, with that tenant key row (a
    foreign key keeps it while this row uses it); or, once the run was forgotten, no key at all."""

    run_id: str
    tenant: str
    key_version: int | None
    wrapped: str | None
    forgotten_at: str | None
    tenant_key: TenantKeyRow | None


class KeysTx(Protocol):
    def tenant_keys(self, tenant: str) -> list[TenantKeyRow]:
        """Every stored version of a tenant's data key, oldest first."""
        ...

    def insert_tenant_key(self, row: TenantKeyRow) -> bool:
        """Add a version; False (nothing written) if that version exists already."""
        ...

    def retire_tenant_keys(self, tenant: str, below: int, at: str) -> None: ...
    def delete_tenant_key(self, tenant: str, version: int) -> bool:
        """Delete a retired version no run key is wrapped under any more; False if one still is."""
        ...

    def run_key(self, run_id: str) -> RunKeyRow | None:
        """The run's key row (read once per transaction)."""
        ...

    def remember_run_keys(self, run_ids: Sequence[str]) -> None:
        """Read several runs' key rows now, with one query, for the run_key calls that follow."""
        ...

    def insert_run_key(self, run_id: str, tenant: str, key_version: int, wrapped: str) -> None:
        """Store a run's key (ConcurrencyError if the run has one, or its tenant key version is gone)."""
        ...

    def forget_run_key(self, run_id: str, tenant: str, at: str) -> None:
        """Destroy a run's key, keeping a row that says it was forgotten (so none is made again)."""
        ...

    def forget_tenant_run_keys(self, tenant: str, at: str) -> int: ...
    def delete_all_tenant_keys(self, tenant: str) -> int:
        """Delete every version of a tenant's key (after forget_tenant_run_keys: none is in use)."""
        ...

    def rotating_tenants(self) -> list[tuple[str, int]]:
        """(tenant, newest version) of each tenant with more than one version of its key."""
        ...

    def stale_run_keys(self, limit: int) -> list[RunKeyRow]:
        """Run keys wrapped under a version older than their tenant's newest (locked, skipping rows
        another transaction holds, where the backend has row locks): what a re-wrap pass works on."""
        ...

    def rewrap_run_key(self, run_id: str, old_version: int, new_version: int, wrapped: str) -> bool: ...
    def run_key_counts(self, tenant: str) -> dict[int, int]:
        """How many run keys are wrapped under each version of the tenant's key."""
        ...

    def forgotten_run_keys(self, tenant: str) -> int: ...


class SealTx(KeysTx, AuditTx, Protocol):
    """Sealing and opening: the run keys, and the audit of a tenant key created on first use."""


class Sealer(Protocol):
    """Seals and opens a run's sensitive values (implemented by the application layer's key ring: the
    store holds only wrapped keys, and calls `open` to give a command the clear state and a worker its
    clear input)."""

    def seal(
        self, tx: SealTx, tenant: str, run_id: str, values: Sequence[tuple[str, Any]], *, new: bool = False
    ) -> list[dict[str, str]]:
        """One marker per (label, clear value), under the run's data key (created with the first; a
        `new` run, being created in this transaction, has none yet)."""
        ...

    def open(self, tx: SealTx, tenant: str, run_id: str, value: Any) -> Any:
        """`value` with every marker of the run replaced by its clear value."""
        ...
