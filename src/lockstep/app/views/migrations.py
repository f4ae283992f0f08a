"""The views of migrations that need approval: a migration request (its runs, versions, reason, policy,
decisions and, once applied, each run's outcome) and the summary an inbox item carries."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import View

__all__ = [
    "MigrationApprovers",
    "MigrationDecision",
    "MigrationRequestView",
    "MigrationRunOutcome",
    "MigrationSummary",
]

MigrationStatus = Literal["pending", "approved", "applied", "rejected", "expired"]


class MigrationApprovers(View):
    """Who may decide a migration request (the policy it records, from definition version `version`)."""

    users: list[str]
    groups: list[str]
    quorum: int
    reject_quorum: int
    version: int = Field(description="the definition version whose `migration: requires_approval` it is")


class MigrationDecision(View):
    approver: str
    decision: Literal["approve", "reject"]
    comment: str | None
    at: str
    roles: list[str]
    groups: list[str]


class MigrationRunOutcome(View):
    run_id: str
    outcome: Literal["migrated", "skipped", "rejected", "expired"] | None = Field(
        description="null while the request may still migrate the run"
    )
    detail: str | None = Field(description="why a run was skipped (it finished or moved meanwhile)")


class MigrationRequestView(View):
    """A migration that waits for (or got) its approvers' decision."""

    request_id: str
    status: MigrationStatus
    definition: str
    from_version: int
    to_version: int
    mapping: dict[str, str]
    reason: str
    requested_by: str = Field(description="the operator who asked; they may never decide on it")
    bulk: bool
    approvers: MigrationApprovers
    created_at: str
    expires_at: str
    decided_at: str | None
    applied_at: str | None
    decisions: list[MigrationDecision]
    runs: list[MigrationRunOutcome]


class MigrationSummary(View):
    """What an inbox item of kind `migration` asks: which runs move from which version to which, and why."""

    request_id: str
    runs: list[str]
    definition: str
    from_version: int
    to_version: int
    mapping: dict[str, str]
    reason: str
    requested_by: str
    bulk: bool
