"""MetricsTx in SQL: the aggregates behind the metrics endpoint and the UI's overview."""

from __future__ import annotations

from ..port import StoreStats
from .base import SqlBase

__all__ = ["SqlMetricsTx"]


class SqlMetricsTx(SqlBase):
    def stats(self, now_ms: int, soon_ms: int | None = None) -> StoreStats:
        """Aggregates for metrics, by tenant: runs by status, ready-queue depth and age, overdue timers,
        unfinished runs by definition, current step and wait kind, pending approvals and the oldest,
        leases (held, ending before `soon_ms`, ended before `now_ms`)."""
        now = {"now": now_ms}
        soon = {**now, "soon": now_ms if soon_ms is None else soon_ms}
        return {
            "runs": [tuple(r) for r in self.c.execute(self.q["runs_by_status"])],
            "queues": [tuple(r) for r in self.c.execute(self.q["queue_stats"])],
            "timers": [tuple(r) for r in self.c.execute(self.q["timer_lag"], now)],
            "steps": [tuple(r) for r in self.c.execute(self.q["runs_at_step"])],
            "approvals": [tuple(r) for r in self.c.execute(self.q["approvals_waiting"])],
            "leases": [tuple(r) for r in self.c.execute(self.q["lease_stats"], soon)],
        }
