"""What a batch of events asks of the outside world: outbox rows written in the same transaction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .events import Event

__all__ = ["CloseTask", "CloseTimer", "CreateTask", "CreateTimer", "Effect", "LeaseTask", "effects_of"]


@dataclass(frozen=True)
class CreateTask:
    task_id: str
    step: str
    attempt: int
    kind: str
    activity: str
    queue: str | None
    input: Any
    idempotency_key: str
    timeout_ms: int
    delivery: str


@dataclass(frozen=True)
class LeaseTask:
    task_id: str
    fencing: int
    worker: str
    deadline: str


@dataclass(frozen=True)
class CloseTask:
    task_id: str
    status: str  # "done" | "cancelled"


@dataclass(frozen=True)
class CreateTimer:
    key: str
    generation: int
    fire_at: str


@dataclass(frozen=True)
class CloseTimer:
    key: str
    generation: int
    status: str  # "fired" | "cancelled"


Effect = CreateTask | LeaseTask | CloseTask | CreateTimer | CloseTimer


def effects_of(events: list[Event]) -> list[Effect]:
    out: list[Effect] = []
    for e in events:
        d = e.data
        if e.type in ("ActivityScheduled", "CompensationScheduled"):
            out.append(
                CreateTask(
                    d["task_id"],
                    d["step"],
                    d["attempt"],
                    "compensation" if e.type == "CompensationScheduled" else "action",
                    d["activity"],
                    d.get("queue"),
                    d["input"],
                    d["idempotency_key"],
                    d["timeout_ms"],
                    d["delivery"],
                )
            )
        elif e.type == "ActivityStarted":
            out.append(LeaseTask(d["task_id"], d["fencing"], d["worker"], d["deadline"]))
        elif e.type in ("ActivitySucceeded", "ActivityFailed", "ActivityTimedOut"):
            out.append(CloseTask(d["task_id"], "done"))
        elif e.type == "ActivityCancelled":
            out.append(CloseTask(d["task_id"], "cancelled"))
        elif e.type == "TimerScheduled":
            out.append(CreateTimer(d["key"], d["generation"], d["fire_at"]))
        elif e.type == "TimerFired":
            out.append(CloseTimer(d["key"], d["generation"], "fired"))
        elif e.type == "TimerCancelled":
            out.append(CloseTimer(d["key"], d["generation"], "cancelled"))
    return out
