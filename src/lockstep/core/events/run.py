"""The events of a run as a whole and of its instant steps: started, a choice taken, a step failed, an
operator needed, cancellation asked, compensation begun, and the three ends (completed, failed, cancelled)."""

from __future__ import annotations

from typing import ClassVar, TypeAlias

from msgspec import UNSET, UnsetType

from .record import JSON, Doc, Record

__all__ = [
    "CancelRequested",
    "ChoiceEvaluated",
    "CompensationStarted",
    "NeedsAttention",
    "RunCancelled",
    "RunCompleted",
    "RunEvent",
    "RunFailed",
    "RunRecord",
    "RunStarted",
    "StepFailed",
]


class RunRecord(Record, frozen=True, kw_only=True):
    """The base of the records of a run as a whole or one of its instant steps; `RunEvent` is their union."""


class RunStarted(RunRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "RunStarted"
    run_id: str
    tenant: str
    definition: Doc  # {name, version, digest}
    input: JSON
    start_key: str | None
    actor: str | None
    steps: list[str]
    # The run's trace (written only when the starter traced or was given a caller's context): the W3C
    # traceparent of the run's root span, and the caller's span id when the run joined its trace.
    trace: str | UnsetType = UNSET
    trace_parent: str | UnsetType = UNSET
    # Written only for a child run (a parent's `run` step): {run_id, step, depth} of its parent.
    parent: Doc | UnsetType = UNSET


class ChoiceEvaluated(RunRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ChoiceEvaluated"
    step: str
    branch: int | str  # the index of the branch taken, or "else"
    condition: str | None
    next: str


class StepFailed(RunRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "StepFailed"
    step: str
    error: Doc


class NeedsAttention(RunRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "NeedsAttention"
    step: str
    code: str
    reason: str


class CancelRequested(RunRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "CancelRequested"
    reason: str
    actor: str | None


class CompensationStarted(RunRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "CompensationStarted"
    cause: str  # "failed" | "cancelled"
    error: Doc | None
    steps: list[str]


class RunCompleted(RunRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "RunCompleted"
    output: JSON


class RunFailed(RunRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "RunFailed"
    error: Doc | None


class RunCancelled(RunRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "RunCancelled"
    reason: str | None


RunEvent: TypeAlias = (
    RunStarted
    | ChoiceEvaluated
    | StepFailed
    | NeedsAttention
    | CancelRequested
    | CompensationStarted
    | RunCompleted
    | RunFailed
    | RunCancelled
)
