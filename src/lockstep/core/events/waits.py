"""The events of a `wait_event` step: the wait starts (the event's name, the rendered correlation key,
its expiry and generation, whether a callback may be minted for it), a callback is issued for it (only
the sha256 of the token: the token itself never reaches the history), the event is received (its id,
payload and the way it came), or the wait times out or is cancelled with its run or lane.

Each says everything it means: a history replays without the events inbox or the waits index."""

from __future__ import annotations

from typing import ClassVar, TypeAlias

from .record import JSON, Record

__all__ = [
    "CallbackIssued",
    "EventReceived",
    "EventWaitCancelled",
    "EventWaitEvent",
    "EventWaitRecord",
    "EventWaitStarted",
    "EventWaitTimedOut",
]


class EventWaitRecord(Record, frozen=True, kw_only=True):
    """The base of the records of a `wait_event` step; `EventWaitEvent` is their union."""


class EventWaitStarted(EventWaitRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "EventWaitStarted"
    step: str
    name: str
    key: str
    expires_at: str
    generation: int  # the seq of this event: a callback or delivery names the wait it was meant for
    callback: bool = False
    integration: str | None = None  # the callback's body is signed with this integration's secret


class CallbackIssued(EventWaitRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "CallbackIssued"
    step: str
    generation: int
    callback_id: str
    token_hash: str  # sha256 hex of the 256-bit token; the token is shown once, never stored
    expires_at: str
    by: str


class EventReceived(EventWaitRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "EventReceived"
    step: str
    generation: int
    event_id: str
    name: str
    key: str
    payload: JSON
    via: str  # "api" (POST /v1/events, also a buffered event) | "callback"
    callback_id: str | None = None


class EventWaitTimedOut(EventWaitRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "EventWaitTimedOut"
    step: str
    name: str
    key: str
    expires_at: str


class EventWaitCancelled(EventWaitRecord, frozen=True, kw_only=True):
    type: ClassVar[str] = "EventWaitCancelled"
    step: str
    reason: str


EventWaitEvent: TypeAlias = (
    EventWaitStarted | CallbackIssued | EventReceived | EventWaitTimedOut | EventWaitCancelled
)
