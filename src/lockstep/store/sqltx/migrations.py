"""MigrationsTx in SQL: `migration_requests`, `migration_decisions` and `migration_request_runs`."""

from __future__ import annotations

from typing import Any

from ...core.canonical import compact_json, parse_json
from ..port.migrations import MigrationDecisionRow, MigrationRequestRow, MigrationRunRow
from .base import SqlBase

__all__ = ["SqlMigrationsTx"]


def _request(r: Any) -> MigrationRequestRow:
    return {
        "request_id": r[0],
        "tenant": r[1],
        "definition": r[2],
        "from_version": int(r[3]),
        "to_version": int(r[4]),
        "mapping": parse_json(r[5]),
        "reason": r[6],
        "requested_by": r[7],
        "policy": parse_json(r[8]),
        "bulk": bool(r[9]),
        "status": r[10],
        "created_at": int(r[11]),
        "expires_at": int(r[12]),
        "decided_at": int(r[13]) if r[13] is not None else None,
        "applied_at": int(r[14]) if r[14] is not None else None,
    }


def _run(r: Any) -> MigrationRunRow:
    return {
        "request_id": r[0],
        "run_id": r[1],
        "outcome": r[2],
        "detail": r[3],
        "at": int(r[4]) if r[4] is not None else None,
    }


class SqlMigrationsTx(SqlBase):
    def insert_migration_request(self, row: MigrationRequestRow) -> None:
        params = {
            k: row[k]
            for k in (
                "request_id",
                "tenant",
                "definition",
                "from_version",
                "to_version",
                "reason",
                "requested_by",
                "bulk",
                "created_at",
                "expires_at",
            )
        }
        params["mapping"] = compact_json(row["mapping"])
        params["policy"] = compact_json(row["policy"])
        self.c.execute(self.q["migration_request_insert"], params)

    def add_migration_run(self, request_id: str, run_id: str, tenant: str) -> bool:
        params = {"request_id": request_id, "run_id": run_id, "tenant": tenant}
        return bool(self.c.execute(self.q["migration_run_insert"], params).rowcount == 1)

    def open_migration_of(self, run_id: str) -> str | None:
        r = self._one("migration_open_for_run", run_id=run_id)
        return str(r[0]) if r else None

    def migration_request(
        self, tenant: str, request_id: str, *, lock: bool = False
    ) -> MigrationRequestRow | None:
        query = "migration_request_lock" if lock else "migration_request_get"
        r = self._one(query, tenant=tenant, request_id=request_id)
        return _request(r) if r else None

    def migration_requests(self, tenant: str, status: str | None, limit: int) -> list[MigrationRequestRow]:
        params = {"tenant": tenant, "status": status, "limit": limit}
        return [_request(r) for r in self.c.execute(self.q["migration_requests_list"], params).fetchall()]

    def migration_runs(self, request_id: str) -> list[MigrationRunRow]:
        rows = self.c.execute(self.q["migration_runs_of"], {"request_id": request_id}).fetchall()
        return [_run(r) for r in rows]

    def lock_migration_run(self, request_id: str, run_id: str) -> MigrationRunRow | None:
        r = self._one("migration_run_lock", request_id=request_id, run_id=run_id)
        return _run(r) if r else None

    def set_migration_outcome(
        self, request_id: str, run_id: str, outcome: str, detail: str | None, now_ms: int
    ) -> bool:
        params = {
            "request_id": request_id,
            "run_id": run_id,
            "outcome": outcome,
            "detail": detail,
            "at": now_ms,
        }
        return bool(self.c.execute(self.q["migration_run_outcome"], params).rowcount == 1)

    def close_migration_runs(self, request_id: str, outcome: str, now_ms: int) -> None:
        params = {"request_id": request_id, "outcome": outcome, "at": now_ms}
        self.c.execute(self.q["migration_runs_close"], params)

    def migration_decisions(self, request_id: str) -> list[MigrationDecisionRow]:
        rows = self.c.execute(self.q["migration_decisions_of"], {"request_id": request_id}).fetchall()
        return [
            {
                "approver": r[0],
                "decision": r[1],
                "comment": r[2],
                "at": r[3],
                "roles": parse_json(r[4]),
                "groups": parse_json(r[5]),
            }
            for r in rows
        ]

    def insert_migration_decision(self, request_id: str, row: MigrationDecisionRow) -> bool:
        params = {
            "request_id": request_id,
            "approver": row["approver"],
            "decision": row["decision"],
            "comment": row["comment"],
            "at": row["at"],
            "roles": compact_json(row["roles"]),
            "groups": compact_json(row["groups"]),
        }
        return bool(self.c.execute(self.q["migration_decision_insert"], params).rowcount == 1)

    def set_migration_status(
        self,
        request_id: str,
        status: str,
        from_status: str,
        *,
        decided_at: int | None = None,
        applied_at: int | None = None,
    ) -> bool:
        params = {
            "request_id": request_id,
            "status": status,
            "from_status": from_status,
            "decided_at": decided_at,
            "applied_at": applied_at,
        }
        return bool(self.c.execute(self.q["migration_request_status"], params).rowcount == 1)

    def due_migration_requests(self, now_ms: int, limit: int) -> list[tuple[str, str]]:
        rows = self.c.execute(self.q["migration_due"], {"now": now_ms, "limit": limit}).fetchall()
        return [(str(r[0]), str(r[1])) for r in rows]
