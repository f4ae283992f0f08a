"""The work aggregate: tasks, the ready queue, claims, leases, heartbeats, quotas and dead letters
(implemented by sqltx/work.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypedDict

from ...core.canonical import JSONValue

__all__ = ["DeadTaskRow", "TaskRow", "WorkTx"]


@dataclass(frozen=True)
class TaskRow:
    task_id: str
    tenant: str
    run_id: str
    step: str
    attempt: int
    kind: str
    activity: str
    queue: str
    input: JSONValue
    idempotency_key: str
    definition: str
    version: int
    delivery: str
    timeout_ms: int
    status: str
    fencing: int | None
    lease_owner: str | None
    lease_expires_at: int | None
    deadline: int | None
    # Whether the stored input may hold sealed values (a marker): then it is opened before a hand-over.
    sealed: bool = False


class DeadTaskRow(TypedDict):
    task_id: str
    run_id: str
    step: str
    attempt: int
    activity: str
    reason: str
    created_at: str


class WorkTx(Protocol):
    def task(self, task_id: str) -> TaskRow | None: ...
    def tasks(self, task_ids: Sequence[str]) -> dict[str, TaskRow]: ...
    def set_lease(self, task_id: str, lease_expires_at: int) -> None: ...
    def heartbeat(self, task_id: str, fencing: int, lease_until_ms: int) -> bool: ...
    def abandon_leases(self, owner: str, now_ms: int, tenant: str | None = None) -> int:
        """Make every lease `owner` holds (in `tenant`'s tasks; None: any tenant's) expire now (its
        previous incarnation died); how many."""
        ...

    def close_task(self, task_id: str, status: str) -> None: ...
    def ready_tenants(self) -> list[str]: ...
    def ready_ids(
        self,
        tenant: str,
        activities: Sequence[str],
        queue: str,
        now_ms: int,
        limit: int,
        served: Sequence[str] | None = None,
    ) -> list[str]: ...
    def leased_count(self, tenant: str) -> int: ...
    def lock_tenant(self, name: str) -> None: ...
    def dead_letter(self, task_id: str, reason: str) -> None: ...
    def stale_ready(self, before_ms: int, limit: int) -> list[tuple[str, str, str, str, int]]: ...
    def dead_tasks(self, tenant: str, limit: int) -> list[DeadTaskRow]: ...
    def task_counts(self) -> dict[str, int]: ...
    def ready_backlog(self) -> dict[str, int]:
        """Ready tasks (waiting for a worker) per tenant."""
        ...
