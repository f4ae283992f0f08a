"""The scheduler's duties: fire due timers, expire the leases of workers that stopped renewing them, send
tasks no worker takes to the dead-letter state, and share the run partitions among schedulers.

Every pass picks candidates without locking, then locks each run with SKIP LOCKED (run before task,
always: no deadlocks), re-checks the candidate inside the lock, and applies one command.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

from ..core.commands import DeadLetter, ExpireLease, FireTimer, Rejected
from ..store import DueTimer, ExpiredLease, LoadedRun, SweepTx, TaskTx, TimerTx
from .kernel import epoch_ms, lock_run
from .port import KernelPort

__all__ = ["Sweeps"]


class Sweeps:
    def __init__(self, kernel: KernelPort[SweepTx], unserved_after: timedelta = timedelta(hours=1)) -> None:
        self.kernel = kernel
        # How long a task may wait for a worker before it is dead-lettered (a tenant may set its own).
        self.unserved_after = unserved_after

    def fire_due_timers(self, limit: int = 200, partitions: list[int] | None = None) -> int:
        now = self.kernel.clock()
        with self.kernel.write() as tx:
            due = tx.due_timers(epoch_ms(now), limit, partitions)
            if not due:
                return 0

            # Runs another transaction holds are skipped, and the armed-or-not question is left to the
            # core's generation check (a fired or superseded timer is refused there).
            fired = self.kernel.as_one_batch(
                tx,
                "a batch of timers",
                [t.run_id for t in due],
                lambda loaded: sum(self._fire_one(tx, t, now, loaded) for t in due),
                skip_locked=True,
            )
            if fired is not None:
                return fired
            return sum(
                bool(self.kernel.isolated(tx, f"timer {t.key} of run {t.run_id}", self._fire_one, t, now))
                for t in due
            )

    def _fire_one(
        self, tx: TimerTx, t: DueTimer, now: datetime, preloaded: dict[str, LoadedRun] | None = None
    ) -> bool:
        if preloaded is not None:
            found = preloaded.pop(t.run_id, None)
            loaded: LoadedRun | Literal[False] | None = found or lock_run(tx, t.run_id)
        else:
            loaded = lock_run(tx, t.run_id)
            if loaded is not False and tx.timer_status(t.run_id, t.key, t.generation) != "scheduled":
                return False
        if loaded is False:
            return False
        if loaded is None:
            tx.close_timer(t.run_id, t.key, t.generation, "stale")
            return False
        try:
            d = self.kernel.definition_of(tx, loaded.state)
            self.kernel.apply(tx, loaded, FireTimer(t.key, t.generation), now, d)
            return True
        except Rejected as r:
            # A duplicate or superseded timer: the generation check turns it into a no-op.
            if r.code == "stale_timer":
                tx.close_timer(t.run_id, t.key, t.generation, "stale")
            return False

    def expire_leases(self, limit: int = 200, partitions: list[int] | None = None) -> int:
        now = self.kernel.clock()
        with self.kernel.write() as tx:
            expired = tx.expired_leases(epoch_ms(now), limit, partitions)
            return sum(
                bool(self.kernel.isolated(tx, f"lease of task {lease.task_id}", self._expire_one, lease, now))
                for lease in expired
            )

    def _expire_one(self, tx: TaskTx, lease: ExpiredLease, now: datetime) -> bool:
        now_ms = epoch_ms(now)
        loaded = lock_run(tx, lease.run_id)
        if loaded is False:
            return False
        current = tx.task(lease.task_id)  # a heartbeat may have renewed it meanwhile
        if (
            current is None
            or current.status != "leased"
            or current.fencing != lease.fencing
            or (current.lease_expires_at or 0) > now_ms
        ):
            return False
        if loaded is None:
            tx.close_task(lease.task_id, "stale")
            return False
        if now_ms >= lease.deadline:
            reason = "the attempt did not finish within its timeout"
        else:
            reason = f"worker {lease.worker} stopped renewing its lease (crashed, hung or cut off)"
        try:
            d = self.kernel.definition_of(tx, loaded.state)
            expire = ExpireLease(lease.task_id, lease.attempt, lease.fencing, reason)
            self.kernel.apply(tx, loaded, expire, now, d)
            return True
        except Rejected:
            tx.close_task(lease.task_id, "stale")
            return False

    def dead_letter_unserved(self, limit: int = 200) -> int:
        """Tasks queued longer than their tenant's `unserved_after` (default: the service's) go to the
        dead-letter state: the run waits in needs_attention instead of silently queueing forever."""
        now = self.kernel.clock()
        default_s = self.unserved_after.total_seconds()
        shortest = default_s
        with self.kernel.read() as tx:
            for t in tx.tenants():
                v = t.settings.get("unserved_after")
                if v is not None:
                    shortest = min(shortest, float(v))
        done = 0
        with self.kernel.write() as tx:
            for task_id, run_id, tenant, activity, available_at in tx.stale_ready(
                epoch_ms(now) - int(shortest * 1000), limit
            ):
                row = tx.tenant(tenant)
                after = float(row.settings.get("unserved_after", default_s)) if row else default_s
                waited = (epoch_ms(now) - available_at) / 1000
                if waited < after:
                    continue
                loaded = lock_run(tx, run_id)
                current = tx.task(task_id)
                if loaded is False or current is None or current.status != "ready" or loaded is None:
                    continue
                reason = (
                    f"no worker took this {activity} task for {int(waited)}s (limit {int(after)}s): is a "
                    f"worker serving {activity} on queue {current.queue} running?"
                )
                try:
                    d = self.kernel.definition_of(tx, loaded.state)
                    self.kernel.apply(tx, loaded, DeadLetter(task_id, reason), now, d)
                    done += 1
                except Rejected:
                    tx.close_task(task_id, "stale")
        return done

    def scheduler_partitions(self, owner: str, ttl: timedelta) -> list[int] | None:
        """This scheduler's share of the run partitions (None: all of them, on single-writer SQLite)."""
        with self.kernel.write() as tx:
            now_ms = epoch_ms(self.kernel.clock())
            return tx.scheduler_partitions(owner, now_ms, int(ttl.total_seconds() * 1000))

    def next_wakeup(self) -> datetime | None:
        with self.kernel.read() as tx:
            ms = tx.next_wakeup_ms()
        return datetime.fromtimestamp(ms / 1000, UTC) if ms is not None else None

    def maintain(self) -> None:
        """Slow housekeeping: create the coming months' event partitions (PostgreSQL)."""
        self.kernel.store.ensure_partitions()
