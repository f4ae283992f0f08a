"""evolve(state, event) -> state, and fold(events): one small function per kind of event.

evolve never consults the definition: every event carries what it means, so a history replays alone.
`_apply` matches the event's record against every kind (mypy checks that none is missing: assert_never);
the most frequent kinds come first, as the match tries them in order.
"""

from __future__ import annotations

import copy
from typing import Any, TypeVar, assert_never

from .events import (
    KEEPS_PROPOSAL,
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
    ApprovalLinkIssued,
    ApprovalLinkRevoked,
    ApprovalRejected,
    ApprovalRequested,
    ApprovalTimedOut,
    ApproverReplaced,
    CancelRequested,
    ChoiceEvaluated,
    CompensationScheduled,
    CompensationStarted,
    Event,
    EventData,
    InputEdited,
    NeedsAttention,
    RepairConfirmed,
    RepairProposed,
    RepairRejected,
    ResultIgnored,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunPaused,
    RunResumed,
    RunStarted,
    StepFailed,
    StepResolved,
    StepRetried,
    StepSkipped,
    TimerCancelled,
    TimerFired,
    TimerScheduled,
    TransitionDeferred,
    WorkflowMigrated,
)
from .state import TERMINAL, Attempt, RunState, StepState, Timer

__all__ = ["evolve", "fold"]

D = TypeVar("D")


def evolve(state: RunState | None, event: Event) -> RunState:
    """Apply one event. RunStarted creates the state; every event advances seq by exactly one."""
    d = event.data
    if isinstance(d, RunStarted):
        if state is not None:
            raise ValueError("RunStarted on a run that already exists")
        return _started(d, event)
    if state is None:
        raise ValueError(f"{event.type} before RunStarted")
    if event.seq != state.seq + 1:
        raise ValueError(f"event seq {event.seq} does not follow {state.seq}")
    s = _apply(state, d, event)
    if s.proposal is not None and d.type not in KEEPS_PROPOSAL:
        s = replace(s, proposal=None)  # the run moved on: the proposal was made for a state that is gone
    s = replace(s, seq=event.seq, updated_at=event.at)
    return replace(s, status=_derive_status(s))


def fold(events: list[Event]) -> RunState | None:
    state: RunState | None = None
    for e in events:
        state = evolve(state, e)
    return state


def _apply(s: RunState, d: EventData, e: Event) -> RunState:
    match d:
        case ActivityScheduled():
            return _scheduled(s, d, e)
        case ActivityStarted():
            return _leased(s, d, e)
        case ActivitySucceeded():
            return _succeeded(s, d, e)
        case ActivityFailed() | ActivityTimedOut():
            return _attempt_failed(s, d, e)
        case TimerScheduled():
            return _timer_set(s, d, e)
        case TimerFired() | TimerCancelled():
            return _timer_gone(s, d, e)
        case ChoiceEvaluated():
            return _chosen(s, d, e)
        case RunCompleted():
            return replace(
                s, status="completed", output=d.output, current_step=None, finished_at=e.at, timers={}
            )
        case ResultIgnored():
            return _ignored(s, d)
        case CompensationScheduled():
            return _compensation_scheduled(s, d, e)
        case CompensationStarted():
            return replace(
                s,
                compensating=tuple(d.steps),
                compensation_cause=d.cause,
                attention=None,
                error=d.error or s.error,
            )
        case StepFailed():
            return _step_failed(s, d, e)
        case RunFailed():
            return replace(
                s,
                status="failed",
                error=d.error,
                current_step=None,
                finished_at=e.at,
                compensating=None,
                timers={},
            )
        case RunCancelled():
            return replace(
                s, status="cancelled", current_step=None, finished_at=e.at, compensating=None, timers={}
            )
        case ActivityCancelled():
            return _withdrawn(s, d, e)
        case NeedsAttention():
            return replace(s, attention={"step": d.step, "code": d.code, "reason": d.reason, "since": e.at})
        case CancelRequested():
            # Cancelling a paused run resumes it for the cancellation (compensations must be able to run).
            return replace(
                s, cancel={"reason": d.reason, "actor": d.actor, "at": e.at}, attention=None, paused=None
            )
        case ApprovalRequested():
            return _approval_requested(s, d, e)
        case ApprovalLinkIssued():
            return _link_issued(s, d, e)
        case ApprovalLinkRevoked():
            return _link_revoked(s, d, e)
        case ApprovalDecisionRecorded():
            return _decision(s, d, e)
        case ApproverReplaced():
            return _approver_replaced(s, d, e)
        case ApprovalGranted() | ApprovalRejected() | ApprovalTimedOut() | ApprovalCancelled():
            return _approval_settled(s, d, e)
        case ActivityDeadLettered():
            return replace(s, active=None, steps=_step(s, d.step, status="dead_letter", finished_at=e.at))
        case StepRetried():
            return replace(s, attention=None, paused=_superseded(s))
        case RunPaused():
            return replace(s, paused={"reason": d.reason, "actor": d.actor, "at": e.at, "deferred": []})
        case TransitionDeferred():
            return _deferred(s, d, e)
        case RunResumed():
            return replace(s, paused=None)
        case StepSkipped():
            return _skipped(s, d, e)
        case InputEdited():
            return replace(s, input=d.new)
        case StepResolved():
            return _resolved(s, d, e)
        case WorkflowMigrated():
            return _migrated(s, d)
        case RepairProposed():
            return _proposed(s, d, e)
        case RepairConfirmed() | RepairRejected():
            return replace(s, proposal=None)
        case RunStarted():
            raise ValueError("RunStarted on a run that already exists")
        case _:
            assert_never(d)


