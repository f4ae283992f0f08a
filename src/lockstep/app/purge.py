"""The purge: a pass of the scheduler that deletes finished runs past their tenant's retention, in
bounded batches, leaving one tombstone per run. It survives a crash at any point:

1. Tombstone: per tenant with a retention and no tenant hold, one transaction per batch of due runs
   (finished, terminal event older than the retention, no run hold): each gets its tombstone
   ('purging') and loses its run row in the same commit, so from then on every view answers 410 and
   no listing shows it. The database refuses a tombstone for an unfinished or held run.
2. Partitions (PostgreSQL, once step 1 is caught up): a monthly event partition older than the current
   month whose runs all have tombstones is detached and dropped whole.
3. Rows: the events and every other row keyed by a tombstoned run are deleted, a bounded number per
   transaction; a tombstone whose rows are all gone becomes 'purged'. A crash between any two commits
   leaves tombstones in 'purging', which the next pass (of any scheduler) carries on with.

While step 1 is not caught up (a backlog), step 3 leaves the events of runs in past months alone: once
every due run of a month is tombstoned, step 2 drops its partition in one statement.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ..core.limits import Settings
from ..core.timeutil import format_duration, iso
from ..errors import Unavailable
from ..store import EventPartition, TombstoneRow, Tx
from . import failpoints
from .kernel import Kernel
from .views import PurgeReport

__all__ = ["RETENTION", "Purge", "retention_of"]

log = logging.getLogger("lockstep.app.purge")

RETENTION = "retention"  # the tenant setting: seconds a finished run is kept after its terminal event
PURGED_BY = "retention"


def retention_of(settings: Settings) -> timedelta | None:
    """A tenant's retention (None: finished runs are kept forever)."""
    value = settings.get(RETENTION)
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return timedelta(seconds=float(value))
    return None


def month_start(now: datetime) -> str:
    """The smallest run id of `now`'s month (UTC), as the event partitions' bounds are written."""
    start = datetime(now.year, now.month, 1, tzinfo=UTC)
    return f"{int(start.timestamp() * 1000):012x}"


@dataclass
class _Tally:
    tombstoned: int = 0
    purged: int = 0
    rows: int = 0


