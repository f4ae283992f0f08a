"""SchedulerTx in SQL: timer rows, expired leases, scheduler partitions and the next wake-up, and the
timer rows an append's effects write."""

from __future__ import annotations

from ...core.effects import CloseTimer, CreateTimer
from ...core.state import RunState
from ..port import DueTimer, ExpiredLease
from .base import SqlBase, ms_of

__all__ = ["SqlSchedulerTx"]


class SqlSchedulerTx(SqlBase):
    def expired_leases(
        self, now_ms: int, limit: int, partitions: list[int] | None = None
    ) -> list[ExpiredLease]:
        params = {"now": now_ms, "limit": limit, "partitions": partitions}
        rows = self.c.execute(self.q["leases_expired"], params).fetchall()
        return [ExpiredLease(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows]

    def due_timers(self, now_ms: int, limit: int, partitions: list[int] | None = None) -> list[DueTimer]:
        params = {"now": now_ms, "limit": limit, "partitions": partitions}
        rows = self.c.execute(self.q["timers_due"], params).fetchall()
        return [DueTimer(r[0], r[1], r[2]) for r in rows]

    def timer_status(self, run_id: str, key: str, generation: int) -> str | None:
        row = self._one("timer_status", run_id=run_id, key=key, generation=generation)
        return str(row[0]) if row else None

    def close_timer(self, run_id: str, key: str, generation: int, status: str) -> None:
        self._write("timer_close", {"run_id": run_id, "key": key, "generation": generation, "status": status})

    def scheduled_timers(self, tenant: str) -> int:
        return int(self._one("scheduled_timers", tenant=tenant)[0])

    def scheduler_partitions(self, owner: str, now_ms: int, ttl_ms: int) -> list[int] | None:
        """The partitions this scheduler may work on; None means all (a single-writer backend)."""
        return None

    def next_wakeup_ms(self) -> int | None:
        a = (self._one("next_timer") or (None,))[0]
        b = (self._one("next_lease_expiry") or (None,))[0]
        vals = [v for v in (a, b) if v is not None]
        return min(vals) if vals else None

    # --- the timer rows of an append -----------------------------------------------------------
    def _write_timer_effect(self, run: RunState, fx: CreateTimer | CloseTimer) -> None:
        if isinstance(fx, CreateTimer):
            self._write(
                "timer_insert",
                {
                    "run_id": run.run_id,
                    "key": fx.key,
                    "generation": fx.generation,
                    "tenant": run.tenant,
                    "fire_at": ms_of(fx.fire_at),
                },
            )
        else:
            self.close_timer(run.run_id, fx.key, fx.generation, fx.status)