# --- the run and its steps ---------------------------------------------------------------------------


def _started(d: RunStarted, e: Event) -> RunState:
    return RunState(
        run_id=d.run_id,
        tenant=d.tenant,
        definition=d.definition,
        status="running",
        seq=e.seq,
        input=d.input,
        started_at=e.at,
        updated_at=e.at,
        start_key=d.start_key,
        actor=d.actor,
        steps={sid: StepState() for sid in d.steps},
    )


def _chosen(s: RunState, d: ChoiceEvaluated, e: Event) -> RunState:
    return replace(
        s,
        current_step=d.step,
        steps=_step(
            s,
            d.step,
            status="succeeded",
            output={"next": d.next},
            attempts=1,
            started_at=e.at,
            finished_at=e.at,
        ),
    )


def _step_failed(s: RunState, d: StepFailed, e: Event) -> RunState:
    before = s.steps[d.step]
    return replace(
        s,
        current_step=d.step,
        error=d.error,
        steps=_step(
            s,
            d.step,
            status="failed",
            error=d.error,
            attempts=max(1, before.attempts),
            started_at=before.started_at or e.at,
            finished_at=e.at,
        ),
    )


# --- activity attempts -------------------------------------------------------------------------------


def _attempt(d: ActivityScheduled | CompensationScheduled, kind: str, at: str) -> Attempt:
    """The attempt in flight that an action's or a compensation's scheduling event opens."""
    return Attempt(
        step=d.step,
        attempt=d.attempt,
        task_id=d.task_id,
        activity=d.activity,
        kind=kind,
        delivery=d.delivery,
        idempotency_key=d.idempotency_key,
        scheduled_at=at,
        timeout_ms=d.timeout_ms,
    )


def _scheduled(s: RunState, d: ActivityScheduled, e: Event) -> RunState:
    active = _attempt(d, "action", e.at)
    started = s.steps.get(d.step, StepState()).started_at or e.at
    return replace(
        s,
        active=active,
        current_step=d.step,
        steps=_step(
            s,
            d.step,
            status="scheduled",
            attempts=d.attempt,
            started_at=started,
            idempotency_key=d.idempotency_key,
        ),
    )


