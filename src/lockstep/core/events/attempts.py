"""The events of one activity attempt, an action's or a compensation's: scheduled (a task is created),
started by a worker (leased with a fencing token), and how it ended: succeeded, failed, timed out,
withdrawn, dead-lettered; plus a stale report that was recorded and ignored."""

from __future__ import annotations

from typing import ClassVar, TypeAlias

from msgspec import UNSET, UnsetType

from .record import JSON, Doc, Record

__all__ = [
    "ActivityCancelled",
    "ActivityDeadLettered",
    "ActivityFailed",
    "ActivityScheduled",
    "ActivityStarted",
    "ActivitySucceeded",
    "ActivityTimedOut",
    "AttemptEvent",
    "AttemptRecord",
    "CompensationScheduled",
    "ResultIgnored",
]


class AttemptRecord(Record, frozen=True, kw_only=True):
    """The base of the records of an activity attempt; `AttemptEvent` is their union."""


class ActivityScheduled(AttemptRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ActivityScheduled"
    step: str
    attempt: int
    task_id: str
    activity: str
    input: JSON
    idempotency_key: str
    delivery: str
    timeout_ms: int
    queue: str | None
    priority: int | UnsetType = UNSET  # not written before task priorities existed
    max_attempts: int


class CompensationScheduled(AttemptRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "CompensationScheduled"
    step: str
    attempt: int
    compensation: bool
    task_id: str
    activity: str
    input: JSON
    idempotency_key: str
    delivery: str
    timeout_ms: int
    queue: str | None
    max_attempts: int


class ActivityStarted(AttemptRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ActivityStarted"
    step: str
    task_id: str
    attempt: int
    fencing: int
    worker: str
    deadline: str
    compensation: bool


class ActivitySucceeded(AttemptRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ActivitySucceeded"
    step: str
    task_id: str
    attempt: int
    fencing: int
    output: JSON
    compensation: bool
    compensable: bool


class ActivityFailed(AttemptRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ActivityFailed"
    step: str
    task_id: str
    attempt: int
    activity: str | UnsetType = UNSET  # not written by the first builds
    error: Doc
    will_retry: bool
    outcome_unknown: bool
    compensation: bool


class ActivityTimedOut(AttemptRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ActivityTimedOut"
    step: str
    task_id: str
    attempt: int
    activity: str | UnsetType = UNSET  # not written by the first builds
    error: Doc
    will_retry: bool
    outcome_unknown: bool
    compensation: bool
    reason: str


class ActivityCancelled(AttemptRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ActivityCancelled"
    step: str
    task_id: str
    attempt: int
    reason: str
    # Written only when a pause withdraws the attempt, to schedule it again on resume.
    rescheduled: bool | UnsetType = UNSET
    compensation: bool | UnsetType = UNSET


class ActivityDeadLettered(AttemptRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ActivityDeadLettered"
    step: str
    task_id: str
    attempt: int
    activity: str
    reason: str
    compensation: bool


class ResultIgnored(AttemptRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ResultIgnored"
    step: str
    task_id: str
    attempt: int
    fencing: int
    reason: str
    result: Doc  # what the stale report said: {outcome, output} or {outcome, code, message}


AttemptEvent: TypeAlias = (
    ActivityScheduled
    | CompensationScheduled
    | ActivityStarted
    | ActivitySucceeded
    | ActivityFailed
    | ActivityTimedOut
    | ActivityCancelled
    | ActivityDeadLettered
    | ResultIgnored
)