class Purge:
    def __init__(self, kernel: Kernel, *, runs_per_batch: int = 100, rows_per_batch: int = 1000) -> None:
        self.kernel = kernel
        self.runs_per_batch = runs_per_batch  # tombstones, or runs whose rows are deleted, per transaction
        self.rows_per_batch = rows_per_batch  # rows deleted per transaction

    def run_pass(
        self,
        partitions: list[int] | None = None,
        *,
        tenant: str | None = None,
        max_batches: int = 20,
        drop_partitions: bool = True,
    ) -> PurgeReport:
        """One pass over this scheduler's `partitions` (None: all): at most `max_batches` transactions
        of tombstones and as many of deletes; `more` says whether work was left for the next pass."""
        now = self.kernel.clock()
        tally = _Tally()
        behind = self._tombstone_due(now, partitions, tenant, max_batches, tally)
        dropped: list[str] = []
        with self.kernel.read() as tx:
            old = [p for p in tx.event_partitions() if p.hi <= month_start(now)]
        if not behind and drop_partitions and old:
            dropped = self._drop_partitions(now, old)
        # A backlog of tombstones: past months' events wait for their partition to be dropped whole.
        start = month_start(now) if behind and old else ""
        rows_left = self._delete_rows(now, partitions, start, max_batches, tally)
        return PurgeReport(
            tombstoned=tally.tombstoned,
            purged=tally.purged,
            rows_deleted=tally.rows,
            partitions_dropped=dropped,
            more=behind or rows_left,
        )

    # --- 1. tombstones -------------------------------------------------------------------------
    def _tombstone_due(
        self, now: datetime, partitions: list[int] | None, only: str | None, max_batches: int, tally: _Tally
    ) -> bool:
        """Tombstone due runs, one batch per tenant in turn; True if some tenant had more left."""
        with self.kernel.read() as tx:
            due = []
            for row in tx.tenants():
                keep = retention_of(row.settings)
                if keep is not None and (only is None or row.name == only):
                    due.append((row.name, keep))
        batches = 0
        while due:
            left = []
            for name, keep in due:
                if batches >= max_batches:
                    return True
                batches += 1
                if self._tombstone_batch(name, keep, now, partitions, tally):
                    left.append((name, keep))
            due = left
        return False

    def _tombstone_batch(
        self, tenant: str, keep: timedelta, now: datetime, partitions: list[int] | None, tally: _Tally
    ) -> bool:
        """One transaction of tombstones for `tenant`; True if the batch was full (more may be due)."""
        at = iso(now)
        shown = format_duration(keep)
        reason = f"finished more than {shown} ago (tenant retention {shown})"
        with self.kernel.write() as tx:
            tx.share_tenant_for_purge(tenant)  # a tenant hold placed meanwhile waits for this commit
            if tx.active_hold(tenant, None) is not None:
                return False
            ids = tx.purge_candidates(tenant, iso(now - keep), self.runs_per_batch, partitions)
            made = [
                rid
                for rid in ids
                if self.kernel.isolated(tx, f"the tombstone of run {rid}", self._tombstone, rid, at, reason)
            ]
            if made:
                detail = {"runs": made, "retention": shown, "count": len(made)}
                tx.audit(at, tenant, PURGED_BY, "retention.purge", tenant, "ok", detail)
        tally.tombstoned += len(made)
        if made:
            failpoints.hit("purge.tombstoned", tenant=tenant, runs=len(made))
        return len(ids) >= self.runs_per_batch

    @staticmethod
    def _tombstone(tx: Tx, run_id: str, at: str, reason: str) -> TombstoneRow | None:
        return tx.tombstone_run(run_id, purged_at=at, purged_by=PURGED_BY, reason=reason)

    # --- 2. whole partitions -------------------------------------------------------------------
    def _drop_partitions(self, now: datetime, old: list[EventPartition]) -> list[str]:
        dropped = []
        for p in old:
            try:
                with self.kernel.write() as tx:
                    if not tx.drop_event_partition(p):
                        continue
                    detail = {"from_run": p.lo, "to_run": p.hi}
                    tx.audit(iso(now), None, PURGED_BY, "retention.drop_partition", p.name, "ok", detail)
                dropped.append(p.name)
            except Unavailable as exc:  # its lock was not granted in time: the next pass tries again
                log.warning("event partition %s not dropped in this pass: %s", p.name, exc)
            except Exception:
                log.exception("event partition %s not dropped", p.name)
        return dropped

    # --- 3. the rows of tombstoned runs --------------------------------------------------------
    def _delete_rows(
        self, now: datetime, partitions: list[int] | None, start: str, max_batches: int, tally: _Tally
    ) -> bool:
        """Delete rows of 'purging' tombstones (run ids from `start`); True if some were left."""
        at = iso(now)
        for _ in range(max_batches):
            with self.kernel.write() as tx:
                todo = tx.purging_tombstones(from_run=start, limit=self.runs_per_batch, partitions=partitions)
                budget = self.rows_per_batch
                for t in todo:
                    what = f"the rows of purged run {t.run_id}"
                    n = self.kernel.isolated(tx, what, self._delete_run_rows, t.run_id, budget, at)
                    if n is None:  # logged; its tombstone stays 'purging' for the next pass
                        continue
                    tally.rows += n
                    if n < budget:
                        tally.purged += 1
                    budget -= n
                    if budget <= 0:
                        break
                if todo:  # deleted, not committed
                    failpoints.hit("purge.rows", runs=len(todo), rows=self.rows_per_batch - budget)
            if todo:
                failpoints.hit("purge.deleted", runs=len(todo), rows=self.rows_per_batch - budget)
            if budget > 0 and len(todo) < self.runs_per_batch:
                return False
        return True

    def _delete_run_rows(self, tx: Tx, run_id: str, budget: int, at: str) -> int:
        n = tx.purge_run_rows(run_id, budget)
        if n < budget:  # nothing of the run is left (the database checks it again)
            tx.finish_tombstone(run_id, at)
        return n

    def finish_run(self, run_id: str) -> int:
        """Delete every row a tombstoned run left now, batch after batch (an operator's purge)."""
        total = 0
        while True:
            at = iso(self.kernel.clock())
            with self.kernel.write() as tx:
                n = self._delete_run_rows(tx, run_id, self.rows_per_batch, at)
            total += n
            if n < self.rows_per_batch:
                return total
