"""The shapes of the JSON the core records in a run's state (core/state.py) and the views show as
recorded: `Recorded[X]` fields of the views (see base.py). Keys that only some records carry are
NotRequired; `extra` keys a later version of the core adds are allowed (and shown)."""

from __future__ import annotations

from typing import Literal, NotRequired

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict  # pydantic needs it (not typing's) on Python < 3.12

from .base import TenantJson

__all__ = [
    "ApprovalPolicy",
    "ApprovalRequest",
    "Attention",
    "CancelInfo",
    "Compensation",
    "Decision",
    "ErrorInfo",
    "FormField",
    "IssuedLink",
    "MigrateCommand",
    "Proposal",
    "ResolveCommand",
    "SkipCommand",
    "StepChange",
    "VersionRef",
]

# Records the core may extend: a key added later is allowed in the schema (and shown).
_OPEN = with_config(ConfigDict(extra="allow"))


@_OPEN
class VersionRef(TypedDict):
    """A migration's target version."""

    name: str
    digest: str
    version: NotRequired[int]


@_OPEN
class ErrorInfo(TypedDict):
    """Why a step or a run failed: the activity's error code and message, or the engine's."""

    code: str
    message: str
    step: NotRequired[str | None]
    attempt: NotRequired[int]


class CancelInfo(TypedDict):
    reason: str
    actor: str | None
    at: str


class Attention(TypedDict):
    """Why the run waits for an operator (dead_letter, outcome_unknown, compensation_failed, ...)."""

    step: str
    code: str
    reason: str
    since: str


@_OPEN
class Compensation(TypedDict):
    """The compensation of a completed step, once the run compensates."""

    status: str
    attempts: int
    error: ErrorInfo | None


class SkipCommand(TypedDict):
    step: str
    output: TenantJson
    roles: list[str]


class ResolveCommand(TypedDict):
    step: str
    outcome: Literal["succeeded", "failed"]
    output: TenantJson


class MigrateCommand(TypedDict):
    to_version: int
    target_digest: str
    mapping: list[list[str]]


class Proposal(TypedDict):
    """A four-eyes proposal: the first operator's command, waiting for a second operator."""

    proposal_id: str
    kind: Literal["skip", "resolve", "migrate"]
    command: SkipCommand | ResolveCommand | MigrateCommand
    reason: str
    actor: str | None
    at: str
    seq: int


@_OPEN
class Decision(TypedDict):
    """One approver's recorded decision."""

    approver: str
    decision: Literal["approve", "reject"]
    comment: str | None
    at: str
    roles: list[str]
    groups: list[str]
    link_id: str | None
    values: NotRequired[TenantJson]  # the form's values by field name (a request with a form only)


class FormField(TypedDict):
    """One field of an approval form, as compiled at publish (core/form.py)."""

    name: str
    type: Literal["string", "number", "integer", "boolean", "date"]
    label: NotRequired[str]
    description: NotRequired[str]
    required: NotRequired[bool]
    sensitive: NotRequired[bool]
    enum: NotRequired[list[str]]
    minLength: NotRequired[int]
    maxLength: NotRequired[int]
    minimum: NotRequired[float]
    maximum: NotRequired[float]


@_OPEN
class ApprovalPolicy(TypedDict):
    """Who may decide an approval request, and what happens on a rejection or a timeout."""

    users: list[str]
    groups: list[str]
    quorum: int
    reject_quorum: int
    timeout_ms: int
    on_timeout: str
    on_reject: str
    allow_initiator: bool
    form: NotRequired[list[FormField]]  # the fields approvers fill in (core/form.py)


class IssuedLink(TypedDict):
    approver: str
    link_id: str
    expires_at: str
    at: str


@_OPEN
class ApprovalRequest(TypedDict):
    """The pending approval request of a run waiting for people."""

    request_id: str
    step: str
    policy: ApprovalPolicy
    policy_digest: str
    details: str
    requested_at: str
    expires_at: str
    initiator: str | None
    decisions: list[Decision]
    links: list[IssuedLink]
    issued: NotRequired[dict[str, int]]
    replacements: NotRequired[int]


# The current step before and after a migration ("from" is a keyword: the functional form).
StepChange = TypedDict("StepChange", {"from": str | None, "to": str | None})
