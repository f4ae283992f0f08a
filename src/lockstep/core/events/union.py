"""Every kind of event: the tagged union of the records (the tag is each record's class-level `type`), the
records by type name, and the kinds that only record evidence."""

from __future__ import annotations

from typing import TypeAlias, get_args

from .approvals import ApprovalEvent, ApprovalLinkIssued, ApprovalLinkRevoked
from .attempts import AttemptEvent, ResultIgnored
from .children import ChildEvent
from .repairs import RepairEvent, RepairProposed, RepairRejected
from .run import RunEvent
from .shapes import ShapeEvent
from .timers import TimerEvent
from .waits import EventWaitEvent

__all__ = ["AUDIT_ONLY", "EVENT_TYPES", "KEEPS_PROPOSAL", "RECORDS", "EventData"]

EventData: TypeAlias = (
    RunEvent
    | AttemptEvent
    | TimerEvent
    | ApprovalEvent
    | RepairEvent
    | ShapeEvent
    | ChildEvent
    | EventWaitEvent
)

RECORDS: dict[str, type[EventData]] = {cls.type: cls for cls in get_args(EventData)}
EVENT_TYPES = frozenset(RECORDS)

# Events that record evidence without changing what the run does next.
AUDIT_ONLY = frozenset(c.type for c in (ResultIgnored, ApprovalLinkIssued, ApprovalLinkRevoked))
# Events after which an open four-eyes proposal still describes the run (anything else makes it stale).
KEEPS_PROPOSAL = AUDIT_ONLY | {RepairProposed.type, RepairRejected.type}
