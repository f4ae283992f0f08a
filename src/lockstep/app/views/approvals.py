"""The views of human approval: a minted link, the links of a request, a decision's answer, an inbox
item, reassignment and revocation, and what the approval page shows."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Marker, Recorded, TenantJson, View
from .migrations import MigrationSummary
from .recorded import ApprovalRequest, Decision, FormField
from .runs import DefinitionRef, RunStatus, RunView

__all__ = [
    "ApprovalOutcomes",
    "ApprovalPage",
    "DecisionResult",
    "InboxItem",
    "LinkRef",
    "LinkView",
    "MintedLink",
    "Reassigned",
    "RevokedLink",
]


class MintedLink(View):
    """A fresh single-use approval link; the token is shown this once and only its hash is stored."""

    url: str
    token: str
    link_id: str
    expires_at: str
    approver: str
    request_id: str


class LinkView(View):
    """An approval link as stored (never its token)."""

    link_id: str
    tenant: str
    run_id: str
    step: str
    request_id: str
    approver: str
    status: Literal["pending", "used", "revoked"]
    expires_at: int = Field(description="milliseconds since the epoch")
    created_at: str
    used_at: str | None
    decision: str | None


class RevokedLink(View):
    link_id: str
    status: Literal["revoked"]


class DecisionResult(View):
    """A recorded decision: the request's state after it and the run's status."""

    request_id: str
    run_id: str
    step: str
    link_id: str | None = Field(description="the link decided with; null for a decision from the inbox")
    decision: Literal["approve", "reject"]
    request_status: str | None = Field(
        description="pending while the request waits for more decisions, else its outcome (approved, "
        "rejected, ...)"
    )
    decisions: list[Recorded[Decision]]
    run_status: RunStatus


class Reassigned(View):
    run_id: str
    step: str
    request_id: str
    old: str
    new: str


class InboxItem(View):
    """A pending request the caller may decide and has not decided yet."""

    request_id: str
    run_id: str
    step: str
    definition: DefinitionRef
    details: TenantJson | Marker = Field(
        description="what the approver is asked, as the definition renders it"
    )
    quorum: int
    decisions: list[Recorded[Decision]]
    requested_at: str
    expires_at: str
    form: list[FormField] | None = Field(
        default=None, description="the fields to send as `values` when deciding (null: no form)"
    )
    kind: Literal["approval", "migration"] = Field(
        default="approval",
        description="approval: an approval step's request; migration: a migration that needs approval "
        "(`migration` says what it is; `run_id` is its first run, `step` is empty)",
    )
    migration: MigrationSummary | None = Field(default=None, description="a migration request only")


class LinkRef(View):
    """Which request and approver an approval page is for."""

    request_id: str
    step: str
    approver: str
    run_id: str


class ApprovalOutcomes(View):
    """What a decision leads to, in words (core/outcomes.py), from the definition and the run's state."""

    approve: str
    reject: str
    timeout: str


class ApprovalPage(View):
    """What the approval page shows (UI only): the link or inbox entry, the run (its input redacted), the
    pending request, and what approving, rejecting or letting it expire leads to."""

    link: LinkRef
    run: RunView
    approval: Recorded[ApprovalRequest | Marker | None] = Field(
        description="null when the request is no longer pending"
    )
    outcomes: ApprovalOutcomes | None = Field(default=None, description="null when not pending")
