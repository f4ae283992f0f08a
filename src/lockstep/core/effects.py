"""What a batch of events asks of the outside world: outbox rows written in the same transaction."""

from __future__ import annotations

from dataclasses import dataclass

from .canonical import JSONValue
from .events import (
    ActivityCancelled,
    ActivityDeadLettered,
    ActivityFailed,
    ActivityScheduled,
    ActivityStarted,
    ActivitySucceeded,
    ActivityTimedOut,
    ApprovalCancelled,
    ApprovalDecisionRecorded,
    ApprovalGranted,
    ApprovalLinkRevoked,
    ApprovalRejected,
    ApprovalRequested,
    ApprovalTimedOut,
    ApproverReplaced,
    CallbackIssued,
    ChildRunCancelRequested,
    ChildRunRequested,
    CompensationScheduled,
    Event,
    EventReceived,
    EventWaitCancelled,
    EventWaitStarted,
    EventWaitTimedOut,
    NeedsAttention,
    RunCancelled,
    RunCompleted,
    RunFailed,
    TimerCancelled,
    TimerFired,
    TimerScheduled,
)

__all__ = [
    "WEBHOOK_EVENTS",
    "CancelChild",
    "CloseApprovalRequest",
    "CloseEventWait",
    "CloseTask",
    "CloseTimer",
    "CreateTask",
    "CreateTimer",
    "DeadLetterTask",
    "Effect",
    "EmitWebhook",
    "EndChild",
    "LeaseTask",
    "NotifyApprovers",
    "OpenApprovalRequest",
    "OpenEventWait",
    "RecordApprovalDecision",
    "RevokeLinks",
    "StartChild",
    "StoreCallback",
    "UpdateApprovers",
    "effects_of",
]


@dataclass(frozen=True)
class CreateTask:
    task_id: str
    step: str
    attempt: int
    kind: str
    activity: str
    queue: str | None
    input: JSONValue
    idempotency_key: str
    timeout_ms: int
    delivery: str
    priority: int = 0


@dataclass(frozen=True)
class LeaseTask:
    task_id: str
    fencing: int
    worker: str
    deadline: str


@dataclass(frozen=True)
class CloseTask:
    task_id: str
    status: str  # "done" | "cancelled"


@dataclass(frozen=True)
class DeadLetterTask:
    task_id: str
    reason: str


@dataclass(frozen=True)
class CreateTimer:
    key: str
    generation: int
    fire_at: str


@dataclass(frozen=True)
class CloseTimer:
    key: str
    generation: int
    status: str  # "fired" | "cancelled"


@dataclass(frozen=True)
class OpenApprovalRequest:
    request_id: str
    step: str
    users: tuple[str, ...]
    groups: tuple[str, ...]
    initiator: str | None
    allow_initiator: bool
    expires_at: str


@dataclass(frozen=True)
class UpdateApprovers:
    request_id: str
    old: str
    new: str


@dataclass(frozen=True)
class RecordApprovalDecision:
    request_id: str
    approver: str
    decision: str
    link_id: str | None
    at: str


@dataclass(frozen=True)
class CloseApprovalRequest:
    """Settle the request and revoke its pending links."""

    request_id: str
    status: str


@dataclass(frozen=True)
class RevokeLinks:
    request_id: str
    approver: str | None  # None: every pending link of the request
    link_id: str | None = None


@dataclass(frozen=True)
class NotifyApprovers:
    """Outbox row: a notifier mints a link per approver at delivery (the raw token is never stored)."""

    request_id: str
    approver: str | None  # None: every eligible approver


@dataclass(frozen=True)
class StartChild:
    """Outbox row: a child run to start, in a transaction of its own (the scheduler's children pass)."""

    child_run_id: str
    step: str
    definition: str
    version: int | None
    input: JSONValue
    start_key: str
    depth: int


@dataclass(frozen=True)
class CancelChild:
    """The parent asks for its child's cancellation (the children pass sends it, then waits for its end)."""

    child_run_id: str
    reason: str


@dataclass(frozen=True)
class EndChild:
    """A child run ended: its row takes the end, for the children pass to report to the parent."""

    status: str
    output: JSONValue
    error: JSONValue


@dataclass(frozen=True)
class OpenEventWait:
    """The waits index gets the run's wait (tenant, name, key -> run, step, generation): deliveries
    find the runs waiting for an event by it."""

    step: str
    name: str
    key: str
    generation: int
    expires_at: str


@dataclass(frozen=True)
class CloseEventWait:
    """The wait ended (received, timed out, cancelled): its index row goes, its callbacks close."""

    step: str
    generation: int | None  # None: the step's wait, whichever (the index holds one per run and step)
    outcome: str  # "received" | "timed_out" | "cancelled"


@dataclass(frozen=True)
class StoreCallback:
    """A callback minted for a wait: its token's hash, bound to the run, step and generation (the
    callback minted before it for the same wait is replaced)."""

    callback_id: str
    step: str
    generation: int
    token_hash: str
    expires_at: str


@dataclass(frozen=True)
class EmitWebhook:
    """Outbox row: a run event tenants may subscribe to (docs/webhooks.md), one delivery per matching
    subscription, written in the same transaction. `data` holds ids, names and codes only, never the
    run's values (a receiver reads those over the API, with its own key)."""

    event: str  # one of WEBHOOK_EVENTS
    seq: int
    at: str
    data: JSONValue


# The run events a subscription may name, and the event records they stand for.
WEBHOOK_EVENTS = ("run.completed", "run.failed", "run.cancelled", "run.needs_attention", "approval.requested")

