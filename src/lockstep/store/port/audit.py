"""The audit aggregate: the audit log's rows, the filter a reader asks with, and the reads of its hash
chains and their heads (core/auditchain.py) that a check walks (implemented by sqltx/audit.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypedDict

from ...core.auditchain import AuditHead, StoredAudit
from ...core.canonical import JSONObject

__all__ = ["AuditFilter", "AuditRow", "AuditTx"]


class AuditRow(TypedDict):
    id: int
    at: str
    tenant: str | None
    actor: str | None
    action: str
    target: str | None
    outcome: str
    detail: JSONObject  # what the caller recorded


@dataclass(frozen=True)
class AuditFilter:
    """What a reader of the audit log asks for; None means any. `action_prefix` matches every action
    that starts with it; `since` (inclusive) and `until` (exclusive) are timestamps as core.timeutil.iso
    writes them."""

    actor: str | None = None
    action: str | None = None
    action_prefix: str | None = None
    outcome: str | None = None
    since: str | None = None
    until: str | None = None


class AuditTx(Protocol):
    def audit(
        self,
        at: str,
        tenant: str | None,
        actor: str | None,
        action: str,
        target: str | None,
        outcome: str,
        detail: JSONObject,
    ) -> None: ...
    def audit_page(
        self, tenant: str | None, where: AuditFilter, before: int | None, limit: int
    ) -> list[StoredAudit]:
        """Up to `limit` rows of `tenant` (None: the rows without a tenant) matching `where`, newest
        first, with ids below `before` (None: from the newest)."""
        ...

    def audit_snapshot(self) -> None:
        """Make every later read of this (read) transaction see one snapshot; call it first."""
        ...

    def audit_heads(self) -> list[AuditHead]: ...
    def audit_head(self, chain: str) -> AuditHead | None: ...
    def audit_chains_with_rows(self) -> list[str]:
        """The chains that have rows (core.auditchain.chain_of of their tenants), whatever the heads say."""
        ...

    def audit_chain_rows(self, chain: str, after: int, limit: int) -> list[StoredAudit]:
        """Up to `limit` rows of `chain` with ids above `after`, in id order."""
        ...
