"""The notifications aggregate: the outbox of approval notifications, leased by the notifier while it
sends (implemented by sqltx/notifications.py)."""

from __future__ import annotations

from typing import Protocol, TypedDict

__all__ = ["NotificationRow", "NotificationsTx"]


class NotificationRow(TypedDict):
    """One approver to tell about one request, leased by the notifier while it sends."""

    id: int
    tenant: str
    run_id: str
    request_id: str
    approver: str
    attempts: int  # this one included


class NotificationsTx(Protocol):
    def claim_notifications(self, now_ms: int, limit: int, lease_ms: int) -> list[NotificationRow]: ...
    def finish_notification(self, nid: int, status: str, error: str | None, available_at: int) -> None: ...