Effect = (
    CreateTask
    | LeaseTask
    | CloseTask
    | DeadLetterTask
    | CreateTimer
    | CloseTimer
    | OpenApprovalRequest
    | UpdateApprovers
    | RecordApprovalDecision
    | CloseApprovalRequest
    | RevokeLinks
    | NotifyApprovers
    | StartChild
    | CancelChild
    | EndChild
    | OpenEventWait
    | CloseEventWait
    | StoreCallback
    | EmitWebhook
)
CLOSING: dict[type[ApprovalGranted | ApprovalRejected | ApprovalTimedOut | ApprovalCancelled], str] = {
    ApprovalGranted: "approved",
    ApprovalRejected: "rejected",
    ApprovalTimedOut: "timed_out",
    ApprovalCancelled: "cancelled",
}


def _task(d: ActivityScheduled | CompensationScheduled, kind: str, priority: int) -> CreateTask:
    return CreateTask(
        d.task_id,
        d.step,
        d.attempt,
        kind,
        d.activity,
        d.queue,
        d.input,
        d.idempotency_key,
        d.timeout_ms,
        d.delivery,
        priority,
    )


def effects_of(events: list[Event], child: bool = False) -> list[Effect]:
    """`child`: the events are a child run's (RunState.parent): its end is handed to its parent."""
    out: list[Effect] = []
    for e in events:
        match d := e.data:
            case ActivityScheduled():
                priority = d.priority if isinstance(d.priority, int) else 0  # unset in older histories
                out.append(_task(d, "action", priority))
            case CompensationScheduled():
                out.append(_task(d, "compensation", 0))
            case ActivityStarted():
                out.append(LeaseTask(d.task_id, d.fencing, d.worker, d.deadline))
            case ActivitySucceeded() | ActivityFailed() | ActivityTimedOut():
                out.append(CloseTask(d.task_id, "done"))
            case ActivityDeadLettered():
                out.append(DeadLetterTask(d.task_id, d.reason))
            case ActivityCancelled():
                out.append(CloseTask(d.task_id, "cancelled"))
            case TimerScheduled():
                out.append(CreateTimer(d.key, d.generation, d.fire_at))
            case TimerFired():
                out.append(CloseTimer(d.key, d.generation, "fired"))
            case TimerCancelled():
                out.append(CloseTimer(d.key, d.generation, "cancelled"))
            case ApprovalRequested():
                p = d.policy
                out.append(
                    OpenApprovalRequest(
                        d.request_id,
                        d.step,
                        tuple(p["users"]),
                        tuple(p["groups"]),
                        d.initiator,
                        bool(p["allow_initiator"]),
                        d.expires_at,
                    )
                )
                out.append(NotifyApprovers(d.request_id, None))
            case ApproverReplaced():
                out.append(UpdateApprovers(d.request_id, d.old, d.new))
                out.append(RevokeLinks(d.request_id, d.old))
                out.append(NotifyApprovers(d.request_id, d.new))
            case ApprovalDecisionRecorded():
                out.append(RecordApprovalDecision(d.request_id, d.approver, d.decision, d.link_id, e.at))
            case ApprovalLinkRevoked():
                out.append(RevokeLinks(d.request_id, d.approver, d.link_id))
            case ApprovalGranted() | ApprovalRejected() | ApprovalTimedOut() | ApprovalCancelled():
                out.append(CloseApprovalRequest(d.request_id, CLOSING[type(d)]))
            case ChildRunRequested():
                out.append(
                    StartChild(d.child_run_id, d.step, d.definition, d.version, d.input, d.start_key, d.depth)
                )
            case ChildRunCancelRequested():
                out.append(CancelChild(d.child_run_id, d.reason))
            case RunCompleted() if child:
                out.append(EndChild("completed", d.output, None))
            case RunFailed() if child:
                out.append(EndChild("failed", None, d.error))
            case RunCancelled() if child:
                out.append(EndChild("cancelled", None, {"code": "Cancelled", "message": d.reason}))
            case EventWaitStarted():
                out.append(OpenEventWait(d.step, d.name, d.key, d.generation, d.expires_at))
            case CallbackIssued():
                out.append(StoreCallback(d.callback_id, d.step, d.generation, d.token_hash, d.expires_at))
            case EventReceived():
                out.append(CloseEventWait(d.step, d.generation, "received"))
            case EventWaitTimedOut():
                out.append(CloseEventWait(d.step, None, "timed_out"))
            case EventWaitCancelled():
                out.append(CloseEventWait(d.step, None, "cancelled"))
            case _:
                pass  # the other events ask nothing of the outside world
        hook = _webhook(e)
        if hook is not None:
            out.append(hook)
    return out


def _webhook(e: Event) -> EmitWebhook | None:
    match d := e.data:
        case RunCompleted():
            return EmitWebhook("run.completed", e.seq, e.at, {"status": "completed"})
        case RunFailed():
            code = d.error.get("code") if isinstance(d.error, dict) else None
            return EmitWebhook("run.failed", e.seq, e.at, {"status": "failed", "error_code": code})
        case RunCancelled():
            return EmitWebhook("run.cancelled", e.seq, e.at, {"status": "cancelled"})
        case NeedsAttention():
            data = {"status": "needs_attention", "step": d.step, "code": d.code}
            return EmitWebhook("run.needs_attention", e.seq, e.at, data)
        case ApprovalRequested():
            data = {"step": d.step, "request_id": d.request_id, "expires_at": d.expires_at}
            return EmitWebhook("approval.requested", e.seq, e.at, data)
        case _:
            return None
