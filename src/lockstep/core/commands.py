"""Commands: what the outside world asks of a run. decide() turns one into events or a refusal."""

from __future__ import annotations

from dataclasses import dataclass

from .canonical import JSONObject, JSONValue
from .definition import Definition

__all__ = [
    "CancelRun",
    "ChildEnded",
    "ClaimTask",
    "Command",
    "ConfirmRepair",
    "DeadLetter",
    "DecideApproval",
    "DeliverEvent",
    "EditInput",
    "ExpireLease",
    "FireTimer",
    "IssueApprovalLink",
    "IssueCallback",
    "MigrateRun",
    "PauseRun",
    "RejectRepair",
    "Rejected",
    "ReplaceApprover",
    "ReportFailure",
    "ReportSuccess",
    "ResolveStep",
    "ResumeRun",
    "RetryStep",
    "RevokeApprovalLink",
    "SkipStep",
    "StartRun",
]


class Rejected(Exception):
    """The command was refused; nothing is appended. `code` is stable, `reason` is for people."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass(frozen=True)
class StartRun:
    run_id: str
    tenant: str
    version: int
    input: JSONValue
    start_key: str | None = None
    actor: str | None = None
    # The tenant's limit on total run time, if any: a durable "deadline" timer ends the run when it fires.
    max_run_ms: int | None = None
    # The trace context the application layer chose (RunStarted.trace and trace_parent), if any.
    trace: str | None = None
    trace_parent: str | None = None
    # A child run's parent: {run_id, step, depth} (RunStarted.parent).
    parent: JSONValue = None


@dataclass(frozen=True)
class ChildEnded:
    """A child run ended (or could not be started): the outbox hands its end to the parent's `run` step."""

    child_run_id: str
    step: str
    status: str  # "completed" | "failed" | "cancelled"
    output: JSONValue = None
    error: JSONValue = None


@dataclass(frozen=True)
class DeliverEvent:
    """An external event for the `wait_event` step `step` (its wait generation `generation`): through
    POST /v1/events (via "api") or its signed callback (via "callback", naming the callback)."""

    step: str
    generation: int
    event_id: str
    name: str
    key: str
    payload: JSONValue
    via: str = "api"
    callback_id: str | None = None
    token_hash: str | None = None


@dataclass(frozen=True)
class IssueCallback:
    """Record a callback minted for a waiting `wait_event` step: only its token's sha256 (the token is
    drawn by the application layer, never by the core)."""

    step: str
    generation: int
    callback_id: str
    token_hash: str
    by: str


@dataclass(frozen=True)
class ClaimTask:
    task_id: str
    worker: str
    deadline: str  # the attempt must report by then (started + timeout)


@dataclass(frozen=True)
class ReportSuccess:
    task_id: str
    attempt: int
    fencing: int
    output: JSONValue


@dataclass(frozen=True)
class ReportFailure:
    task_id: str
    attempt: int
    fencing: int
    code: str
    message: str
    retryable: bool = True
    # True when the activity raised something other than ActivityError: for at_most_once steps that
    # means nobody can say whether the effect happened.
    unexpected: bool = False


@dataclass(frozen=True)
class ExpireLease:
    task_id: str
    attempt: int
    fencing: int
    reason: str


@dataclass(frozen=True)
class FireTimer:
    key: str
    generation: int


@dataclass(frozen=True)
class CancelRun:
    reason: str
    actor: str | None = None


@dataclass(frozen=True)
class DecideApproval:
    """An approver's decision. `roles`/`groups` are the approver's authorization read at submit time."""

    request_id: str
    approver: str
    decision: str  # "approve" | "reject"
    comment: str | None
    roles: tuple[str, ...]
    groups: tuple[str, ...]
    link_id: str | None = None
    values: JSONObject | None = None  # the approval form's values (core/form.py); None: none sent


@dataclass(frozen=True)
class IssueApprovalLink:
    request_id: str
    approver: str
    link_id: str
    expires_at: str
    roles: tuple[str, ...]
    groups: tuple[str, ...]
    by: str | None = None


@dataclass(frozen=True)
class DeadLetter:
    """Withdraw a queued task nobody takes (e.g. no worker serves its type) into the dead-letter state."""

    task_id: str
    reason: str


@dataclass(frozen=True)
class RetryStep:
    """Operator: run a step that waits for attention again, as a new attempt (same idempotency key
    unless `new_key`, which must be explicit)."""

    step: str
    reason: str
    actor: str | None = None
    new_key: bool = False


@dataclass(frozen=True)
class PauseRun:
    reason: str
    actor: str | None = None


@dataclass(frozen=True)
class ResumeRun:
    reason: str
    actor: str | None = None


@dataclass(frozen=True)
class SkipStep:
    """Operator: skip the current step; `output` stands in for its output. `roles` are the actor's roles
    (a step's skip_policy may name which roles may skip)."""

    step: str
    reason: str
    output: JSONValue = None
    actor: str | None = None
    roles: tuple[str, ...] = ()


@dataclass(frozen=True)
class EditInput:
    input: JSONValue
    reason: str
    actor: str | None = None


@dataclass(frozen=True)
class ResolveStep:
    """Operator: settle a step whose outcome was unknown, after checking the downstream system."""

    step: str
    outcome: str  # "succeeded" | "failed"
    reason: str
    output: JSONValue = None
    actor: str | None = None


@dataclass(frozen=True)
class MigrateRun:
    """Move the run to another version of its definition (`target`, already parsed), mapping step ids."""

    target: Definition
    target_version: int
    mapping: tuple[tuple[str, str], ...]
    reason: str
    actor: str | None = None
    # A migration that needs approval (core/migapproval.py): the granted request and its decisions.
    request_id: str | None = None
    decisions: tuple[JSONObject, ...] = ()


@dataclass(frozen=True)
class RevokeApprovalLink:
    request_id: str
    approver: str
    link_id: str
    reason: str
    actor: str | None = None


@dataclass(frozen=True)
class ReplaceApprover:
    """Operator: replace a named approver. `new_roles`/`new_groups` are the new approver's authorization
    read now: the core checks that they satisfy the request's policy."""

    request_id: str
    old: str
    new: str
    reason: str
    actor: str | None = None
    new_roles: tuple[str, ...] = ()
    new_groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConfirmRepair:
    """A second operator confirms a four-eyes proposal: its command runs now, on the state as it is.
    `roles` are the confirmer's roles; `target` is the parsed target version of a migrate proposal."""

    proposal_id: str
    reason: str
    actor: str | None = None
    roles: tuple[str, ...] = ()
    target: Definition | None = None


@dataclass(frozen=True)
class RejectRepair:
    """Any operator rejects a four-eyes proposal (a withdrawal when the proposer does it)."""

    proposal_id: str
    reason: str
    actor: str | None = None


Command = (
    StartRun
    | ClaimTask
    | ReportSuccess
    | ReportFailure
    | ExpireLease
    | FireTimer
    | CancelRun
    | DecideApproval
    | IssueApprovalLink
    | ReplaceApprover
    | RevokeApprovalLink
    | DeadLetter
    | RetryStep
    | PauseRun
    | ResumeRun
    | SkipStep
    | EditInput
    | ResolveStep
    | MigrateRun
    | ConfirmRepair
    | RejectRepair
    | ChildEnded
    | DeliverEvent
    | IssueCallback
)
