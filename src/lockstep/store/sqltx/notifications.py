"""NotificationsTx in SQL: the outbox of approval notifications (a row per approver to tell, leased by
the notifier while it sends), and the rows an append's NotifyApprovers effects write."""

from __future__ import annotations

from ...core.effects import NotifyApprovers
from ...core.state import RunState
from ..port import NotificationRow
from .base import SqlBase

__all__ = ["SqlNotificationsTx"]


class SqlNotificationsTx(SqlBase):
    def claim_notifications(self, now_ms: int, limit: int, lease_ms: int) -> list[NotificationRow]:
        rows = self.c.execute(self.q["notifications_ready"], {"now": now_ms, "limit": limit}).fetchall()
        for r in rows:
            self.c.execute(self.q["notification_lease"], {"id": r[0], "until": now_ms + lease_ms})
        return [
            {
                "id": r[0],
                "tenant": r[1],
                "run_id": r[2],
                "request_id": r[3],
                "approver": r[4],
                "attempts": r[5] + 1,
            }
            for r in rows
        ]

    def finish_notification(self, nid: int, status: str, error: str | None, available_at: int) -> None:
        self.c.execute(
            self.q["notification_finish"],
            {"id": nid, "status": status, "error": error, "available_at": available_at},
        )

    def _write_notification(self, run: RunState, fx: NotifyApprovers, now_ms: int) -> None:
        self.c.execute(
            self.q["notification_insert"],
            {
                "tenant": run.tenant,
                "run_id": run.run_id,
                "request_id": fx.request_id,
                "approver": fx.approver,
                "now": now_ms,
            },
        )
