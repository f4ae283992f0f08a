"""The events of an approval step: the request with its policy, the links issued to approvers and revoked,
each decision, a replaced approver, and how the request settled (granted, rejected, timed out, cancelled)."""

from __future__ import annotations

from typing import ClassVar, TypeAlias

from msgspec import UNSET, UnsetType

from .record import Doc, Record

__all__ = [
    "ApprovalCancelled",
    "ApprovalDecisionRecorded",
    "ApprovalEvent",
    "ApprovalGranted",
    "ApprovalLinkIssued",
    "ApprovalLinkRevoked",
    "ApprovalRecord",
    "ApprovalRejected",
    "ApprovalRequested",
    "ApprovalTimedOut",
    "ApproverReplaced",
]


class ApprovalRecord(Record, frozen=True, kw_only=True):
    """The base of the records of an approval step; `ApprovalEvent` is their union."""


class ApprovalRequested(ApprovalRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ApprovalRequested"
    step: str
    request_id: str
    policy: Doc  # {users, groups, quorum, reject_quorum, allow_initiator, on_reject, on_timeout}
    policy_digest: str
    details: str
    expires_at: str
    initiator: str | None
    # Why nobody (or fewer than the quorum) could decide when the request was made: the tenant has no
    # such user, the group no member who may approve... Written only when there is something to say.
    warnings: list[str] | UnsetType = UNSET


class ApprovalLinkIssued(ApprovalRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ApprovalLinkIssued"
    step: str
    request_id: str
    approver: str
    link_id: str
    expires_at: str
    by: str | None


class ApprovalDecisionRecorded(ApprovalRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ApprovalDecisionRecorded"
    step: str
    request_id: str
    approver: str
    decision: str  # "approve" | "reject"
    comment: str | None
    roles: list[str]
    groups: list[str]
    link_id: str | None
    # The approver's form values (core/form.py), written only for a request with a form: every older
    # decision is stored, and hashed, exactly as before.
    values: Doc | UnsetType = UNSET


class ApprovalGranted(ApprovalRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ApprovalGranted"
    step: str
    request_id: str
    approvers: list[str]


class ApprovalRejected(ApprovalRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ApprovalRejected"
    step: str
    request_id: str
    by: list[str]
    reason: str


class ApprovalTimedOut(ApprovalRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ApprovalTimedOut"
    step: str
    request_id: str
    expires_at: str


class ApprovalCancelled(ApprovalRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ApprovalCancelled"
    step: str
    request_id: str
    reason: str


class ApproverReplaced(ApprovalRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ApproverReplaced"
    step: str
    request_id: str
    old: str
    new: str
    reason: str
    actor: str | None


class ApprovalLinkRevoked(ApprovalRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ApprovalLinkRevoked"
    step: str
    request_id: str
    approver: str
    link_id: str
    reason: str
    actor: str | None


ApprovalEvent: TypeAlias = (
    ApprovalRequested
    | ApprovalLinkIssued
    | ApprovalDecisionRecorded
    | ApprovalGranted
    | ApprovalRejected
    | ApprovalTimedOut
    | ApprovalCancelled
    | ApproverReplaced
    | ApprovalLinkRevoked
)
