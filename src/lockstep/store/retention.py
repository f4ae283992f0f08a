"""The retention part of the storage port: legal holds, tombstones, and what the purge of finished runs
past their tenant's retention needs of a database (app/purge.py). `port.Tx` includes `RetentionTx`;
`sqltx/retention.py` implements it for both SQL backends (the PostgreSQL partitions in
`postgres/partitions.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["EventPartition", "HoldRow", "RetentionTx", "TombstoneRow"]


@dataclass(frozen=True)
class HoldRow:
    """A legal hold on one run, or (run_id None) on a whole tenant; released once, with who and why."""

    id: int
    tenant: str
    run_id: str | None
    reason: str
    held_by: str
    held_at: str
    released_by: str | None = None
    released_at: str | None = None
    release_reason: str | None = None


@dataclass(frozen=True)
class TombstoneRow:
    """What a purged run was, and how far its purge got ('purging', then 'purged')."""

    run_id: str
    tenant: str
    definition: str
    version: int
    status: str
    started_at: str
    finished_at: str
    events: int
    last_hash: str
    purged_at: str
    purged_by: str
    reason: str
    state: str
    done_at: str | None = None


@dataclass(frozen=True)
class EventPartition:
    """A partition of the events table holding the runs with lo <= run_id < hi (PostgreSQL)."""

    name: str
    lo: str
    hi: str


class RetentionTx(Protocol):
    def lock_run_for_hold(self, run_id: str) -> tuple[str, str] | None:
        """(tenant, status) of the run, locked where the backend has row locks (a concurrent purge of it
        then waits, or has already deleted it); None without such a run."""
        ...

    def lock_tenant_for_hold(self, tenant: str) -> bool:
        """Lock the tenant row against every purge of the tenant in progress; False without it."""
        ...

    def insert_hold(
        self, tenant: str, run_id: str | None, reason: str, held_by: str, held_at: str
    ) -> HoldRow:
        """Raises ConcurrencyError if the target already has an active hold or the run has a tombstone."""
        ...

    def active_hold(self, tenant: str, run_id: str | None) -> HoldRow | None: ...
    def release_hold(self, hold_id: int, released_by: str, released_at: str, reason: str) -> bool: ...
    def holds(self, tenant: str | None, *, active: bool, limit: int) -> list[HoldRow]: ...
    def holds_of_run(self, run_id: str) -> list[HoldRow]: ...
    def run_holds_count(self, tenant: str) -> int: ...
    def share_tenant_for_purge(self, tenant: str) -> None:
        """Hold the tenant row against a new tenant hold until this transaction ends (shared with other
        purges and with starts)."""
        ...

    def purge_candidates(
        self, tenant: str, cutoff: str, limit: int, partitions: list[int] | None = None
    ) -> list[str]:
        """Finished runs of `tenant` whose terminal event is at or before `cutoff` and that have no active
        run hold, oldest first (a tenant hold is the caller's to check)."""
        ...

    def purge_due(self, tenant: str, cutoff: str) -> tuple[int, str | None]:
        """How many unheld finished runs are due at `cutoff`, and the terminal time of the next one."""
        ...

    def finished_count(self, tenant: str) -> int: ...
    def tombstone_run(
        self, run_id: str, *, purged_at: str, purged_by: str, reason: str
    ) -> TombstoneRow | None:
        """Write the run's tombstone ('purging') and delete its run row (snapshot) in this transaction;
        None if the run is gone, unfinished or locked by another transaction."""
        ...

    def tombstone(self, run_id: str) -> TombstoneRow | None: ...
    def tombstones(self, tenant: str | None, *, after: str, limit: int) -> list[TombstoneRow]: ...
    def purging_tombstones(
        self, *, from_run: str, limit: int, partitions: list[int] | None = None
    ) -> list[TombstoneRow]: ...
    def tombstone_counts(self, tenant: str) -> dict[str, int]: ...
    def purge_run_rows(self, run_id: str, limit: int, *, events: bool = True) -> int:
        """Delete up to `limit` of the rows a tombstoned run left (its events unless `events` is False,
        then every other table keyed by the run); how many went (fewer than `limit`: none are left)."""
        ...

    def finish_tombstone(self, run_id: str, done_at: str) -> bool: ...
    def tombstones_with_rows(self, tenant: str | None, limit: int) -> list[tuple[str, str]]:
        """(run id, state) of tombstones that contradict what is stored: a run row still there, or a
        'purged' one with events left."""
        ...

    def event_partitions(self) -> list[EventPartition]:
        """The ranged partitions of the events table ([] on a backend without partitions)."""
        ...

    def drop_event_partition(self, partition: EventPartition) -> bool:
        """Detach and drop the partition if every run in its range has a tombstone; whether it did."""
        ...
