"""The views of runs: one run (RunView), a line of a list (RunSummary), the event history, the answers
of start, cancel and retry, dead letters, verification, and the task an HTTP worker receives."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal, cast

from pydantic import ConfigDict, Field

from ...core.canonical import JSONObject
from ...core.definition.model import STEP_KINDS
from ...core.events import EVENT_TYPES
from ...core.paths import is_item_lane, lane_name
from ...core.shape import for_view
from ...core.state import STEP_OPEN, Lane, StepState
from ...core.timeutil import format_duration, parse_iso
from ..work import TaskLease
from .base import Marker, Recorded, TenantJson, View
from .recorded import Attention, CancelInfo, Compensation, ErrorInfo

__all__ = [
    "CancelResult",
    "ChildRef",
    "DeadLetter",
    "DefinitionRef",
    "EventView",
    "EventWaitRef",
    "LaneView",
    "ParentRef",
    "RetryResult",
    "RunStatus",
    "RunSummary",
    "RunView",
    "StartResult",
    "StepView",
    "TaskView",
    "VerifyResult",
    "WaitKind",
]

# core.state.STATUSES and core.explain.WAIT_KINDS as types (tests/api/test_openapi_responses.py keeps them
# equal).
RunStatus = Literal[
    "running",
    "waiting",
    "paused",
    "needs_attention",
    "cancelling",
    "compensating",
    "completed",
    "failed",
    "cancelled",
]
WaitKind = Literal[
    "queued",
    "running",
    "timer",
    "retry",
    "approval",
    "child",
    "event",
    "attention",
    "paused",
    "cancelling",
    "compensating",
    "transition",
]


# Every status a step can have (tests/api/test_openapi_types.py folds the golden histories and checks each
# status they reach is one of these). In the schema as an enum, not a Literal: a stored snapshot's status is
# shown as recorded, never refused.
STEP_STATUSES = (
    "pending",
    "scheduled",
    "running",
    "retrying",
    "unknown",
    "waiting",
    "waiting_approval",
    "paused",
    "succeeded",
    "failed",
    "skipped",
    "cancelled",
    "dead_letter",
    "rejected",
    "timed_out",
    "not_taken",
)

EVENT_TYPE_NAMES = tuple(sorted(EVENT_TYPES))

TaskKind = Literal["action", "compensation"]
LaneStatus = Literal["running", "cancelling", "succeeded", "failed", "cancelled"]


def _is_none(value: object) -> bool:
    return value is None


class DefinitionRef(View):
    """The definition version a run follows."""

    # As the HTTP API always showed it: these three fields, in this order (a key the core might add is
    # not shown).
    model_config = ConfigDict(extra="ignore")
    name: str
    version: int
    digest: str


class StepView(View):
    """One step of a run, as far as it got."""

    status: str = Field(
        description="where the step is; not_taken: a step a finished run never entered (while the run "
        "goes on, such a step is pending)",
        json_schema_extra={"enum": list(STEP_STATUSES)},
    )
    attempts: int
    output: TenantJson
    error: Recorded[ErrorInfo | Marker | None]
    idempotency_key: str | None = Field(
        description="the key of the step's last attempt, as sent to the activity"
    )
    started_at: str | None
    finished_at: str | None
    kind: str | None = Field(
        default=None,
        description="the step's kind (null: not a step of its version)",
        json_schema_extra={"anyOf": [{"type": "string", "enum": list(STEP_KINDS)}, {"type": "null"}]},
    )
    duration_seconds: float | None = Field(
        default=None,
        description="started_at to finished_at; while the step is open, to now (so far). For an approval "
        "step: the time in approval, from the request to the decision (or so far)",
    )
    compensation: Recorded[Compensation | Marker | None] = Field(
        default=None, exclude_if=_is_none, description="only once the run compensates this step"
    )

    def took(self) -> str:
        """The duration for people: `6s`, `1h 2m`, `3m 10s so far` while the step is open; `` before."""
        if self.duration_seconds is None:
            return ""
        text = format_duration(timedelta(seconds=self.duration_seconds))
        return f"{text} so far" if self.status in STEP_OPEN else text

    @staticmethod
    def duration_of(st: StepState, now: datetime) -> float | None:
        """started_at to finished_at, or to `now` while the step is open (so far), in seconds."""
        if st.started_at is None:
            return None
        if st.status in STEP_OPEN:
            end = now
        elif st.finished_at is not None:
            end = parse_iso(st.finished_at)
        else:
            return None
        return round(max(0.0, (end - parse_iso(st.started_at)).total_seconds()), 3)


class LaneView(View):
    """One lane of a parallel or for-each step: a branch, or an item, as far as it got."""

    step: str = Field(description="the key of the parallel or for-each step it belongs to")
    kind: Literal["branch", "item"]
    name: str = Field(description="the branch id, or the item's index")
    status: LaneStatus
    current_step: str | None = Field(description="the key of the step it is at (or ended at)")
    output: TenantJson = Field(description="its output once it succeeded: that of its last step with one")
    error: Recorded[ErrorInfo | Marker | None]
    started_at: str | None
    finished_at: str | None

    @classmethod
    def of(cls, lane_id: str, lane: Lane) -> LaneView:
        return cls(
            step=lane.step,
            kind="item" if is_item_lane(lane_id) else "branch",
            name=lane_name(lane_id),
            status=cast(LaneStatus, lane.status),
            current_step=lane.current_step,
            output=for_view(lane.output),
            error=for_view(lane.error),
            started_at=lane.started_at,
            finished_at=lane.finished_at,
        )


def _is_empty(value: object) -> bool:
    return not value


class ParentRef(View):
    """The run whose `run` step started this one."""

    run_id: str
    step: str = Field(description="the parent's step key")
    depth: int = Field(description="1 for a child of a run no run started")


class ChildRef(View):
    """A child run a `run` step waits for."""

    child_run_id: str
    definition: str
    version: int | None = Field(description="null: the latest version when the child starts")
    requested_at: str
    cancel: str | None = Field(description="why its cancellation was asked for, if it was")


class EventWaitRef(View):
    """An external event a `wait_event` step waits for (its callbacks: GET /v1/runs/{id}/event-waits)."""

    name: str
    key: str
    since: str
    expires_at: str
    callback: bool = Field(description="whether an operator may mint a callback URL for it")
    integration: str | None = Field(default=None, description="the integration that must sign the callback")


class RunView(View):
    """A run: where it is, why it waits and what happens next (exactly what `lockstep show RUN --json`
    prints)."""

    run_id: str
    tenant: str
    status: RunStatus
    definition: DefinitionRef
    current_step: str | None
    wait_kind: WaitKind | None = Field(description="what the run waits for; null once it finished")
    wait_reason: str | None
    waiting_since: str | None
    waiting_until: str | None
    next_action: str | None
    input: TenantJson
    output: TenantJson
    error: Recorded[ErrorInfo | Marker | None]
    steps: dict[str, StepView] = Field(
        description="by step id, in definition order (a step inside a parallel or for-each step by its key: "
        "`review.legal.check`, `lines[2].pack`)"
    )
    lanes: dict[str, LaneView] = Field(
        default_factory=dict,
        exclude_if=_is_empty,
        description="the branches and items of its parallel and for-each steps, by lane id (only when it "
        "has some)",
    )
    parent: ParentRef | None = Field(
        default=None, exclude_if=_is_none, description="the run that started this one (a child run only)"
    )
    children: dict[str, ChildRef] = Field(
        default_factory=dict,
        exclude_if=_is_empty,
        description="the child runs it waits for, by the key of their `run` step (only when it has some)",
    )
    event_waits: dict[str, EventWaitRef] = Field(
        default_factory=dict,
        exclude_if=_is_empty,
        description="the external events it waits for, by the key of their `wait_event` step (only when "
        "it has some; never a callback token)",
    )
    started_at: str
    updated_at: str
    finished_at: str | None
    cancel: Recorded[CancelInfo | None]
    attention: Recorded[Attention | None]
    seq: int = Field(description="the sequence number of the run's last event")
    start_key: str | None
    ignored_results: int = Field(description="stale results that changed nothing (recorded as ResultIgnored)")
    damaged: str | None = Field(
        default=None,
        exclude_if=_is_none,
        description="what the background scrub found wrong with its stored rows (only when it marked the "
        "run damaged): every command on it is refused (corrupt_run) until they are restored",
    )


class RunSummary(View):
    """A run in a list (`lockstep runs --json`)."""

    run_id: str
    status: RunStatus
    definition: DefinitionRef
    current_step: str | None
    wait_reason: str | None
    started_at: str
    updated_at: str

    @classmethod
    def of(cls, run: RunView) -> RunSummary:
        return cls(
            run_id=run.run_id,
            status=run.status,
            definition=run.definition,
            current_step=run.current_step,
            wait_reason=run.wait_reason,
            started_at=run.started_at,
            updated_at=run.updated_at,
        )


class EventView(View):
    """One event of a run's history."""

    seq: int
    type: str = Field(
        description="the event's type (core/events/): what `data` holds",
        json_schema_extra={"enum": list(EVENT_TYPE_NAMES)},
    )
    at: str
    step: str | None = None
    attempt: int | None = None
    data: Recorded[JSONObject | Marker] = Field(
        description="the event's data as recorded; its fields depend on the event's type"
    )

    def plain(self) -> JSONObject:
        """Without step and attempt when the event has none (the HTTP API shows them as null)."""
        return self.model_dump(exclude_unset=True)


