"""The scheduler aggregate: timers, lease expiry, scheduler partitions and the next wake-up; the rows a
scheduler pass works on (implemented by sqltx/scheduler.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["DueTimer", "ExpiredLease", "SchedulerTx"]


@dataclass(frozen=True)
class DueTimer:
    run_id: str
    key: str
    generation: int


@dataclass(frozen=True)
class ExpiredLease:
    task_id: str
    run_id: str
    attempt: int
    fencing: int
    worker: str
    deadline: int


class SchedulerTx(Protocol):
    def expired_leases(
        self, now_ms: int, limit: int, partitions: list[int] | None = None
    ) -> list[ExpiredLease]: ...
    def due_timers(self, now_ms: int, limit: int, partitions: list[int] | None = None) -> list[DueTimer]: ...
    def timer_status(self, run_id: str, key: str, generation: int) -> str | None: ...
    def close_timer(self, run_id: str, key: str, generation: int, status: str) -> None: ...
    def scheduled_timers(self, tenant: str) -> int: ...
    def scheduler_partitions(self, owner: str, now_ms: int, ttl_ms: int) -> list[int] | None: ...
    def next_wakeup_ms(self) -> int | None: ...
