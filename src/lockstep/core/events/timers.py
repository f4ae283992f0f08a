"""The events of a durable timer (a wait step, a retry's delay, an approval's timeout, the run's deadline):
armed with a generation, then fired or cancelled."""

from __future__ import annotations

from typing import ClassVar, TypeAlias

from msgspec import UNSET, UnsetType

from .record import Record

__all__ = [
    "TimerCancelled",
    "TimerEvent",
    "TimerFired",
    "TimerRecord",
    "TimerScheduled",
]


class TimerRecord(Record, frozen=True, kw_only=True):
    """The base of the records of a durable timer; `TimerEvent` is their union."""


class TimerScheduled(TimerRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "TimerScheduled"
    key: str
    generation: int
    kind: str  # "wait" | "retry" | "approval" | "deadline"
    step: str
    fire_at: str
    # Written only for retry timers: the attempt they start and whether it is a compensation's.
    attempt: int | UnsetType = UNSET
    compensation: bool | UnsetType = UNSET


class TimerFired(TimerRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "TimerFired"
    key: str
    generation: int
    kind: str
    step: str
    fire_at: str | UnsetType = UNSET  # not written by the first builds


class TimerCancelled(TimerRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "TimerCancelled"
    key: str
    generation: int
    kind: str
    step: str
    reason: str


TimerEvent: TypeAlias = TimerScheduled | TimerFired | TimerCancelled