def _compensation_scheduled(s: RunState, d: CompensationScheduled, e: Event) -> RunState:
    active = _attempt(d, "compensation", e.at)
    return replace(
        s,
        active=active,
        current_step=d.step,
        steps=_comp(s, d.step, status="scheduled", attempts=d.attempt),
    )


def _leased(s: RunState, d: ActivityStarted, e: Event) -> RunState:
    if s.active is None:
        raise ValueError(f"ActivityStarted at seq {e.seq} without a scheduled attempt")
    active = replace(s.active, fencing=d.fencing, worker=d.worker, started_at=e.at, deadline=d.deadline)
    steps = _comp(s, d.step, status="running") if d.compensation else _step(s, d.step, status="running")
    return replace(s, active=active, steps=steps)


def _succeeded(s: RunState, d: ActivitySucceeded, e: Event) -> RunState:
    if d.compensation:
        rest = s.compensating[1:] if s.compensating else ()
        return replace(
            s, active=None, compensating=rest, steps=_comp(s, d.step, status="compensated", error=None)
        )
    return replace(
        s,
        last_output_step=d.step,
        active=None,
        completed=(*s.completed, d.step) if d.compensable else s.completed,
        steps=_step(s, d.step, status="succeeded", output=d.output, error=None, finished_at=e.at),
    )


def _attempt_failed(s: RunState, d: ActivityFailed | ActivityTimedOut, e: Event) -> RunState:
    status = "unknown" if d.outcome_unknown else ("retrying" if d.will_retry else "failed")
    if d.compensation:
        return replace(s, active=None, steps=_comp(s, d.step, status=status, error=d.error))
    fin = None if d.will_retry else e.at
    return replace(s, active=None, steps=_step(s, d.step, status=status, error=d.error, finished_at=fin))


def _withdrawn(s: RunState, d: ActivityCancelled, e: Event) -> RunState:
    if d.rescheduled:  # withdrawn by a pause; scheduled again on resume
        paused = _comp(s, d.step, status="paused") if d.compensation else _step(s, d.step, status="paused")
        return replace(s, active=None, steps=paused)
    return replace(s, active=None, steps=_step(s, d.step, status="cancelled", finished_at=e.at))


def _ignored(s: RunState, d: ResultIgnored) -> RunState:
    per_task = {**s.ignored_by_task, d.task_id: s.ignored_by_task.get(d.task_id, 0) + 1}
    return replace(s, ignored_results=s.ignored_results + 1, ignored_by_task=per_task)


# --- timers ------------------------------------------------------------------------------------------


def _timer_set(s: RunState, d: TimerScheduled, e: Event) -> RunState:
    timers = {**s.timers, d.key: Timer(d.key, d.generation, d.kind, d.step, d.fire_at, e.at)}
    if d.kind == "wait":
        return replace(
            s,
            timers=timers,
            current_step=d.step,
            steps=_step(s, d.step, status="waiting", attempts=1, started_at=e.at),
        )
    return replace(s, timers=timers)


def _timer_gone(s: RunState, d: TimerFired | TimerCancelled, e: Event) -> RunState:
    timers = {k: v for k, v in s.timers.items() if k != d.key}
    fired = isinstance(d, TimerFired)
    if d.kind == "wait":
        status = "succeeded" if fired else "cancelled"
        return replace(s, timers=timers, steps=_step(s, d.step, status=status, finished_at=e.at))
    if not fired and d.kind == "retry" and not d.key.endswith(":compensation"):
        # a retry that will never happen: the step ends cancelled (its last error stays visible)
        return replace(s, timers=timers, steps=_step(s, d.step, status="cancelled", finished_at=e.at))
    return replace(s, timers=timers)


# --- approvals ---------------------------------------------------------------------------------------


def _approval_requested(s: RunState, d: ApprovalRequested, e: Event) -> RunState:
    prev = s.steps.get(d.step, StepState())
    a: dict[str, Any] = {
        "request_id": d.request_id,
        "step": d.step,
        "policy": d.policy,
        "policy_digest": d.policy_digest,
        "details": d.details,
        "requested_at": e.at,
        "expires_at": d.expires_at,
        "initiator": d.initiator,
        "decisions": [],
        "links": [],
    }
    return replace(
        s,
        approval=a,
        current_step=d.step,
        steps=_step(
            s,
            d.step,
            status="waiting_approval",
            attempts=prev.attempts + 1,
            started_at=e.at,
            finished_at=None,
            error=None,
        ),
    )


