"""RetentionTx in SQL: legal holds, tombstones, and the purge's reads and deletes. The database checks
every write here again (migrations `*_retention.sql`): a tombstone only for a finished, unheld run
that matches it, a delete of a run's rows only once it has a tombstone."""

from __future__ import annotations

from typing import Any

from ..port import ConcurrencyError
from ..retention import EventPartition, HoldRow, TombstoneRow
from .base import SqlBase

__all__ = ["RUN_ROWS", "SqlRetentionTx"]

# Every table whose rows are keyed by a run, besides `events` and `runs`, in the order its purge
# deletes them (a row that is found through another goes first: decisions before their requests).
# THE place to add a new table keyed by run: a name here,
# a `purge_<name>` query in both queries.sql files, and its delete guard in the next migration. Each
# query deletes every row of the run, whatever its state (tests/service/test_retention_rows.py reads
# the schema and fails on any table where a purged run's row is left).
RUN_ROWS = (
    "tasks",
    "timers",
    "approval_decisions",
    "approval_links",
    "approval_requests",
    "notifications",
    "child_runs",  # the outbox between a parent and its children (the parent's rows)
    "event_waits",  # the run's open event waits and the callbacks minted for them
    "event_callbacks",
    "event_inbox",  # not deleted (the tenant's event ids stay idempotent): the run's id is blanked
    "webhook_deliveries",  # the outbox of the run's webhook deliveries (sqltx/webhooks.py)
    # A migration request's decisions and the request go with its last run; then the run's own row.
    "migration_decisions",
    "migration_requests",
    "migration_request_runs",
    "holds",
    "run_keys",  # the run's data key (app/keys): its sealed values go with it
)


def _hold(r: Any) -> HoldRow:
    return HoldRow(int(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8])


def _tombstone(r: Any) -> TombstoneRow:
    return TombstoneRow(
        r[0], r[1], r[2], int(r[3]), r[4], r[5], r[6], int(r[7]), r[8], r[9], r[10], r[11], r[12], r[13]
    )


