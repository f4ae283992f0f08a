"""The metrics aggregate: what the database sums up for the metrics endpoint (implemented by
sqltx/metrics.py)."""

from __future__ import annotations

from typing import Protocol, TypedDict

__all__ = ["MetricsTx", "StoreStats"]


class StoreStats(TypedDict):
    runs: list[tuple[str, str, int]]  # (tenant, status, runs)
    queues: list[tuple[str, str, int, int]]  # (tenant, activity, ready tasks, oldest available_at ms)
    timers: list[tuple[str, int, int]]  # (tenant, oldest fire_at ms, timers due)


class MetricsTx(Protocol):
    def stats(self, now_ms: int) -> StoreStats: ...
