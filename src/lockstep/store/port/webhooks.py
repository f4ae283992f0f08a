"""The webhooks aggregate: a tenant's run-webhook subscriptions and the outbox of their deliveries
(implemented by sqltx/webhooks.py). An append that produces a subscribed event writes one delivery row
per matching subscription in its own transaction (the EmitWebhook effect); the delivery pass claims
due rows, posts them outside any transaction and marks the outcome."""

from __future__ import annotations

from typing import Any, Protocol, TypedDict

__all__ = ["DeliveryRow", "DueDelivery", "SubscriptionRow", "WebhooksTx"]


class SubscriptionRow(TypedDict):
    id: str
    tenant: str
    url: str
    events: list[str]
    secret: Any  # a $sealed marker (JSON)
    enabled: bool
    created_by: str | None
    created_at: int


class DeliveryRow(TypedDict):
    id: str  # the webhook-id of every attempt
    subscription: str
    tenant: str
    run_id: str
    seq: int
    event: str
    body: str
    status: str  # pending | delivered | failed
    attempts: int
    last_status: int | None
    last_error: str | None
    available_at: int
    created_at: int
    delivered_at: int | None


class DueDelivery(TypedDict):
    id: str
    subscription: str
    tenant: str
    run_id: str
    seq: int
    event: str
    body: str
    attempts: int
    url: str
    secret: Any


class WebhooksTx(Protocol):
    def insert_subscription(
        self,
        id: str,
        tenant: str,
        url: str,
        events: list[str],
        secret: Any,
        created_by: str | None,
        now_ms: int,
    ) -> None: ...
    def subscriptions(self, tenant: str) -> list[SubscriptionRow]: ...
    def subscription(self, tenant: str, id: str) -> SubscriptionRow | None: ...
    def enable_subscription(self, tenant: str, id: str, enabled: bool) -> None: ...
    def due_deliveries(self, now_ms: int, limit: int) -> list[DueDelivery]: ...
    def claim_delivery(self, id: str, now_ms: int, until_ms: int) -> bool: ...
    def mark_delivery(
        self,
        id: str,
        status: str,
        *,
        last_status: int | None,
        error: str | None,
        available_at: int,
        delivered_at: int | None,
    ) -> None: ...
    def deliveries(self, tenant: str, subscription: str, limit: int) -> list[DeliveryRow]: ...
    def delivery(self, tenant: str, subscription: str, id: str) -> DeliveryRow | None: ...
    def replay_delivery(self, tenant: str, subscription: str, id: str, now_ms: int) -> bool: ...
