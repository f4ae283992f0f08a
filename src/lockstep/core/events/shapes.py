"""The events of parallel and for-each steps: a step opens its lanes (a branch each, or an item each, see
core/paths.py), each lane starts and finishes, the join is decided once (the lanes still open are then
cancelled), and the step ends with its output (a failure ends it with StepFailed).

Each event says what it means: the lanes it opens, the join rule and who may fail without failing the
step, the items a for-each runs over, a lane's outcome and output, the join's outcome and the lanes it
cancels, so `evolve` folds them without the definition."""

from __future__ import annotations

from typing import ClassVar, TypeAlias

from msgspec import UNSET, UnsetType

from .record import JSON, Doc, Record

__all__ = [
    "ForEachStarted",
    "JoinDecided",
    "LaneFinished",
    "LaneStarted",
    "ParallelStarted",
    "ShapeEvent",
    "ShapeRecord",
    "StepJoined",
]


class ShapeRecord(Record, frozen=True, kw_only=True):
    """The base of the records of parallel and for-each steps; `ShapeEvent` is their union."""


class ParallelStarted(ShapeRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ParallelStarted"
    step: str  # the parallel step's key
    lanes: list[str]  # one per branch, in the definition's order
    join: str  # "all" | "any" | "n_of"
    need: int  # successes that complete the step
    tolerant: list[str]  # lanes whose failure does not fail the step (on_failure: continue)


class ForEachStarted(ShapeRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "ForEachStarted"
    step: str
    items: list[JSON]  # what the items template gave
    concurrency: int
    join: str
    need: int
    tolerant: bool  # on_failure: continue (for every item)


class LaneStarted(ShapeRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "LaneStarted"
    step: str  # the shape step's key
    lane: str
    index: int  # the branch's position, or the item's index


class LaneFinished(ShapeRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "LaneFinished"
    step: str
    lane: str
    outcome: str  # "succeeded" | "failed" | "cancelled"
    output: JSON = None
    error: Doc | None = None
    reason: str | UnsetType = UNSET  # why a lane was cancelled


class JoinDecided(ShapeRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "JoinDecided"
    step: str
    outcome: str  # "succeeded" | "failed"
    reason: str
    cancelling: list[str]  # the lanes still open, cancelled now (in-flight attempts report first)
    error: Doc | None = None


class StepJoined(ShapeRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "StepJoined"
    step: str
    output: JSON  # parallel: {branch id: output}; for-each: [output per item]
    succeeded: int
    failed: int
    cancelled: int


ShapeEvent: TypeAlias = (
    ParallelStarted | ForEachStarted | LaneStarted | LaneFinished | JoinDecided | StepJoined
)