Settled = ApprovalGranted | ApprovalRejected | ApprovalTimedOut | ApprovalCancelled
ApprovalEvent = (
    ApprovalLinkIssued | ApprovalLinkRevoked | ApprovalDecisionRecorded | ApproverReplaced | Settled
)


def _pending(s: RunState, d: ApprovalEvent, e: Event) -> dict[str, Any]:
    """A copy of the pending request the event is about (the state's own is never changed in place)."""
    a = s.approval
    if a is None or a["request_id"] != d.request_id:
        raise ValueError(f"{d.type} at seq {e.seq} for request {d.request_id} that is not pending")
    return copy.deepcopy(a)


def _link_issued(s: RunState, d: ApprovalLinkIssued, e: Event) -> RunState:
    a = _pending(s, d, e)
    a["links"].append({"approver": d.approver, "link_id": d.link_id, "expires_at": d.expires_at, "at": e.at})
    issued = a.get("issued", {})
    a["issued"] = {**issued, d.approver: issued.get(d.approver, 0) + 1}
    return replace(s, approval=a)


def _link_revoked(s: RunState, d: ApprovalLinkRevoked, e: Event) -> RunState:
    a = _pending(s, d, e)
    a["links"] = [x for x in a["links"] if x["link_id"] != d.link_id]
    return replace(s, approval=a)


def _decision(s: RunState, d: ApprovalDecisionRecorded, e: Event) -> RunState:
    a = _pending(s, d, e)
    a["decisions"].append(
        {
            "approver": d.approver,
            "decision": d.decision,
            "comment": d.comment,
            "at": e.at,
            "roles": d.roles,
            "groups": d.groups,
            "link_id": d.link_id,
        }
    )
    return replace(s, approval=a)


def _approver_replaced(s: RunState, d: ApproverReplaced, e: Event) -> RunState:
    a = _pending(s, d, e)
    users = [d.new if u == d.old else u for u in a["policy"]["users"]]
    if d.new not in users:
        users.append(d.new)
    a["policy"] = {**a["policy"], "users": list(dict.fromkeys(users))}
    a["links"] = [x for x in a["links"] if x["approver"] != d.old]
    a["replacements"] = a.get("replacements", 0) + 1
    return replace(s, approval=a)


SETTLED_STATUS: dict[type[Settled], str] = {
    ApprovalGranted: "succeeded",
    ApprovalRejected: "rejected",
    ApprovalTimedOut: "timed_out",
    ApprovalCancelled: "cancelled",
}


def _approval_settled(s: RunState, d: Settled, e: Event) -> RunState:
    a = _pending(s, d, e)
    status = SETTLED_STATUS[type(d)]
    outcome = "approved" if isinstance(d, ApprovalGranted) else status
    output = {"request_id": a["request_id"], "outcome": outcome, "decisions": a["decisions"]}
    return replace(
        s, approval=None, steps=_step(s, a["step"], status=status, output=output, finished_at=e.at)
    )


# --- operators ---------------------------------------------------------------------------------------


def _deferred(s: RunState, d: TransitionDeferred, e: Event) -> RunState:
    if s.paused is None:
        raise ValueError(f"TransitionDeferred at seq {e.seq} on a run that is not paused")
    deferred = [*s.paused["deferred"], {"action": d.action, "args": d.args}]
    return replace(s, paused={**s.paused, "deferred": deferred})


def _skipped(s: RunState, d: StepSkipped, e: Event) -> RunState:
    return replace(
        s,
        attention=None,
        paused=_superseded(s),
        last_output_step=d.step if d.output is not None else s.last_output_step,
        steps=_step(s, d.step, status="skipped", output=d.output, error=None, finished_at=e.at),
    )


