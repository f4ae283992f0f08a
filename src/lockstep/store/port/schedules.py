"""The schedules aggregate: durable schedule rows (fired by the scheduler like timers, partition-leased on
PostgreSQL) and the record of what became of their slots; implemented by sqltx/schedules.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["ScheduleRow", "SchedulesTx", "SlotRow"]


@dataclass(frozen=True)
class ScheduleRow:
    """One schedule as stored. `input` is the stored JSON (sensitive values as markers); `generation`
    grows by one with every change, and a change is written only over the generation it was made from."""

    id: str
    tenant: str
    name: str
    definition: str
    version: int | None
    cron: str
    timezone: str
    input: Any
    overlap: str
    catch_up: str
    catch_up_limit: int
    status: str
    paused_reason: str | None
    next_at: int
    generation: int
    last_slot: int | None
    last_run: str | None
    runs_started: int
    slots_skipped: int
    slots_missed: int
    created_at: str
    created_by: str | None
    updated_at: str
    updated_by: str | None
    paused_at: str | None = None  # when it was paused (None: active, or paused before this was kept)
    paused_by: str | None = None  # who paused it (None: the scheduler itself, or not known)


@dataclass(frozen=True)
class SlotRow:
    """What became of one slot (or of a range of missed ones, or of a trigger)."""

    slot_at: int
    outcome: str  # started | skipped | missed | refused | already_started | triggered
    started_run: str | None = None
    reason: str | None = None
    until_at: int | None = None
    count: int | None = None
    recorded_at: str = ""
    id: int = 0


class SchedulesTx(Protocol):
    def insert_schedule(self, row: ScheduleRow) -> None:
        """Add a schedule (ConcurrencyError if its tenant has one of that name already)."""
        ...

    def schedule(self, tenant: str, name: str, *, lock: bool = False) -> ScheduleRow | None:
        """One schedule of the tenant (with `lock`, locked for this transaction where rows lock)."""
        ...

    def schedules(self, tenant: str) -> list[ScheduleRow]:
        """The tenant's schedules, by name."""
        ...

    def count_schedules(self, tenant: str) -> int: ...
    def due_schedules(
        self, now_ms: int, limit: int, partitions: list[int] | None = None
    ) -> list[ScheduleRow]:
        """Active schedules whose next slot is due, oldest first, locked (skipping rows another
        transaction holds, where the backend has row locks)."""
        ...

    def update_schedule(self, row: ScheduleRow, expected_generation: int) -> bool:
        """Write `row` over the stored one if that is still at `expected_generation`; False if not."""
        ...

    def delete_schedule(self, schedule_id: str) -> None:
        """Delete the schedule and the record of its slots (the runs it started stay)."""
        ...

    def add_slot(self, schedule_id: str, slot: SlotRow, keep: int) -> None:
        """Record what became of a slot; only the newest `keep` records of the schedule are kept."""
        ...

    def slots(self, schedule_id: str, limit: int) -> list[SlotRow]:
        """The newest records of the schedule's slots, newest first."""
        ...
