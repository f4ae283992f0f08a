"""WebhooksTx in SQL: `webhook_subscriptions` and the outbox `webhook_deliveries`, whose rows the
EmitWebhook effect of an append writes (one per matching subscription, in the append's transaction)."""

from __future__ import annotations

from typing import Any

from ...core.canonical import compact_json, parse_json
from ...core.effects import EmitWebhook
from ...core.state import RunState
from ..port.webhooks import DeliveryRow, DueDelivery, SubscriptionRow
from .base import SqlBase

__all__ = ["SqlWebhooksTx"]


def _sub(r: Any) -> SubscriptionRow:
    return {
        "id": r[0],
        "tenant": r[1],
        "url": r[2],
        "events": [e for e in r[3].split(",") if e],
        "secret": parse_json(r[4]),
        "enabled": bool(r[5]),
        "created_by": r[6],
        "created_at": int(r[7]),
    }


def _delivery(r: Any) -> DeliveryRow:
    return {
        "id": r[0],
        "subscription": r[1],
        "tenant": r[2],
        "run_id": r[3],
        "seq": int(r[4]),
        "event": r[5],
        "body": r[6],
        "status": r[7],
        "attempts": int(r[8]),
        "last_status": int(r[9]) if r[9] is not None else None,
        "last_error": r[10],
        "available_at": int(r[11]),
        "created_at": int(r[12]),
        "delivered_at": int(r[13]) if r[13] is not None else None,
    }


class SqlWebhooksTx(SqlBase):
    def insert_subscription(
        self,
        id: str,
        tenant: str,
        url: str,
        events: list[str],
        secret: Any,
        created_by: str | None,
        now_ms: int,
    ) -> None:
        params = {
            "id": id,
            "tenant": tenant,
            "url": url,
            "events": "," + ",".join(events) + ",",
            "secret": compact_json(secret),
            "created_by": created_by,
            "now": now_ms,
        }
        self.c.execute(self.q["webhook_sub_insert"], params)

    def subscriptions(self, tenant: str) -> list[SubscriptionRow]:
        return [_sub(r) for r in self.c.execute(self.q["webhook_subs_list"], {"tenant": tenant}).fetchall()]

    def subscription(self, tenant: str, id: str) -> SubscriptionRow | None:
        r = self._one("webhook_sub_get", tenant=tenant, id=id)
        return _sub(r) if r else None

    def enable_subscription(self, tenant: str, id: str, enabled: bool) -> None:
        self.c.execute(self.q["webhook_sub_enable"], {"tenant": tenant, "id": id, "enabled": int(enabled)})

    def due_deliveries(self, now_ms: int, limit: int) -> list[DueDelivery]:
        rows = self.c.execute(self.q["webhook_due"], {"now": now_ms, "limit": limit}).fetchall()
        keys = ("id", "subscription", "tenant", "run_id", "seq", "event", "body", "attempts", "url")
        out: list[DueDelivery] = []
        for r in rows:
            d: Any = dict(zip(keys, r[:9], strict=True))
            d["seq"], d["attempts"], d["secret"] = int(d["seq"]), int(d["attempts"]), parse_json(r[9])
            out.append(d)
        return out

    def claim_delivery(self, id: str, now_ms: int, until_ms: int) -> bool:
        cur = self.c.execute(self.q["webhook_claim"], {"id": id, "now": now_ms, "until": until_ms})
        return bool(cur.rowcount == 1)

    def mark_delivery(
        self,
        id: str,
        status: str,
        *,
        last_status: int | None,
        error: str | None,
        available_at: int,
        delivered_at: int | None,
    ) -> None:
        params = {
            "id": id,
            "status": status,
            "last_status": last_status,
            "error": error,
            "available_at": available_at,
            "delivered_at": delivered_at,
        }
        self.c.execute(self.q["webhook_mark"], params)

    def deliveries(self, tenant: str, subscription: str, limit: int) -> list[DeliveryRow]:
        params = {"tenant": tenant, "subscription": subscription, "limit": limit}
        return [_delivery(r) for r in self.c.execute(self.q["webhook_deliveries_list"], params).fetchall()]

    def delivery(self, tenant: str, subscription: str, id: str) -> DeliveryRow | None:
        r = self._one("webhook_delivery_get", tenant=tenant, subscription=subscription, id=id)
        return _delivery(r) if r else None

    def replay_delivery(self, tenant: str, subscription: str, id: str, now_ms: int) -> bool:
        params = {"tenant": tenant, "subscription": subscription, "id": id, "now": now_ms}
        return bool(self.c.execute(self.q["webhook_replay"], params).rowcount == 1)

    def _write_webhook_effect(self, run: RunState, fx: EmitWebhook, now_ms: int) -> None:
        """The deliveries of one run event: a row per enabled subscription of the run's tenant that
        names the event (none, at the cost of one indexed query, when nobody subscribed)."""
        body = {
            "type": fx.event,
            "timestamp": fx.at,
            "data": {
                "tenant": run.tenant,
                "run_id": run.run_id,
                "definition": run.definition["name"],
                "version": run.definition["version"],
                "seq": fx.seq,
                **(fx.data if isinstance(fx.data, dict) else {}),
            },
        }
        params = {
            "suffix": f"{run.run_id}_{fx.seq}",
            "run_id": run.run_id,
            "seq": fx.seq,
            "event": fx.event,
            "body": compact_json(body),
            "now": now_ms,
            "tenant": run.tenant,
            "pattern": f"%,{fx.event},%",
        }
        self._write("webhook_deliveries_insert", params)
