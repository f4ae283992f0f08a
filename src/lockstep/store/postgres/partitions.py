"""The purge's part of PostgreSQL's monthly event partitions: list them with their run-id ranges, and
drop a whole month once every run in it has a tombstone (instead of deleting its rows one by one).

Dropping is DDL, which fires no row trigger, so the rule the delete triggers enforce for rows is
checked here, in the dropping transaction: no run row is left in the partition's range (a run row is
deleted only together with writing its tombstone, which the database checks), and no event in the
partition belongs to a run without a tombstone. The partition is detached first, which takes an ACCESS
EXCLUSIVE lock on `events` for the moment the statement lasts (waiting at most 5 s, so a busy database
refuses the drop for this pass instead of queueing every writer behind it). All of it is the function
`lockstep_drop_event_partition` (migration 0013): it runs with the rights of the schema's owner, so the
runtime role needs no DDL rights.
"""

from __future__ import annotations

import re

import psycopg

from ..retention import EventPartition
from ..sqltx.base import SqlBase

__all__ = ["PgPartitionsTx"]

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
        # In the database (migration 0013), with the schema owner's rights: the runtime role has no DDL.
        try:
            row = self._one("drop_event_partition", name=partition.name)
        except psycopg.errors.RaiseException as exc:
            raise RuntimeError(str(exc.diag.message_primary or exc)) from None
        return bool(row[0])