class SqlRetentionTx(SqlBase):
    # --- holds ---------------------------------------------------------------------------------
    def lock_run_for_hold(self, run_id: str) -> tuple[str, str] | None:
        r = self._one("retention_lock_run", run_id=run_id)
        return (r[0], r[1]) if r else None

    def lock_tenant_for_hold(self, tenant: str) -> bool:
        return self._one("retention_lock_tenant", name=tenant) is not None

    def insert_hold(
        self, tenant: str, run_id: str | None, reason: str, held_by: str, held_at: str
    ) -> HoldRow:
        params = {
            "tenant": tenant,
            "run_id": run_id,
            "reason": reason,
            "held_by": held_by,
            "held_at": held_at,
        }
        try:
            row = self._one("hold_insert", **params)
        except self.integrity_error as exc:
            # An active hold on the same target (unique index), or the run has a tombstone (trigger).
            raise ConcurrencyError(str(exc).splitlines()[0]) from None
        return HoldRow(int(row[0]), tenant, run_id, reason, held_by, held_at)

    def active_hold(self, tenant: str, run_id: str | None) -> HoldRow | None:
        r = self._one("hold_active", tenant=tenant, run_id=run_id)
        return _hold(r) if r else None

    def release_hold(self, hold_id: int, released_by: str, released_at: str, reason: str) -> bool:
        params = {"id": hold_id, "released_by": released_by, "released_at": released_at}
        cur = self.c.execute(self.q["hold_release"], {**params, "release_reason": reason})
        return bool(cur.rowcount == 1)

    def holds(self, tenant: str | None, *, active: bool, limit: int) -> list[HoldRow]:
        params = {"tenant": tenant, "active": int(active), "limit": limit}
        return [_hold(r) for r in self.c.execute(self.q["holds_list"], params).fetchall()]

    def holds_of_run(self, run_id: str) -> list[HoldRow]:
        return [_hold(r) for r in self.c.execute(self.q["holds_of_run"], {"run_id": run_id}).fetchall()]

    def run_holds_count(self, tenant: str) -> int:
        return int(self._one("run_holds_count", tenant=tenant)[0])

    # --- what is due ---------------------------------------------------------------------------
    def share_tenant_for_purge(self, tenant: str) -> None:
        self._one("retention_share_tenant", name=tenant)

    def purge_candidates(
        self, tenant: str, cutoff: str, limit: int, partitions: list[int] | None = None
    ) -> list[str]:
        params = {"tenant": tenant, "cutoff": cutoff, "limit": limit, "partitions": partitions}
        return [r[0] for r in self.c.execute(self.q["purge_candidates"], params).fetchall()]

    def purge_due(self, tenant: str, cutoff: str) -> tuple[int, str | None]:
        due = int(self._one("purge_due_count", tenant=tenant, cutoff=cutoff)[0])
        return due, self._one("purge_next_due", tenant=tenant, cutoff=cutoff)[0]

    def finished_count(self, tenant: str) -> int:
        return int(self._one("finished_count", tenant=tenant)[0])

    # --- tombstones ----------------------------------------------------------------------------
    def tombstone_run(
        self, run_id: str, *, purged_at: str, purged_by: str, reason: str
    ) -> TombstoneRow | None:
        r = self._one("purge_run_row", run_id=run_id)
        if r is None or r[3] not in ("completed", "failed", "cancelled"):
            return None
        t = TombstoneRow(
            run_id,
            r[0],
            r[1],
            int(r[2]),
            r[3],
            r[4],
            r[5],
            int(r[6]),
            r[7],
            purged_at,
            purged_by,
            reason,
            "purging",
        )
        self.c.execute(
            self.q["tombstone_insert"],
            {
                "run_id": run_id,
                "tenant": t.tenant,
                "definition": t.definition,
                "version": t.version,
                "status": t.status,
                "started_at": t.started_at,
                "finished_at": t.finished_at,
                "events": t.events,
                "last_hash": t.last_hash,
                "purged_at": purged_at,
                "purged_by": purged_by,
                "reason": reason,
            },
        )
        # The run is gone for every reader from this commit on: no listing, view or command sees it.
        self.c.execute(self.q["finished_run_delete"], {"run_id": run_id})
        self.c.execute(self.q["run_delete"], {"run_id": run_id})
        return t

    def tombstone(self, run_id: str) -> TombstoneRow | None:
        r = self._one("tombstone_get", run_id=run_id)
        return _tombstone(r) if r else None

    def tombstones(self, tenant: str | None, *, after: str, limit: int) -> list[TombstoneRow]:
        params = {"tenant": tenant, "after": after, "limit": limit}
        return [_tombstone(r) for r in self.c.execute(self.q["tombstones_list"], params).fetchall()]

    def purging_tombstones(
        self, *, from_run: str, limit: int, partitions: list[int] | None = None
    ) -> list[TombstoneRow]:
        params = {"from": from_run, "limit": limit, "partitions": partitions}
        return [_tombstone(r) for r in self.c.execute(self.q["tombstones_purging"], params).fetchall()]

    def tombstone_counts(self, tenant: str) -> dict[str, int]:
        rows = self.c.execute(self.q["tombstone_counts"], {"tenant": tenant}).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def purge_run_rows(self, run_id: str, limit: int, *, events: bool = True) -> int:
        deleted = 0
        for table in ("events", *RUN_ROWS) if events else RUN_ROWS:
            if deleted >= limit:
                break
            cur = self.c.execute(self.q[f"purge_{table}"], {"run_id": run_id, "limit": limit - deleted})
            deleted += max(cur.rowcount, 0)
        return deleted

    def finish_tombstone(self, run_id: str, done_at: str) -> bool:
        cur = self.c.execute(self.q["tombstone_done"], {"run_id": run_id, "done_at": done_at})
        return bool(cur.rowcount == 1)

    def tombstones_with_rows(self, tenant: str | None, limit: int) -> list[tuple[str, str]]:
        rows = self.c.execute(self.q["tombstones_with_rows"], {"tenant": tenant, "limit": limit}).fetchall()
        return [(r[0], r[1]) for r in rows]

    # --- event partitions (PostgreSQL overrides these: postgres/partitions.py) ------------------
    def event_partitions(self) -> list[EventPartition]:
        return []

    def drop_event_partition(self, partition: EventPartition) -> bool:
        return False
