"""Events: the facts of a run, append-only, hash-chained. One frozen, typed record per kind of fact.

An `Event` is the envelope the store keeps in one row (seq, type, at, v) around its `data`: one of the
records below, a tagged union (the tag is the class-level `type`, stored in its own column). The JSON
codec at the bottom of this module is the only place that sees the stored form. Its rules:

- A record's fields are the keys of its stored `data` object, declared in the order the engine writes
  them (so the stored text stays what it was). A field that older builds did not write, or that is
  written only in some cases, defaults to `UNSET` and is then absent from the stored object again.
- The hash chain is computed over the stored form (`Event.to_json`, canonical JSON), so reading and
  writing an event must give back exactly the stored object. A stored object that does not fit its
  record (a field this build does not know or lacks, a value of another type) is still read; the event
  then keeps the object as read (`stored`) and is hashed and written from it, never from a guess.
- `v` is the schema version of the stored form. Every version so far is 1; one that this build does not
  know (written by a newer lockstep) is refused with a message instead of being misread.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, ClassVar, TypeAlias, get_args

import msgspec
from msgspec import UNSET, UnsetType

from .canonical import canonical_json, parse_json

__all__ = [
    "AUDIT_ONLY",
    "EVENT_TYPES",
    "KEEPS_PROPOSAL",
    "RECORDS",
    "SCHEMA_VERSION",
    "UNSET",
    "ActivityCancelled",
    "ActivityDeadLettered",
    "ActivityFailed",
    "ActivityScheduled",
    "ActivityStarted",
    "ActivitySucceeded",
    "ActivityTimedOut",
    "ApprovalCancelled",
    "ApprovalDecisionRecorded",
    "ApprovalGranted",
    "ApprovalLinkIssued",
    "ApprovalLinkRevoked",
    "ApprovalRejected",
    "ApprovalRequested",
    "ApprovalTimedOut",
    "ApproverReplaced",
    "CancelRequested",
    "ChoiceEvaluated",
    "CompensationScheduled",
    "CompensationStarted",
    "Event",
    "EventData",
    "InputEdited",
    "NeedsAttention",
    "RepairConfirmed",
    "RepairProposed",
    "RepairRejected",
    "ResultIgnored",
    "RunCancelled",
    "RunCompleted",
    "RunFailed",
    "RunPaused",
    "RunResumed",
    "RunStarted",
    "StepFailed",
    "StepResolved",
    "StepRetried",
    "StepSkipped",
    "TimerCancelled",
    "TimerFired",
    "TimerScheduled",
    "TransitionDeferred",
    "UnsetType",
    "WorkflowMigrated",
    "chain_hash",
    "chain_link",
    "data_of",
]

SCHEMA_VERSION = 1

# What the records hold that is arbitrary JSON: run inputs and outputs, activity payloads, and the
# nested documents (errors, policies, definitions, deferred transitions) that evolve copies into the
# state as they are.
JSON: TypeAlias = Any
Doc: TypeAlias = dict[str, Any]


# gc=False (here and on Event): records and envelopes hold only JSON values, which never refer back to
# them, so they cannot be part of a reference cycle; untracked, the thousands a worker or scheduler
# creates per second do not trigger or lengthen the cyclic collector's passes.
class _Record(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    type: ClassVar[str]


# --- a run and its steps -----------------------------------------------------------------------------


class RunStarted(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "RunStarted"
    run_id: str
    tenant: str
    definition: Doc  # {name, version, digest}
    input: JSON
    start_key: str | None
    actor: str | None
    steps: list[str]


class ChoiceEvaluated(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "ChoiceEvaluated"
    step: str
    branch: int | str  # the index of the branch taken, or "else"
    condition: str | None
    next: str


class StepFailed(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "StepFailed"
    step: str
    error: Doc


class NeedsAttention(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "NeedsAttention"
    step: str
    code: str
    reason: str


class CancelRequested(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "CancelRequested"
    reason: str
    actor: str | None


class CompensationStarted(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "CompensationStarted"
    cause: str  # "failed" | "cancelled"
    error: Doc | None
    steps: list[str]


class RunCompleted(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "RunCompleted"
    output: JSON


class RunFailed(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "RunFailed"
    error: Doc | None


class RunCancelled(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "RunCancelled"
    reason: str | None


# --- activity attempts -------------------------------------------------------------------------------


class ActivityScheduled(_Record, frozen=True, kw_only=True):
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


class CompensationScheduled(_Record, frozen=True, kw_only=True):
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


class ActivityStarted(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "ActivityStarted"
    step: str
    task_id: str
    attempt: int
    fencing: int
    worker: str
    deadline: str
    compensation: bool


class ActivitySucceeded(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "ActivitySucceeded"
    step: str
    task_id: str
    attempt: int
    fencing: int
    output: JSON
    compensation: bool
    compensable: bool


class ActivityFailed(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "ActivityFailed"
    step: str
    task_id: str
    attempt: int
    activity: str | UnsetType = UNSET  # not written by the first builds
    error: Doc
    will_retry: bool
    outcome_unknown: bool
    compensation: bool


class ActivityTimedOut(_Record, frozen=True, kw_only=True):
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


class ActivityCancelled(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "ActivityCancelled"
    step: str
    task_id: str
    attempt: int
    reason: str
    # Written only when a pause withdraws the attempt, to schedule it again on resume.
    rescheduled: bool | UnsetType = UNSET
    compensation: bool | UnsetType = UNSET


class ActivityDeadLettered(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "ActivityDeadLettered"
    step: str
    task_id: str
    attempt: int
    activity: str
    reason: str
    compensation: bool


class ResultIgnored(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "ResultIgnored"
    step: str
    task_id: str
    attempt: int
    fencing: int
    reason: str
    result: Doc  # what the stale report said: {outcome, output} or {outcome, code, message}


# --- timers ------------------------------------------------------------------------------------------


class TimerScheduled(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "TimerScheduled"
    key: str
    generation: int
    kind: str  # "wait" | "retry" | "approval" | "deadline"
    step: str
    fire_at: str
    # Written only for retry timers: the attempt they start and whether it is a compensation's.
    attempt: int | UnsetType = UNSET
    compensation: bool | UnsetType = UNSET


class TimerFired(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "TimerFired"
    key: str
    generation: int
    kind: str
    step: str
    fire_at: str | UnsetType = UNSET  # not written by the first builds


class TimerCancelled(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "TimerCancelled"
    key: str
    generation: int
    kind: str
    step: str
    reason: str


# --- approvals ---------------------------------------------------------------------------------------


class ApprovalRequested(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "ApprovalRequested"
    step: str
    request_id: str
    policy: Doc  # {users, groups, quorum, reject_quorum, allow_initiator, on_reject, on_timeout}
    policy_digest: str
    details: str
    expires_at: str
    initiator: str | None


class ApprovalLinkIssued(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "ApprovalLinkIssued"
    step: str
    request_id: str
    approver: str
    link_id: str
    expires_at: str
    by: str | None


class ApprovalDecisionRecorded(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "ApprovalDecisionRecorded"
    step: str
    request_id: str
    approver: str
    decision: str  # "approve" | "reject"
    comment: str | None
    roles: list[str]
    groups: list[str]
    link_id: str | None


class ApprovalGranted(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "ApprovalGranted"
    step: str
    request_id: str
    approvers: list[str]


class ApprovalRejected(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "ApprovalRejected"
    step: str
    request_id: str
    by: list[str]
    reason: str


class ApprovalTimedOut(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "ApprovalTimedOut"
    step: str
    request_id: str
    expires_at: str


class ApprovalCancelled(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "ApprovalCancelled"
    step: str
    request_id: str
    reason: str


class ApproverReplaced(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "ApproverReplaced"
    step: str
    request_id: str
    old: str
    new: str
    reason: str
    actor: str | None


class ApprovalLinkRevoked(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "ApprovalLinkRevoked"
    step: str
    request_id: str
    approver: str
    link_id: str
    reason: str
    actor: str | None


# --- operators ---------------------------------------------------------------------------------------


class StepRetried(_Record, frozen=True, kw_only=True):
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


class RunPaused(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "RunPaused"
    reason: str
    actor: str | None


class RunResumed(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "RunResumed"
    reason: str
    actor: str | None
    deferred: list[Doc]  # the transitions carried out now: {action, args}


class TransitionDeferred(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "TransitionDeferred"
    action: str  # "enter" | "schedule_action" | "next_compensation" | "fail"
    args: Doc


class StepSkipped(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "StepSkipped"
    step: str
    output: JSON
    reason: str
    actor: str | None
    before: Doc  # {status, attempts, output} of the step before the skip
    superseded: list[Doc] | UnsetType = UNSET


class InputEdited(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "InputEdited"
    old: JSON
    new: JSON
    reason: str
    actor: str | None


class StepResolved(_Record, frozen=True, kw_only=True):
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


class WorkflowMigrated(_Record, frozen=True, kw_only=True):
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


class RepairProposed(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "RepairProposed"
    proposal_id: str
    kind: str  # "skip" | "resolve" | "migrate"
    command: Doc
    reason: str
    actor: str
    effect: list[str]  # the event types the command would append now


class RepairConfirmed(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "RepairConfirmed"
    proposal_id: str
    kind: str
    by: str
    reason: str
    proposed_by: str


class RepairRejected(_Record, frozen=True, kw_only=True):
    type: ClassVar[str] = "RepairRejected"
    proposal_id: str
    kind: str
    by: str
    reason: str
    proposed_by: str
    withdrawn: bool


EventData: TypeAlias = (
    RunStarted
    | ActivityScheduled
    | CompensationScheduled
    | ActivityStarted
    | ActivitySucceeded
    | ActivityFailed
    | ActivityTimedOut
    | ActivityCancelled
    | ResultIgnored
    | ChoiceEvaluated
    | TimerScheduled
    | TimerFired
    | TimerCancelled
    | StepFailed
    | NeedsAttention
    | CancelRequested
    | CompensationStarted
    | RunCompleted
    | RunFailed
    | RunCancelled
    | ApprovalRequested
    | ApprovalLinkIssued
    | ApprovalDecisionRecorded
    | ApprovalGranted
    | ApprovalRejected
    | ApprovalTimedOut
    | ApprovalCancelled
    | ApproverReplaced
    | ApprovalLinkRevoked
    | ActivityDeadLettered
    | StepRetried
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

RECORDS: dict[str, type[EventData]] = {cls.type: cls for cls in get_args(EventData)}
EVENT_TYPES = frozenset(RECORDS)

# Events that record evidence without changing what the run does next.
AUDIT_ONLY = frozenset(c.type for c in (ResultIgnored, ApprovalLinkIssued, ApprovalLinkRevoked))
# Events after which an open four-eyes proposal still describes the run (anything else makes it stale).
KEEPS_PROPOSAL = AUDIT_ONLY | {RepairProposed.type, RepairRejected.type}


class Event(msgspec.Struct, frozen=True, gc=False):
    """One fact in its envelope. `seq` is assigned when it is appended (1-based, contiguous per run).

    `stored` is empty but for an event read from storage whose data does not fit its record (see the
    module's docstring): the data exactly as it was stored, which then stands for the event's JSON."""

    data: EventData
    at: str
    seq: int = 0
    v: int = SCHEMA_VERSION
    stored: Doc | None = None

    @property
    def type(self) -> str:
        return self.data.type

    def data_json(self) -> Doc:
        """The `data` object as stored (keys in writing order; nested values shared, not copied)."""
        if self.stored is not None:
            return self.stored
        out = msgspec.structs.asdict(self.data)
        for name in _MAYBE_ABSENT[type(self.data)]:
            if out[name] is UNSET:
                del out[name]
        return out

    def to_json(self) -> Doc:
        return {"seq": self.seq, "type": self.type, "at": self.at, "v": self.v, "data": self.data_json()}

    @staticmethod
    def from_json(obj: Mapping[str, Any]) -> Event:
        """The inverse of to_json (a missing `v` is version 1, the only one before `v` was written)."""
        v = obj.get("v", 1)
        cls = _record(obj["type"], v)
        data = obj["data"]
        try:
            return Event(msgspec.convert(data, cls, strict=True), obj["at"], obj["seq"], v)
        except msgspec.ValidationError:
            return Event(_fitted(cls, data), obj["at"], obj["seq"], v, stored=data)

    @staticmethod
    def from_row(seq: int, type_: str, at: str, v: int, data: str | bytes) -> Event:
        """An event from its stored columns (the store's read path): one typed pass over the JSON."""
        cls = _record(type_, v)
        try:
            return Event(_DECODERS[cls].decode(data), at, seq, v)
        except msgspec.ValidationError:
            raw = parse_json(data)
            return Event(_fitted(cls, raw), at, seq, v, stored=raw)


_MAYBE_ABSENT = {
    cls: tuple(f.name for f in msgspec.structs.fields(cls) if f.default is UNSET) for cls in RECORDS.values()
}
_DECODERS = {cls: msgspec.json.Decoder(cls) for cls in RECORDS.values()}


def _record(type_: str, v: int) -> type[EventData]:
    if not isinstance(v, int) or not 1 <= v <= SCHEMA_VERSION:
        raise ValueError(
            f"{type_} event of schema version {v!r}: this lockstep reads versions 1..{SCHEMA_VERSION}"
            " (was it written by a newer lockstep?)"
        )
    cls = RECORDS.get(type_)
    if cls is None:
        raise ValueError(f"unknown event type {type_!r}")
    return cls


def _fitted(cls: type[EventData], data: object) -> EventData:
    """A record from data that does not fit it: the fields it has, unchecked; the others UNSET."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{cls.type} event data is not a JSON object")
    return cls(**{f: data.get(f, UNSET) for f in cls.__struct_fields__})


def data_of(type_: str, data: Mapping[str, Any], v: int = SCHEMA_VERSION) -> EventData:
    """The record of one event's data as JSON (for what reads events through a view, as the CLI does)."""
    return Event.from_json({"type": type_, "data": data, "at": "", "seq": 0, "v": v}).data


def chain_link(previous: str, run_id: str, event: Mapping[str, Any]) -> str:
    """sha256 over the previous hash and one event's stored form (to_json): editing or removing any event
    breaks the chain."""
    body = canonical_json({"run": run_id, **event})
    return hashlib.sha256((previous + "\n" + body).encode()).hexdigest()


def chain_hash(previous: str, run_id: str, event: Event) -> str:
    return chain_link(previous, run_id, event.to_json())
