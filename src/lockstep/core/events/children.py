"""The events of a `run` step on its parent: a child run is requested (the outbox starts it in a
transaction of its own), its cancellation is asked for (the parent is being cancelled), and its end is
reported back (the child's terminal event, carried over by the outbox as a command on the parent).

Each says what it means: the child's id, definition, pinned version (or none: the latest at its start),
the rendered input, the start key that keeps a retried start from starting two children, and the depth of
nesting; the end, the child's status and output or error."""

from __future__ import annotations

from typing import ClassVar, TypeAlias

from .record import JSON, Doc, Record

__all__ = [
    "ChildEvent",
    "ChildRecord",
    "ChildRunCancelRequested",
    "ChildRunEnded",
    "ChildRunRequested",
]


class ChildRecord(Record, frozen=True, kw_only=True):
    """The base of the records of a parent's child runs; `ChildEvent` is their union."""


class ChildRunRequested(ChildRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ChildRunRequested"
    step: str
    child_run_id: str
    definition: str
    version: int | None  # None: the latest version when the child starts
    input: JSON
    start_key: str  # "<parent run>:<step>" (":<n>" on the step's n-th visit): one child per visit
    depth: int  # 1 for a child of a top-level run


class ChildRunCancelRequested(ChildRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ChildRunCancelRequested"
    step: str
    child_run_id: str
    reason: str


class ChildRunEnded(ChildRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ChildRunEnded"
    step: str
    child_run_id: str
    status: str  # "completed" | "failed" | "cancelled" (also: it could not be started)
    output: JSON = None
    error: Doc | None = None


ChildEvent: TypeAlias = ChildRunRequested | ChildRunCancelRequested | ChildRunEnded
