"""The views of retention: legal holds, tombstones of purged runs, what a purge pass did, and the
retention status of a tenant (`lockstep retention status`, `GET /v1/retention`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import View

__all__ = ["HoldView", "PurgeReport", "RetentionStatus", "TenantRetention", "TombstoneView"]


class HoldView(View):
    """A legal hold on one run (`run_id`), or on the whole tenant (`run_id` null)."""

    id: int
    tenant: str
    run_id: str | None
    reason: str
    held_by: str
    held_at: str
    released_by: str | None = None
    released_at: str | None = None
    release_reason: str | None = None


class TombstoneView(View):
    """What a purged run was, kept for good after its events, snapshot and other rows are deleted."""

    run_id: str
    tenant: str
    definition: str
    version: int
    status: Literal["completed", "failed", "cancelled"]
    started_at: str
    finished_at: str
    events: int = Field(description="how many events the run had recorded")
    last_hash: str = Field(description="the head of its hash chain when it was purged")
    purged_at: str
    purged_by: str = Field(description="'retention' for the purge pass, else the operator")
    reason: str
    state: Literal["purging", "purged"] = Field(
        description="purging: the run is gone from every view and its rows are being deleted; purged: done"
    )
    done_at: str | None = None


class TenantRetention(View):
    """One tenant's retention: the setting, what the next pass would purge, what is held, what was."""

    tenant: str
    retention: str | None = Field(description="e.g. 90d; null: finished runs are kept forever")
    retention_seconds: int | None
    tenant_hold: HoldView | None = Field(description="an active hold on the whole tenant: nothing is purged")
    held_runs: int = Field(description="runs under an active hold")
    run_holds: list[HoldView] = Field(description="the active run holds (the newest, at most 100)")
    finished_runs: int = Field(description="finished runs still stored")
    due_now: int = Field(description="finished, unheld runs past retention: what the next passes purge")
    next_due_at: str | None = Field(description="when the next finished run becomes due (unheld ones)")
    tombstones: dict[str, int] = Field(description="tombstones by state: purging, purged")


class RetentionStatus(View):
    at: str
    tenants: list[TenantRetention]


class PurgeReport(View):
    """What one purge pass did."""

    tombstoned: int = Field(description="runs that got their tombstone (gone from every view)")
    purged: int = Field(description="tombstones completed: nothing of their run is left")
    rows_deleted: int
    partitions_dropped: list[str]
    more: bool = Field(description="work was left for the next pass (bounded batches)")
