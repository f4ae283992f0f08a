"""AuditTx in SQL: the audit log (who did what to which target, and the outcome)."""

from __future__ import annotations

import json

from ...core.canonical import JSONObject, canonical_json
from ..port import AuditRow
from .base import SqlBase

__all__ = ["SqlAuditTx"]


class SqlAuditTx(SqlBase):
    def audit(
        self,
        at: str,
        tenant: str | None,
        actor: str | None,
        action: str,
        target: str | None,
        outcome: str,
        detail: JSONObject,
    ) -> None:
        self.c.execute(
            self.q["audit_insert"],
            {
                "at": at,
                "tenant": tenant,
                "actor": actor,
                "action": action,
                "target": target,
                "outcome": outcome,
                "detail": canonical_json(detail),
            },
        )

    def audit_log(self, tenant: str, limit: int) -> list[AuditRow]:
        rows = self.c.execute(self.q["audit_list"], {"tenant": tenant, "limit": limit}).fetchall()
        return [
            {
                "id": r[0],
                "at": r[1],
                "tenant": r[2],
                "actor": r[3],
                "action": r[4],
                "target": r[5],
                "outcome": r[6],
                "detail": json.loads(r[7]),
            }
            for r in rows
        ]