class StartResult(View):
    run_id: str
    created: bool = Field(description="False when the start key returned an existing run")


class CancelResult(View):
    run_id: str
    status: RunStatus
    accepted: bool = Field(description="False when the run was already cancelling (nothing new recorded)")


class RetryResult(View):
    run_id: str
    step: str
    status: RunStatus
    attempt: int = Field(description="the step's attempts so far, the new one included")


class DeadLetter(View):
    """A run waiting in the dead-letter state: no worker took its task in time."""

    run_id: str
    step: str
    reason: str
    since: str
    definition: DefinitionRef


class VerifyResult(View):
    """A run's history replayed: its snapshot, sequence numbers and hash chain compared."""

    run_id: str
    events: int
    ok: bool
    problems: list[str]


class TaskView(View):
    """A leased task, as an HTTP worker receives it."""

    task_id: str
    run_id: str
    step: str
    attempt: int
    kind: TaskKind
    activity: str
    input: TenantJson
    idempotency_key: str
    definition: str
    version: int
    delivery: str
    fencing_token: int
    deadline: str
    tenant: str = Field(default="", description="the tenant whose run this task belongs to (the key's)")
    traceparent: str = Field(
        description="W3C traceparent of this attempt's span: send it as the parent of the activity's own "
        "spans (e.g. as the `traceparent` header of the downstream calls it makes)"
    )

    @classmethod
    def of(cls, lease: TaskLease) -> TaskView:
        return cls(
            task_id=lease.task_id,
            run_id=lease.run_id,
            step=lease.step,
            attempt=lease.attempt,
            kind=cast(TaskKind, lease.kind),
            activity=lease.activity,
            input=lease.input,
            idempotency_key=lease.idempotency_key,
            definition=lease.definition,
            version=lease.version,
            delivery=lease.delivery,
            fencing_token=lease.fencing,
            deadline=lease.deadline.isoformat(),
            tenant=lease.tenant,
            traceparent=lease.traceparent,
        )
