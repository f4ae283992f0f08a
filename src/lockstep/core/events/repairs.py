"""The events of an operator's repairs: retry a step, pause and resume (with the transitions a pause held
back), skip or resolve a step, edit the input, migrate to another version, and the four-eyes proposals
that a second operator confirms or rejects."""

from __future__ import annotations

from typing import ClassVar, TypeAlias

from msgspec import UNSET, UnsetType

from .record import JSON, Doc, Record

__all__ = [
    "InputEdited",
    "RepairConfirmed",
    "RepairEvent",
    "RepairProposed",
    "RepairRecord",
    "RepairRejected",
    "RunPaused",
    "RunResumed",
    "StepResolved",
    "StepRetried",
    "StepSkipped",
    "TransitionDeferred",
    "WorkflowMigrated",
]


class RepairRecord(Record, frozen=True, kw_only=True):
    """The base of the records of an operator's repair; `RepairEvent` is their union."""


class StepRetried(RepairRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "StepRetried"
    step: str
    reason: str
    actor: str | None
    new_key: bool
    code: str
    attempt: int
    compensation: bool
    # The transitions a pause had held back, replaced by this repair (not written before pauses).
    superseded: list[Doc] | UnsetType = UNSET


class RunPaused(RepairRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "RunPaused"
    reason: str
    actor: str | None


class RunResumed(RepairRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "RunResumed"
    reason: str
    actor: str | None
    deferred: list[Doc]  # the transitions carried out now: {action, args}


class TransitionDeferred(RepairRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "TransitionDeferred"
    action: str  # "enter" | "schedule_action" | "next_compensation" | "fail"
    args: Doc


class StepSkipped(RepairRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "StepSkipped"
    step: str
    output: JSON
    reason: str
    actor: str | None
    before: Doc  # {status, attempts, output} of the step before the skip
    superseded: list[Doc] | UnsetType = UNSET


class InputEdited(RepairRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "InputEdited"
    old: JSON
    new: JSON
    reason: str
    actor: str | None


class StepResolved(RepairRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "StepResolved"
    step: str
    outcome: str  # "succeeded" | "failed"
    output: JSON
    reason: str
    actor: str | None
    code: str
    compensation: bool
    compensable: bool
    superseded: list[Doc] | UnsetType = UNSET


class WorkflowMigrated(RepairRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "WorkflowMigrated"
    previous: Doc
    superseded: list[Doc] | UnsetType = UNSET
    definition: Doc
    mapping: dict[str, str]
    steps: list[str]
    carried: list[str]
    steps_added: list[str]
    steps_removed: list[str]
    reason: str
    actor: str | None
    # A migration that needed approval: the request that granted it and its decisions (not written
    # otherwise, so earlier migrations are stored as they always were).
    request_id: str | UnsetType = UNSET
    decisions: list[Doc] | UnsetType = UNSET


class RepairProposed(RepairRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "RepairProposed"
    proposal_id: str
    kind: str  # "skip" | "resolve" | "migrate"
    command: Doc
    reason: str
    actor: str
    effect: list[str]  # the event types the command would append now


class RepairConfirmed(RepairRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "RepairConfirmed"
    proposal_id: str
    kind: str
    by: str
    reason: str
    proposed_by: str


class RepairRejected(RepairRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "RepairRejected"
    proposal_id: str
    kind: str
    by: str
    reason: str
    proposed_by: str
    withdrawn: bool


RepairEvent: TypeAlias = (
    StepRetried
    | RunPaused
    | RunResumed
    | TransitionDeferred
    | StepSkipped
    | InputEdited
    | StepResolved
    | WorkflowMigrated
    | RepairProposed
    | RepairConfirmed
    | RepairRejected
)