def _resolved(s: RunState, d: StepResolved, e: Event) -> RunState:
    if d.compensation:
        rest = s.compensating[1:] if s.compensating else ()
        return replace(
            s,
            attention=None,
            compensating=rest,
            paused=_superseded(s),
            steps=_comp(s, d.step, status="compensated", error=None),
        )
    ok = d.outcome == "succeeded"
    return replace(
        s,
        attention=None,
        completed=(*s.completed, d.step) if d.compensable else s.completed,
        paused=_superseded(s),
        last_output_step=d.step if ok else s.last_output_step,
        steps=_step(
            s,
            d.step,
            status="succeeded" if ok else "failed",
            output=d.output if ok else None,
            finished_at=e.at,
        ),
    )


def _proposed(s: RunState, d: RepairProposed, e: Event) -> RunState:
    proposal = {
        "proposal_id": d.proposal_id,
        "kind": d.kind,
        "command": d.command,
        "reason": d.reason,
        "actor": d.actor,
        "at": e.at,
        "seq": e.seq,
    }
    return replace(s, proposal=proposal, proposals_made=s.proposals_made + 1)


def _superseded(s: RunState) -> dict[str, Any] | None:
    """A repair while paused replaces the transitions held back so far (they were computed for the state
    the repair changes); the repair's own continuation is held back in their place."""
    return {**s.paused, "deferred": []} if s.paused is not None else None


def _migrated(s: RunState, d: WorkflowMigrated) -> RunState:
    """Re-key the run onto the target version's steps (mapping: old id -> new id)."""
    mapping = d.mapping
    inverse = {new: old for old, new in mapping.items()}
    steps = {sid: s.steps.get(inverse.get(sid, ""), StepState()) for sid in d.steps}

    def m(x: str | None) -> str | None:
        return mapping.get(x, x) if x is not None else None

    approval = s.approval
    if approval is not None:
        approval = {**approval, "step": m(approval["step"])}
    return replace(
        s,
        definition=d.definition,
        steps=steps,
        current_step=m(s.current_step),
        completed=tuple(mapping.get(x, x) for x in s.completed),
        last_output_step=m(s.last_output_step),
        approval=approval,
        attention={**s.attention, "step": m(s.attention["step"])} if s.attention is not None else None,
        paused=_superseded(s),
    )


# --- copying states ----------------------------------------------------------------------------------


def replace(obj: D, **changes: Any) -> D:
    """dataclasses.replace without its per-call introspection of the fields: every event evolves the
    state through a few of these, and the stock one was a third of a transition's CPU. Valid because
    these dataclasses have no __post_init__ and no init=False fields; unknown names are still refused."""
    fields = obj.__dataclass_fields__  # type: ignore[attr-defined]
    if not changes.keys() <= fields.keys():
        raise TypeError(f"{type(obj).__name__} has no field(s) {sorted(changes.keys() - fields.keys())}")
    new = object.__new__(type(obj))
    state = new.__dict__
    state.update(obj.__dict__)
    state.update(changes)
    return new


def _derive_status(s: RunState) -> str:
    if s.status in TERMINAL:
        return s.status
    if s.attention is not None:
        return "needs_attention"
    if s.paused is not None:
        return "paused"
    if s.compensating is not None:
        return "compensating"
    if s.cancel is not None:
        return "cancelling"
    if s.active is not None:
        return "running"
    if s.timers or s.approval is not None:
        return "waiting"
    return "running"


def _step(s: RunState, step_id: str, **changes: Any) -> dict[str, StepState]:
    steps = dict(s.steps)
    steps[step_id] = replace(steps.get(step_id, StepState()), **changes)
    return steps


def _comp(s: RunState, step_id: str, **changes: Any) -> dict[str, StepState]:
    cur = s.steps.get(step_id, StepState()).compensation or {
        "status": "pending",
        "attempts": 0,
        "error": None,
    }
    return _step(s, step_id, compensation={**cur, **changes})
