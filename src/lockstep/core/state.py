"""RunState, the fold of a run's events, and evolve(state, event) -> state.

evolve never consults the definition: every event carries what it means, so a history replays alone.
States are treated as immutable: evolve returns a new object and copies only what it changes.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .events import KEEPS_PROPOSAL, Event

__all__ = [
    "SNAPSHOT_VERSION",
    "STATUSES",
    "TERMINAL",
    "Attempt",
    "OutdatedSnapshot",
    "RunState",
    "StepState",
    "Timer",
    "evolve",
    "fold",
]

D = TypeVar("D")

TERMINAL = frozenset({"completed", "failed", "cancelled"})
# Every status a run can have, in the order people read them (live ones first, then the terminal ones).
STATUSES = (
    "running",
    "waiting",
    "paused",
    "needs_attention",
    "cancelling",
    "compensating",
    "completed",
    "failed",
    "cancelled",
)
# Bump when RunState gains or changes a field: stored snapshots of an older version are rebuilt from
# their events when loaded (snapshots are derived data; the events are the facts).
SNAPSHOT_VERSION = 4


class OutdatedSnapshot(ValueError):
    """A stored snapshot written by an older lockstep: rebuild it with fold(events)."""


@dataclass(frozen=True)
class StepState:
    status: str = "pending"
    attempts: int = 0
    output: Any = None
    error: dict[str, Any] | None = None
    idempotency_key: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    compensation: dict[str, Any] | None = None


@dataclass(frozen=True)
class Attempt:
    """The one activity attempt a run may have in flight (an action or a compensation)."""

    step: str
    attempt: int
    task_id: str
    activity: str
    kind: str  # "action" | "compensation"
    delivery: str
    idempotency_key: str
    scheduled_at: str
    timeout_ms: int
    fencing: int | None = None
    worker: str | None = None
    started_at: str | None = None
    deadline: str | None = None


@dataclass(frozen=True)
class Timer:
    key: str
    generation: int
    kind: str  # "wait" | "retry"
    step: str
    fire_at: str
    scheduled_at: str


@dataclass(frozen=True)
class RunState:
    run_id: str
    tenant: str
    definition: dict[str, Any]
    status: str
    seq: int
    input: Any
    started_at: str
    updated_at: str
    start_key: str | None = None
    actor: str | None = None
    output: Any = None
    error: dict[str, Any] | None = None
    current_step: str | None = None
    steps: dict[str, StepState] = field(default_factory=dict)
    active: Attempt | None = None
    timers: dict[str, Timer] = field(default_factory=dict)
    completed: tuple[str, ...] = ()
    compensating: tuple[str, ...] | None = None
    compensation_cause: str | None = None
    cancel: dict[str, Any] | None = None
    attention: dict[str, Any] | None = None
    finished_at: str | None = None
    ignored_results: int = 0
    # The activity step that succeeded last: its output is the run's default output.
    last_output_step: str | None = None
    # The pending approval request, if the run waits for people (see ApprovalRequested).
    approval: dict[str, Any] | None = None
    # Set while an operator has paused the run: {reason, actor, at, deferred: [transitions for resume]}.
    paused: dict[str, Any] | None = None
    # ResultIgnored events recorded per task id (bounded: see HISTORY_LIMITS).
    ignored_by_task: dict[str, int] = field(default_factory=dict)
    # The open four-eyes proposal (RepairProposed), if any; any event that moves the run makes it stale.
    proposal: dict[str, Any] | None = None
    proposals_made: int = 0

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def to_json(self, *, copy_values: bool = True) -> dict[str, Any]:
        """The snapshot document. `copy_values=False` shares nested values with this (immutable) state:
        for serialising at once, never for handing out."""
        deep = copy_values
        return {
            "snapshot_version": SNAPSHOT_VERSION,
            "run_id": self.run_id,
            "tenant": self.tenant,
            "definition": self.definition,
            "status": self.status,
            "seq": self.seq,
            "input": self.input,
            "started_at": self.started_at,
            "updated_at": self.updated_at,
            "start_key": self.start_key,
            "actor": self.actor,
            "output": self.output,
            "error": self.error,
            "current_step": self.current_step,
            "steps": {k: _asdict(v, deep) for k, v in self.steps.items()},
            "active": _asdict(self.active, deep) if self.active else None,
            "timers": {k: _asdict(t, deep) for k, t in self.timers.items()},
            "completed": list(self.completed),
            "compensating": list(self.compensating) if self.compensating is not None else None,
            "compensation_cause": self.compensation_cause,
            "cancel": self.cancel,
            "attention": self.attention,
            "finished_at": self.finished_at,
            "ignored_results": self.ignored_results,
            "last_output_step": self.last_output_step,
            "approval": copy.deepcopy(self.approval) if deep else self.approval,
            "paused": copy.deepcopy(self.paused) if deep else self.paused,
            "ignored_by_task": dict(self.ignored_by_task),
            "proposal": copy.deepcopy(self.proposal) if deep else self.proposal,
            "proposals_made": self.proposals_made,
        }

    @staticmethod
    def from_json(o: dict[str, Any]) -> RunState:
        if o.get("snapshot_version") != SNAPSHOT_VERSION:
            raise OutdatedSnapshot(f"snapshot version {o.get('snapshot_version')} != {SNAPSHOT_VERSION}")
        return RunState(
            run_id=o["run_id"],
            tenant=o["tenant"],
            definition=o["definition"],
            status=o["status"],
            seq=o["seq"],
            input=o["input"],
            started_at=o["started_at"],
            updated_at=o["updated_at"],
            start_key=o["start_key"],
            actor=o["actor"],
            output=o["output"],
            error=o["error"],
            current_step=o["current_step"],
            steps={k: StepState(**v) for k, v in o["steps"].items()},
            active=Attempt(**o["active"]) if o["active"] else None,
            timers={k: Timer(**t) for k, t in o["timers"].items()},
            completed=tuple(o["completed"]),
            compensating=tuple(o["compensating"]) if o["compensating"] is not None else None,
            compensation_cause=o["compensation_cause"],
            cancel=o["cancel"],
            attention=o["attention"],
            finished_at=o["finished_at"],
            ignored_results=o["ignored_results"],
            last_output_step=o.get("last_output_step"),
            approval=o.get("approval"),
            paused=o.get("paused"),
            ignored_by_task=dict(o.get("ignored_by_task") or {}),
            proposal=o.get("proposal"),
            proposals_made=int(o.get("proposals_made") or 0),
        )


def _asdict(obj: Any, deep: bool = True) -> dict[str, Any]:
    if not deep:
        return {k: getattr(obj, k) for k in obj.__dataclass_fields__}
    return {k: copy.deepcopy(getattr(obj, k)) for k in obj.__dataclass_fields__}


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


def _apply(s: RunState, e: Event) -> RunState:
    d, t = e.data, e.type
    is_comp = bool(d.get("compensation"))
    if t in ("ActivityScheduled", "CompensationScheduled"):
        active = Attempt(
            step=d["step"],
            attempt=d["attempt"],
            task_id=d["task_id"],
            activity=d["activity"],
            kind="compensation" if t == "CompensationScheduled" else "action",
            delivery=d["delivery"],
            idempotency_key=d["idempotency_key"],
            scheduled_at=e.at,
            timeout_ms=d["timeout_ms"],
        )
        if t == "CompensationScheduled":
            return replace(
                s,
                active=active,
                current_step=d["step"],
                steps=_comp(s, d["step"], status="scheduled", attempts=d["attempt"]),
            )
        started = s.steps.get(d["step"], StepState()).started_at or e.at
        return replace(
            s,
            active=active,
            current_step=d["step"],
            steps=_step(
                s,
                d["step"],
                status="scheduled",
                attempts=d["attempt"],
                started_at=started,
                idempotency_key=d["idempotency_key"],
            ),
        )
    if t == "ActivityStarted":
        if s.active is None:
            raise ValueError(f"ActivityStarted at seq {e.seq} without a scheduled attempt")
        active = replace(
            s.active, fencing=d["fencing"], worker=d["worker"], started_at=e.at, deadline=d["deadline"]
        )
        steps = _comp(s, d["step"], status="running") if is_comp else _step(s, d["step"], status="running")
        return replace(s, active=active, steps=steps)
    if t == "ActivitySucceeded":
        if is_comp:
            rest = s.compensating[1:] if s.compensating else ()
            return replace(
                s, active=None, compensating=rest, steps=_comp(s, d["step"], status="compensated", error=None)
            )
        completed = (*s.completed, d["step"]) if d.get("compensable") else s.completed
        return replace(
            s,
            last_output_step=d["step"],
            active=None,
            completed=completed,
            steps=_step(s, d["step"], status="succeeded", output=d["output"], error=None, finished_at=e.at),
        )
    if t in ("ActivityFailed", "ActivityTimedOut"):
        err = d["error"]
        status = "unknown" if d.get("outcome_unknown") else ("retrying" if d["will_retry"] else "failed")
        if is_comp:
            return replace(s, active=None, steps=_comp(s, d["step"], status=status, error=err))
        fin = None if d["will_retry"] else e.at
        return replace(s, active=None, steps=_step(s, d["step"], status=status, error=err, finished_at=fin))
    if t == "ActivityDeadLettered":
        return replace(s, active=None, steps=_step(s, d["step"], status="dead_letter", finished_at=e.at))
    if t == "StepRetried":
        return replace(s, attention=None, paused=_superseded(s))
    if t == "ActivityCancelled":
        if d.get("rescheduled"):  # withdrawn by a pause; scheduled again on resume
            steps = _comp(s, d["step"], status="paused") if is_comp else _step(s, d["step"], status="paused")
            return replace(s, active=None, steps=steps)
        return replace(s, active=None, steps=_step(s, d["step"], status="cancelled", finished_at=e.at))
    if t == "StepSkipped":
        last = d["step"] if d.get("output") is not None else s.last_output_step
        return replace(
            s,
            attention=None,
            paused=_superseded(s),
            last_output_step=last,
            steps=_step(s, d["step"], status="skipped", output=d.get("output"), error=None, finished_at=e.at),
        )
    if t == "InputEdited":
        return replace(s, input=d["new"])
    if t == "WorkflowMigrated":
        return _migrated(s, d)
    if t == "StepResolved":
        if d.get("compensation"):
            rest = s.compensating[1:] if s.compensating else ()
            return replace(
                s,
                attention=None,
                compensating=rest,
                paused=_superseded(s),
                steps=_comp(s, d["step"], status="compensated", error=None),
            )
        ok = d["outcome"] == "succeeded"
        completed = (*s.completed, d["step"]) if d.get("compensable") else s.completed
        return replace(
            s,
            attention=None,
            completed=completed,
            paused=_superseded(s),
            last_output_step=d["step"] if ok else s.last_output_step,
            steps=_step(
                s,
                d["step"],
                status="succeeded" if ok else "failed",
                output=d.get("output") if ok else None,
                finished_at=e.at,
            ),
        )
    if t == "ResultIgnored":
        per_task = {**s.ignored_by_task, d["task_id"]: s.ignored_by_task.get(d["task_id"], 0) + 1}
        return replace(s, ignored_results=s.ignored_results + 1, ignored_by_task=per_task)
    if t == "RepairProposed":
        proposal = {
            "proposal_id": d["proposal_id"],
            "kind": d["kind"],
            "command": d["command"],
            "reason": d["reason"],
            "actor": d["actor"],
            "at": e.at,
            "seq": e.seq,
        }
        return replace(s, proposal=proposal, proposals_made=s.proposals_made + 1)
    if t == "RepairRejected":
        return replace(s, proposal=None)
    if t == "RepairConfirmed":
        return replace(s, proposal=None)
    if t == "ChoiceEvaluated":
        return replace(
            s,
            current_step=d["step"],
            steps=_step(
                s,
                d["step"],
                status="succeeded",
                output={"next": d["next"]},
                attempts=1,
                started_at=e.at,
                finished_at=e.at,
            ),
        )
    if t == "TimerScheduled":
        timers = {
            **s.timers,
            d["key"]: Timer(d["key"], d["generation"], d["kind"], d["step"], d["fire_at"], e.at),
        }
        if d["kind"] == "wait":
            return replace(
                s,
                timers=timers,
                current_step=d["step"],
                steps=_step(s, d["step"], status="waiting", attempts=1, started_at=e.at),
            )
        return replace(s, timers=timers)
    if t in ("TimerFired", "TimerCancelled"):
        timers = {k: v for k, v in s.timers.items() if k != d["key"]}
        if t == "TimerFired" and d["kind"] == "wait":
            return replace(s, timers=timers, steps=_step(s, d["step"], status="succeeded", finished_at=e.at))
        if t == "TimerCancelled" and d["kind"] == "wait":
            return replace(s, timers=timers, steps=_step(s, d["step"], status="cancelled", finished_at=e.at))
        if t == "TimerCancelled" and d["kind"] == "retry" and not d["key"].endswith(":compensation"):
            # a retry that will never happen: the step ends cancelled (its last error stays visible)
            return replace(s, timers=timers, steps=_step(s, d["step"], status="cancelled", finished_at=e.at))
        return replace(s, timers=timers)
    if t == "StepFailed":
        return replace(
            s,
            current_step=d["step"],
            error=d["error"],
            steps=_step(
                s,
                d["step"],
                status="failed",
                error=d["error"],
                attempts=max(1, s.steps[d["step"]].attempts),
                started_at=s.steps[d["step"]].started_at or e.at,
                finished_at=e.at,
            ),
        )
    if t.startswith("Approv") or t == "ApproverReplaced":
        return _apply_approval(s, e)
    if t == "NeedsAttention":
        return replace(
            s, attention={"step": d["step"], "code": d["code"], "reason": d["reason"], "since": e.at}
        )
    if t == "CancelRequested":
        # Cancelling a paused run resumes it for the cancellation (compensations must be able to run).
        return replace(
            s,
            cancel={"reason": d["reason"], "actor": d.get("actor"), "at": e.at},
            attention=None,
            paused=None,
        )
    if t == "RunPaused":
        return replace(s, paused={"reason": d["reason"], "actor": d.get("actor"), "at": e.at, "deferred": []})
    if t == "TransitionDeferred":
        if s.paused is None:
            raise ValueError(f"TransitionDeferred at seq {e.seq} on a run that is not paused")
        deferred = [*s.paused["deferred"], {"action": d["action"], "args": d["args"]}]
        return replace(s, paused={**s.paused, "deferred": deferred})
    if t == "RunResumed":
        return replace(s, paused=None)
    if t == "CompensationStarted":
        return replace(
            s,
            compensating=tuple(d["steps"]),
            compensation_cause=d["cause"],
            attention=None,
            error=d.get("error") or s.error,
        )
    if t == "RunCompleted":
        return replace(
            s, status="completed", output=d["output"], current_step=None, finished_at=e.at, timers={}
        )
    if t == "RunFailed":
        return replace(
            s,
            status="failed",
            error=d["error"],
            current_step=None,
            finished_at=e.at,
            compensating=None,
            timers={},
        )
    if t == "RunCancelled":
        return replace(
            s, status="cancelled", current_step=None, finished_at=e.at, compensating=None, timers={}
        )
    raise ValueError(f"unknown event type {t!r} at seq {e.seq}")


def _superseded(s: RunState) -> dict[str, Any] | None:
    """A repair while paused replaces the transitions held back so far (they were computed for the state
    the repair changes); the repair's own continuation is held back in their place."""
    return {**s.paused, "deferred": []} if s.paused is not None else None


