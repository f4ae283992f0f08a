"""RunState: what a run is now, the fold of its events (see evolve/), and its snapshot document.

States are treated as immutable: evolve returns a new object and copies only what it changes.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import orjson

from .canonical import JSONObject, JSONValue, canonical_json

__all__ = [
    "SNAPSHOT_VERSION",
    "STATUSES",
    "STEP_OPEN",
    "TERMINAL",
    "Attempt",
    "Group",
    "Lane",
    "OutdatedSnapshot",
    "RunState",
    "StepState",
    "Timer",
]

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
# The statuses of a step that is being visited (entered and not yet over): a step that moves into one of
# them from any other status (or none) begins a new visit (StepState.entered_seq).
STEP_OPEN = frozenset(
    {"scheduled", "running", "retrying", "unknown", "waiting", "waiting_approval", "paused"}
)
# Bump when RunState gains or changes a field: stored snapshots of an older version are rebuilt from
# their events when loaded (snapshots are derived data; the events are the facts).
SNAPSHOT_VERSION = 6


class OutdatedSnapshot(ValueError):
    """A stored snapshot written by an older lockstep: rebuild it with fold(events)."""


@dataclass(frozen=True)
class StepState:
    status: str = "pending"
    attempts: int = 0
    output: JSONValue = None
    error: JSONObject | None = None
    idempotency_key: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    compensation: JSONObject | None = None
    # Where the step's current (or last) visit began: the seq and time of the event that entered it. A
    # step entered again (a loop, an operator's retry after it failed) begins a new visit.
    entered_seq: int | None = None
    entered_at: str | None = None


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
class Lane:
    """One line of steps that runs beside others (core/paths.py names it): a branch of a parallel step
    or an item of a for-each step. It holds, for its own steps, what RunState holds for the top-level
    ones: the current step, the attempt in flight, the pending approval, what waits for an operator."""

    step: str  # the key of the shape step it belongs to
    index: int  # the branch's position, or the item's index
    status: str = "running"  # running | cancelling | succeeded | failed | cancelled
    current_step: str | None = None
    active: Attempt | None = None
    approval: JSONObject | None = None
    attention: JSONObject | None = None
    last_output_step: str | None = None
    output: JSONValue = None
    error: JSONObject | None = None
    started_seq: int | None = None
    started_at: str | None = None
    finished_at: str | None = None

    @property
    def open(self) -> bool:
        return self.status in ("running", "cancelling")


@dataclass(frozen=True)
class Group:
    """A parallel or for-each step: its join rule and its lanes (those started are in RunState.lanes)."""

    kind: str  # "parallel" | "for_each"
    join: str  # "all" | "any" | "n_of"
    need: int  # successes that complete the step
    lanes: tuple[str, ...]  # every lane it has, in order (a branch each, or an item each)
    tolerant: tuple[str, ...]  # lanes whose failure does not fail the step (on_failure: continue)
    concurrency: int  # lanes running at once
    items: JSONValue = None  # a for-each's list
    outcome: str | None = None  # "succeeded" | "failed", once the join is decided
    error: JSONObject | None = None  # why it failed
    started_seq: int | None = None


@dataclass(frozen=True)
class RunState:
    run_id: str
    tenant: str
    definition: JSONObject
    status: str
    seq: int
    input: JSONValue
    started_at: str
    updated_at: str
    start_key: str | None = None
    actor: str | None = None
    output: JSONValue = None
    error: JSONObject | None = None
    current_step: str | None = None
    steps: dict[str, StepState] = field(default_factory=dict)
    active: Attempt | None = None
    timers: dict[str, Timer] = field(default_factory=dict)
    completed: tuple[str, ...] = ()
    compensating: tuple[str, ...] | None = None
    compensation_cause: str | None = None
    cancel: JSONObject | None = None
    attention: JSONObject | None = None
    finished_at: str | None = None
    ignored_results: int = 0
    # The activity step that succeeded last: its output is the run's default output.
    last_output_step: str | None = None
    # The pending approval request, if the run waits for people (see ApprovalRequested).
    approval: JSONObject | None = None
    # Set while an operator has paused the run: {reason, actor, at, deferred: [transitions for resume]}.
    paused: JSONObject | None = None
    # ResultIgnored events recorded per task id (bounded: see HISTORY_LIMITS).
    ignored_by_task: dict[str, int] = field(default_factory=dict)
    # The open four-eyes proposal (RepairProposed), if any; any event that moves the run makes it stale.
    proposal: JSONObject | None = None
    proposals_made: int = 0
    # The run's trace context from RunStarted (None: started untraced; a trace id is then derived).
    trace: str | None = None
    trace_parent: str | None = None
    # When compensation began (CompensationStarted's seq and time).
    compensation_seq: int | None = None
    compensation_at: str | None = None
    # The lanes of parallel and for-each steps (by lane id) and the shape steps themselves (by key).
    lanes: dict[str, Lane] = field(default_factory=dict)
    groups: dict[str, Group] = field(default_factory=dict)
    # A child run's parent ({run_id, step, depth}: RunStarted.parent); the child runs this run waits
    # for, by the key of their `run` step ({child_run_id, definition, version, start_key, at, cancel}).
    parent: JSONObject | None = None
    children: dict[str, JSONObject] = field(default_factory=dict)
    # The external events this run waits for, by the key of their `wait_event` step ({name, key,
    # expires_at, generation, at, callback, integration, issued: callback ids minted, token_hash}).
    event_waits: dict[str, JSONObject] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def to_json(self, *, copy_values: bool = True) -> JSONObject:
        """The snapshot document. `copy_values=False` shares nested values with this (immutable) state:
        for serialising at once, never for handing out."""
        return self._document(copy_values, native=False)

    def snapshot_text(self) -> str:
        """`compact_json(self.to_json(copy_values=False))`, the stored snapshot, without a dict built per
        step, attempt and timer on every transition (the part of a write that grows with the run):
        orjson writes those frozen dataclasses itself, every field in definition order, the same text
        (tests/core pin it). Where orjson refuses a value, the stdlib writes the document as before."""
        try:
            return orjson.dumps(self._document(False, native=True)).decode()
        except TypeError:
            return canonical_json(self.to_json(copy_values=False))

    def _document(self, deep: bool, *, native: bool) -> JSONObject:
        """The snapshot document; `native`: steps, the active attempt and timers left as dataclasses."""
        out: JSONObject = {
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
            "steps": self.steps if native else {k: _asdict(v, deep) for k, v in self.steps.items()},
            "active": (self.active if native else _asdict(self.active, deep)) if self.active else None,
            "timers": self.timers if native else {k: _asdict(t, deep) for k, t in self.timers.items()},
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
            "trace": self.trace,
            "trace_parent": self.trace_parent,
            "compensation_seq": self.compensation_seq,
            "compensation_at": self.compensation_at,
            "lanes": {k: _lane_json(v, deep) for k, v in self.lanes.items()},
            "groups": {k: _group_json(v, deep) for k, v in self.groups.items()},
            "parent": self.parent,
            "children": copy.deepcopy(self.children) if deep else self.children,
        }
        if self.event_waits:  # written only when there are some: every stored snapshot reads back as is
            out["event_waits"] = copy.deepcopy(self.event_waits) if deep else self.event_waits
        return out

    @staticmethod
    def from_json(o: JSONObject) -> RunState:
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
            trace=o["trace"],
            trace_parent=o["trace_parent"],
            compensation_seq=o["compensation_seq"],
            compensation_at=o["compensation_at"],
            lanes={k: _lane_of(v) for k, v in o["lanes"].items()},
            groups={k: _group_of(v) for k, v in o["groups"].items()},
            parent=o["parent"],
            children=dict(o["children"]),
            event_waits=dict(o.get("event_waits") or {}),
        )


def _lane_json(lane: Lane, deep: bool) -> JSONObject:
    out = _asdict(lane, deep)
    out["active"] = _asdict(lane.active, deep) if lane.active is not None else None
    return out


def _group_json(group: Group, deep: bool) -> JSONObject:
    return {**_asdict(group, deep), "lanes": list(group.lanes), "tolerant": list(group.tolerant)}


def _lane_of(o: JSONObject) -> Lane:
    return Lane(**{**o, "active": Attempt(**o["active"]) if o["active"] else None})


def _group_of(o: JSONObject) -> Group:
    return Group(**{**o, "lanes": tuple(o["lanes"]), "tolerant": tuple(o["tolerant"])})


def _asdict(obj: StepState | Attempt | Timer | Lane | Group, deep: bool = True) -> JSONObject:
    if not deep:
        return {k: getattr(obj, k) for k in obj.__dataclass_fields__}
    return {k: copy.deepcopy(getattr(obj, k)) for k in obj.__dataclass_fields__}
