"""MetricsTx in SQL: the aggregates behind the metrics endpoint and the UI's overview."""

from __future__ import annotations

from ..port import StoreStats
from .base import SqlBase

__all__ = ["SqlMetricsTx"]


class SqlMetricsTx(SqlBase):
    def stats(self, now_ms: int) -> StoreStats:
        """Aggregates for metrics: runs by status, ready-queue depth/age, overdue timers (by tenant)."""
        return {
            "runs": [tuple(r) for r in self.c.execute(self.q["runs_by_status"])],
            "queues": [tuple(r) for r in self.c.execute(self.q["queue_stats"])],
            "timers": [tuple(r) for r in self.c.execute(self.q["timer_lag"], {"now": now_ms})],
        }
