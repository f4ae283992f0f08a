"""SchedulesTx in SQL: schedule rows (written only over the generation they were read at) and the record
of their slots, kept to the newest few per schedule."""

from __future__ import annotations

from typing import Any

from ...core.canonical import compact_json, parse_json
from ..port import ConcurrencyError, ScheduleRow, SlotRow
from .base import SqlBase

__all__ = ["SqlSchedulesTx"]


def _row(r: Any) -> ScheduleRow:
    """A schedule from its columns in the queries' order (the table's, but `part`)."""
    return ScheduleRow(
        r[0],
        r[1],
        r[2],
        r[3],
        int(r[4]) if r[4] is not None else None,
        r[5],
        r[6],
        parse_json(r[7]),
        r[8],
        r[9],
        int(r[10]),
        r[11],
        r[12],
        int(r[13]),
        int(r[14]),
        int(r[15]) if r[15] is not None else None,
        r[16],
        int(r[17]),
        int(r[18]),
        int(r[19]),
        r[20],
        r[21],
        r[22],
        r[23],
        r[24],
        r[25],
    )


def _params(row: ScheduleRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "tenant": row.tenant,
        "name": row.name,
        "definition": row.definition,
        "version": row.version,
        "cron": row.cron,
        "timezone": row.timezone,
        "input": compact_json(row.input),
        "overlap": row.overlap,
        "catch_up": row.catch_up,
        "catch_up_limit": row.catch_up_limit,
        "status": row.status,
        "paused_reason": row.paused_reason,
        "next_at": row.next_at,
        "generation": row.generation,
        "last_slot": row.last_slot,
        "last_run": row.last_run,
        "runs_started": row.runs_started,
        "slots_skipped": row.slots_skipped,
        "slots_missed": row.slots_missed,
        "created_at": row.created_at,
        "created_by": row.created_by,
        "updated_at": row.updated_at,
        "updated_by": row.updated_by,
        "paused_at": row.paused_at,
        "paused_by": row.paused_by,
    }


class SqlSchedulesTx(SqlBase):
    def insert_schedule(self, row: ScheduleRow) -> None:
        try:
            self.c.execute(self.q["schedule_insert"], _params(row))
        except self.integrity_error:
            raise ConcurrencyError(f"schedule {row.name} already exists in tenant {row.tenant}") from None

    def schedule(self, tenant: str, name: str, *, lock: bool = False) -> ScheduleRow | None:
        r = self._one("schedule_lock" if lock else "schedule_get", tenant=tenant, name=name)
        return _row(r) if r else None

    def schedules(self, tenant: str) -> list[ScheduleRow]:
        return [_row(r) for r in self.c.execute(self.q["schedules_of"], {"tenant": tenant})]

    def count_schedules(self, tenant: str) -> int:
        return int(self._one("schedules_count", tenant=tenant)[0])

    def due_schedules(
        self, now_ms: int, limit: int, partitions: list[int] | None = None
    ) -> list[ScheduleRow]:
        params = {"now": now_ms, "limit": limit, "partitions": partitions}
        return [_row(r) for r in self.c.execute(self.q["schedules_due"], params).fetchall()]

    def update_schedule(self, row: ScheduleRow, expected_generation: int) -> bool:
        cur = self.c.execute(self.q["schedule_update"], {**_params(row), "expected": expected_generation})
        return bool(cur.rowcount == 1)

    def delete_schedule(self, schedule_id: str) -> None:
        self.c.execute(self.q["schedule_slots_delete"], {"id": schedule_id})
        self.c.execute(self.q["schedule_delete"], {"id": schedule_id})

    def add_slot(self, schedule_id: str, slot: SlotRow, keep: int) -> None:
        self.c.execute(
            self.q["schedule_slot_insert"],
            {
                "schedule_id": schedule_id,
                "slot_at": slot.slot_at,
                "until_at": slot.until_at,
                "count": slot.count,
                "outcome": slot.outcome,
                "started_run": slot.started_run,
                "reason": slot.reason,
                "recorded_at": slot.recorded_at,
            },
        )
        self.c.execute(self.q["schedule_slots_prune"], {"schedule_id": schedule_id, "keep": keep})

    def slots(self, schedule_id: str, limit: int) -> list[SlotRow]:
        rows = self.c.execute(self.q["schedule_slots_of"], {"schedule_id": schedule_id, "limit": limit})
        return [
            SlotRow(
                int(r[0]),
                r[1],
                r[2],
                r[3],
                int(r[4]) if r[4] is not None else None,
                int(r[5]) if r[5] is not None else None,
                r[6],
                int(r[7]),
            )
            for r in rows
        ]