def _migrated(s: RunState, d: dict[str, Any]) -> RunState:
    """Re-key the run onto the target version's steps (mapping: old id -> new id)."""
    mapping: dict[str, str] = d["mapping"]
    inverse = {new: old for old, new in mapping.items()}
    steps = {sid: s.steps.get(inverse.get(sid, ""), StepState()) for sid in d["steps"]}

    def m(x: str | None) -> str | None:
        return mapping.get(x, x) if x is not None else None

    approval = s.approval
    if approval is not None:
        approval = {**approval, "step": m(approval["step"])}
    return replace(
        s,
        definition=d["definition"],
        steps=steps,
        current_step=m(s.current_step),
        completed=tuple(mapping.get(x, x) for x in s.completed),
        last_output_step=m(s.last_output_step),
        approval=approval,
        attention={**s.attention, "step": m(s.attention["step"])} if s.attention is not None else None,
        paused=_superseded(s),
    )


def _apply_approval(s: RunState, e: Event) -> RunState:
    d, t = e.data, e.type
    a = copy.deepcopy(s.approval) if s.approval is not None else None
    if t == "ApprovalRequested":
        prev = s.steps.get(d["step"], StepState())
        a = {
            "request_id": d["request_id"],
            "step": d["step"],
            "policy": d["policy"],
            "policy_digest": d["policy_digest"],
            "details": d["details"],
            "requested_at": e.at,
            "expires_at": d["expires_at"],
            "initiator": d.get("initiator"),
            "decisions": [],
            "links": [],
        }
        return replace(
            s,
            approval=a,
            current_step=d["step"],
            steps=_step(
                s,
                d["step"],
                status="waiting_approval",
                attempts=prev.attempts + 1,
                started_at=e.at,
                finished_at=None,
                error=None,
            ),
        )
    if a is None or a["request_id"] != d.get("request_id"):
        raise ValueError(f"{t} at seq {e.seq} for request {d.get('request_id')} that is not pending")
    if t == "ApprovalLinkIssued":
        a["links"].append(
            {"approver": d["approver"], "link_id": d["link_id"], "expires_at": d["expires_at"], "at": e.at}
        )
        issued = a.get("issued", {})
        a["issued"] = {**issued, d["approver"]: issued.get(d["approver"], 0) + 1}
        return replace(s, approval=a)
    if t == "ApprovalLinkRevoked":
        a["links"] = [x for x in a["links"] if x["link_id"] != d["link_id"]]
        return replace(s, approval=a)
    if t == "ApprovalDecisionRecorded":
        a["decisions"].append(
            {
                "approver": d["approver"],
                "decision": d["decision"],
                "comment": d.get("comment"),
                "at": e.at,
                "roles": d.get("roles", []),
                "groups": d.get("groups", []),
                "link_id": d.get("link_id"),
            }
        )
        return replace(s, approval=a)
    if t == "ApproverReplaced":
        users = [d["new"] if u == d["old"] else u for u in a["policy"]["users"]]
        if d["new"] not in users:
            users.append(d["new"])
        a["policy"] = {**a["policy"], "users": list(dict.fromkeys(users))}
        a["links"] = [x for x in a["links"] if x["approver"] != d["old"]]
        a["replacements"] = a.get("replacements", 0) + 1
        return replace(s, approval=a)
    status = {
        "ApprovalGranted": "succeeded",
        "ApprovalRejected": "rejected",
        "ApprovalTimedOut": "timed_out",
        "ApprovalCancelled": "cancelled",
    }.get(t)
    if status is None:
        raise ValueError(f"unknown event type {t!r} at seq {e.seq}")
    outcome = "approved" if t == "ApprovalGranted" else status
    output = {"request_id": a["request_id"], "outcome": outcome, "decisions": a["decisions"]}
    return replace(
        s, approval=None, steps=_step(s, a["step"], status=status, output=output, finished_at=e.at)
    )


