"""The metrics aggregate: what the database sums up for the metrics endpoint (implemented by
sqltx/metrics.py). Every query is a GROUP BY over a partial index of live rows (ready tasks, leased
tasks, due timers, pending approval requests, unfinished runs), so a scrape costs what is in flight, not
what the database ever held; `runs` alone counts finished runs too (by tenant and status)."""

from __future__ import annotations

from typing import Protocol, TypedDict

__all__ = ["MetricsTx", "StoreStats"]


class StoreStats(TypedDict):
    runs: list[tuple[str, str, int]]  # (tenant, status, runs)
    queues: list[tuple[str, str, int, int]]  # (tenant, activity, ready tasks, oldest available_at ms)
    timers: list[tuple[str, int, int]]  # (tenant, oldest fire_at ms, timers due)
    # (tenant, definition, current step or None, wait kind or None, unfinished runs)
    steps: list[tuple[str, str, str | None, str | None, int]]
    approvals: list[tuple[str, int, str]]  # (tenant, pending requests, oldest request's time, ISO)
    leases: list[tuple[str, int, int, int]]  # (tenant, leased tasks, ending by `soon_ms`, ended by `now`)


class MetricsTx(Protocol):
    def stats(self, now_ms: int, soon_ms: int | None = None) -> StoreStats: ...
