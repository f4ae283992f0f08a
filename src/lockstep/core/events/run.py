"""The events of a run as a whole and of its instant steps: started, a choice taken, a step failed, an
operator needed, cancellation asked, compensation begun, and the three ends (completed, failed, cancelled)."""

from __future__ import annotations

from typing import ClassVar, TypeAlias

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
    "RunStarted",
    "StepFailed",
]


class RunStarted(Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "RunStarted"
    run_id: str
    tenant: str
    definition: Doc  # {name, version, digest}
    input: JSON
    start_key: str | None
    actor: str | None
    steps: list[str]


class ChoiceEvaluated(Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "ChoiceEvaluated"
    step: str
    branch: int | str  # the index of the branch taken, or "else"
    condition: str | None
    next: str


class StepFailed(Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "StepFailed"
    step: str
    error: Doc


class NeedsAttention(Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "NeedsAttention"
    step: str
    code: str
    reason: str


class CancelRequested(Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "CancelRequested"
    reason: str
    actor: str | None


class CompensationStarted(Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "CompensationStarted"
    cause: str  # "failed" | "cancelled"
    error: Doc | None
    steps: list[str]


class RunCompleted(Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "RunCompleted"
    output: JSON


class RunFailed(Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "RunFailed"
    error: Doc | None


class RunCancelled(Record, frozen=True, kw_only=True):
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
