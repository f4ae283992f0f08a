"""The views of the audit log: a row (AuditEntry), a page of rows with the cursor of the next one, and the
verification of the chains (what `lockstep verify` and `lockstep audit --verify` print)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ...core.auditchain import StoredAudit
from ...core.canonical import canonical_json
from .base import View

__all__ = ["AuditChainCheck", "AuditEntry", "AuditPage", "AuditProblem", "AuditValue", "AuditVerifyResult"]

Scalar = str | int | float | bool | None
# A detail's value: a scalar or a list of scalars (app/audit.py keeps details flat; anything else that is
# found stored is shown as its JSON text).
AuditValue = Scalar | list[Scalar]


def _flat(value: Any) -> AuditValue:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list) and all(v is None or isinstance(v, str | int | float | bool) for v in value):
        return list(value)
    return canonical_json(value)


class AuditEntry(View):
    """One row of the audit log, with its place in its tenant's hash chain."""

    id: int = Field(description="the row's id: rows are numbered in the order they were written")
    at: str = Field(description="when, as the server's clock said (UTC, RFC 3339)")
    tenant: str | None = Field(description="the tenant; null for rows naming no existing tenant")
    actor: str | None = Field(description="who: the user, or null when nobody was identified")
    action: str = Field(description="what was attempted (docs/security.md lists the action names)")
    target: str | None = Field(description="what it was done to (a run id, a link id, a route), if any")
    outcome: str = Field(description="ok, refused, throttled or failed")
    detail: dict[str, AuditValue] = Field(
        description="what else the action records (never a secret: no password, token or API key)"
    )
    seq: int | None = Field(description="the row's place in its chain (1, 2, ...)")
    prev_hash: str | None = Field(description="the hash of the chain's previous row (64 zeros for the first)")
    hash: str | None = Field(description="sha256 over prev_hash and the canonical JSON of this row")

    @classmethod
    def of(cls, row: StoredAudit) -> AuditEntry:
        return cls(
            id=row.id,
            at=row.at,
            tenant=row.tenant,
            actor=row.actor,
            action=row.action,
            target=row.target,
            outcome=row.outcome,
            detail={str(k): _flat(v) for k, v in row.detail.items()},
            seq=row.seq,
            prev_hash=row.prev_hash,
            hash=row.hash,
        )


class AuditPage(View):
    """A page of audit rows, newest first; `next` continues after the last one (null: no more)."""

    items: list[AuditEntry]
    next: str | None = Field(description="pass as `cursor` for the next, older page; null at the end")


class AuditProblem(View):
    id: int | None = Field(description="the audit row concerned (null: the chain as a whole)")
    problem: str


class AuditChainCheck(View):
    """One tenant's chain checked: every row's hash and link, and its end against the chain's head."""

    tenant: str | None = Field(description="the chain's tenant; null for the rows without a tenant")
    rows: int
    head: str | None = Field(description="the hash of the chain's last row: keep it to notice a rewrite")
    ok: bool
    problems: list[AuditProblem]


class AuditVerifyResult(View):
    rows: int = Field(description="audit rows checked, over all chains")
    ok: bool
    chains: list[AuditChainCheck]
