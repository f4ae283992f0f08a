"""Events: the facts of a run, append-only, hash-chained. One frozen, typed record per kind of fact.

The records are grouped by what they are about, one module each: the run and its instant steps (run.py),
activity attempts (attempts.py), durable timers (timers.py), approvals (approvals.py) and an operator's
repairs (repairs.py); each module also names its group as a union (`RunEvent`, ...), which `evolve`
dispatches on. union.py joins them into `EventData`, the tagged union of every record; codec.py holds the
envelope `Event` and the JSON codec, the only code that sees the stored form (its docstring gives the
rules). Everything is imported from here: `from lockstep.core.events import Event, RunStarted`.
"""

from __future__ import annotations

from msgspec import UNSET, UnsetType

from .approvals import (
    ApprovalCancelled,
    ApprovalDecisionRecorded,
    ApprovalEvent,
    ApprovalGranted,
    ApprovalLinkIssued,
    ApprovalLinkRevoked,
    ApprovalRecord,
    ApprovalRejected,
    ApprovalRequested,
    ApprovalTimedOut,
    ApproverReplaced,
)
from .attempts import (
    ActivityCancelled,
    ActivityDeadLettered,
    ActivityFailed,
    ActivityScheduled,
    ActivityStarted,
    ActivitySucceeded,
    ActivityTimedOut,
    AttemptEvent,
    AttemptRecord,
    CompensationScheduled,
    ResultIgnored,
)
from .codec import SCHEMA_VERSION, Event, chain_hash, chain_link, data_of
from .repairs import (
    InputEdited,
    RepairConfirmed,
    RepairEvent,
    RepairProposed,
    RepairRecord,
    RepairRejected,
    RunPaused,
    RunResumed,
    StepResolved,
    StepRetried,
    StepSkipped,
    TransitionDeferred,
    WorkflowMigrated,
)
from .run import (
    CancelRequested,
    ChoiceEvaluated,
    CompensationStarted,
    NeedsAttention,
    RunCancelled,
    RunCompleted,
    RunEvent,
    RunFailed,
    RunRecord,
    RunStarted,
    StepFailed,
)
from .timers import TimerCancelled, TimerEvent, TimerFired, TimerRecord, TimerScheduled
from .union import AUDIT_ONLY, EVENT_TYPES, KEEPS_PROPOSAL, RECORDS, EventData

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
    "ApprovalEvent",
    "ApprovalGranted",
    "ApprovalLinkIssued",
    "ApprovalLinkRevoked",
    "ApprovalRecord",
    "ApprovalRejected",
    "ApprovalRequested",
    "ApprovalTimedOut",
    "ApproverReplaced",
    "AttemptEvent",
    "AttemptRecord",
    "CancelRequested",
    "ChoiceEvaluated",
    "CompensationScheduled",
    "CompensationStarted",
    "Event",
    "EventData",
    "InputEdited",
    "NeedsAttention",
    "RepairConfirmed",
    "RepairEvent",
    "RepairProposed",
    "RepairRecord",
    "RepairRejected",
    "ResultIgnored",
    "RunCancelled",
    "RunCompleted",
    "RunEvent",
    "RunFailed",
    "RunPaused",
    "RunRecord",
    "RunResumed",
    "RunStarted",
    "StepFailed",
    "StepResolved",
    "StepRetried",
    "StepSkipped",
    "TimerCancelled",
    "TimerEvent",
    "TimerFired",
    "TimerRecord",
    "TimerScheduled",
    "TransitionDeferred",
    "UnsetType",
    "WorkflowMigrated",
    "chain_hash",
    "chain_link",
    "data_of",
]
