"""Events: the facts of a run, append-only, JSON-encoded with a schema version, hash-chained."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from .canonical import canonical_json

__all__ = ["AUDIT_ONLY", "EVENT_TYPES", "KEEPS_PROPOSAL", "SCHEMA_VERSION", "Event", "chain_hash"]

SCHEMA_VERSION = 1

EVENT_TYPES = frozenset(
    {
        "RunStarted",
        "ActivityScheduled",
        "CompensationScheduled",
        "ActivityStarted",
        "ActivitySucceeded",
        "ActivityFailed",
        "ActivityTimedOut",
        "ActivityCancelled",
        "ResultIgnored",
        "ChoiceEvaluated",
        "TimerScheduled",
        "TimerFired",
        "TimerCancelled",
        "StepFailed",
        "NeedsAttention",
        "CancelRequested",
        "CompensationStarted",
        "RunCompleted",
        "RunFailed",
        "RunCancelled",
        "ApprovalRequested",
        "ApprovalLinkIssued",
        "ApprovalDecisionRecorded",
        "ApprovalGranted",
        "ApprovalRejected",
        "ApprovalTimedOut",
        "ApprovalCancelled",
        "ApproverReplaced",
        "ApprovalLinkRevoked",
        "ActivityDeadLettered",
        "StepRetried",
        "RunPaused",
        "RunResumed",
        "TransitionDeferred",
        "StepSkipped",
        "InputEdited",
        "StepResolved",
        "WorkflowMigrated",
        "RepairProposed",
        "RepairConfirmed",
        "RepairRejected",
    }
)

# Events that record evidence without changing what the run does next.
AUDIT_ONLY = frozenset({"ResultIgnored", "ApprovalLinkIssued", "ApprovalLinkRevoked"})
# Events after which an open four-eyes proposal still describes the run (anything else makes it stale).
KEEPS_PROPOSAL = AUDIT_ONLY | {"RepairProposed", "RepairRejected"}


@dataclass(frozen=True)
class Event:
    """One fact. `seq` is assigned when it is appended (1-based, contiguous per run)."""

    type: str
    at: str
    data: dict[str, Any] = field(default_factory=dict)
    seq: int = 0
    v: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "type": self.type, "at": self.at, "v": self.v, "data": self.data}

    @staticmethod
    def from_json(obj: dict[str, Any]) -> Event:
        return Event(type=obj["type"], at=obj["at"], data=obj["data"], seq=obj["seq"], v=obj.get("v", 1))


def chain_hash(previous: str, run_id: str, event: Event) -> str:
    """sha256 over the previous hash and this event: editing or removing any event breaks the chain."""
    body = canonical_json({"run": run_id, **event.to_json()})
    return hashlib.sha256((previous + "\n" + body).encode()).hexdigest()