def evolve(state: RunState | None, event: Event) -> RunState:
    """Apply one event. RunStarted creates the state; every event advances seq by exactly one."""
    if event.type == "RunStarted":
        if state is not None:
            raise ValueError("RunStarted on a run that already exists")
        d = event.data
        s = RunState(
            run_id=d["run_id"],
            tenant=d["tenant"],
            definition=d["definition"],
            status="running",
            seq=event.seq,
            input=d["input"],
            started_at=event.at,
            updated_at=event.at,
            start_key=d.get("start_key"),
            actor=d.get("actor"),
            steps={sid: StepState() for sid in d["steps"]},
        )
        return s
    if state is None:
        raise ValueError(f"{event.type} before RunStarted")
    if event.seq != state.seq + 1:
        raise ValueError(f"event seq {event.seq} does not follow {state.seq}")
    s = _apply(state, event)
    if s.proposal is not None and event.type not in KEEPS_PROPOSAL:
        s = replace(s, proposal=None)  # the run moved on: the proposal was made for a state that is gone
    s = replace(s, seq=event.seq, updated_at=event.at)
    return replace(s, status=_derive_status(s))


def fold(events: list[Event]) -> RunState | None:
    state: RunState | None = None
    for e in events:
        state = evolve(state, e)
    return state
