"""The purge's part of PostgreSQL's monthly event partitions: list them with their run-id ranges, and
drop a whole month once every run in it has a tombstone (instead of deleting its rows one by one).

Dropping is DDL, which fires no row trigger, so the rule the delete triggers enforce for rows is
checked here, in the dropping transaction: no run row is left in the partition's range (a run row is
deleted only together with writing its tombstone, which the database checks), and no event in the
partition belongs to a run without a tombstone. The partition is detached first, which takes an ACCESS
EXCLUSIVE lock on `events` for the moment the statement lasts (waiting at most `DROP_LOCK_TIMEOUT`, so
a busy database refuses the drop for this pass instead of queueing every writer behind it).
"""

from __future__ import annotations

import re

from psycopg import sql

from ..retention import EventPartition
from ..sqltx.base import SqlBase

__all__ = ["DROP_LOCK_TIMEOUT", "PgPartitionsTx"]

DROP_LOCK_TIMEOUT = "5s"
_BOUND = re.compile(r"FOR VALUES FROM \('([0-9a-f]+)'\) TO \('([0-9a-f]+)'\)")


class PgPartitionsTx(SqlBase):
    def event_partitions(self) -> list[EventPartition]:
        out = []
        for name, bound in self.c.execute(self.q["event_partitions"]).fetchall():
            m = _BOUND.fullmatch(str(bound or ""))
            if m:  # the DEFAULT partition has no range and is never dropped
                out.append(EventPartition(str(name), m.group(1), m.group(2)))
        return out

    def drop_event_partition(self, partition: EventPartition) -> bool:
        if self._one("partition_live_run", lo=partition.lo, hi=partition.hi) is not None:
            return False
        table = sql.Identifier(partition.name)
        self.c.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(DROP_LOCK_TIMEOUT)))
        self.c.execute(sql.SQL("ALTER TABLE events DETACH PARTITION {}").format(table))
        # Detached, nothing can write to it any more: now the check of every row is final.
        orphan = self.c.execute(
            sql.SQL(
                "SELECT e.run_id FROM {} e WHERE NOT EXISTS "
                "(SELECT 1 FROM tombstones t WHERE t.run_id = e.run_id) LIMIT 1"
            ).format(table)
        ).fetchone()
        if orphan is not None or self._one("partition_live_run", lo=partition.lo, hi=partition.hi):
            raise RuntimeError(
                f"partition {partition.name} holds events of run {orphan[0] if orphan else '?'} that has no "
                "tombstone: not dropped (the detach is rolled back)"
            )
        self.c.execute(sql.SQL("DROP TABLE {}").format(table))
        return True
