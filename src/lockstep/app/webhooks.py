"""Run webhooks, the service side: tenant admins subscribe a URL to run events; each subscription has a
signing secret (shown once, stored sealed under a data key of the subscription's own); the outbox rows
are written by the appends that produce the events (store: EmitWebhook); the delivery pass (runtime/
webhooks_out.py) claims due rows here, posts them outside any transaction, and records the outcome here.

Delivery is at least once, with the same `webhook-id` on every attempt, retried with exponential
backoff, and ordered per run and subscription (a run's next delivery waits for the one before). A
delivery that still fails after `max_attempts` is marked failed and no longer holds up the run's later
ones; an admin can replay it (or any delivery) from the log.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..core.effects import WEBHOOK_EVENTS
from ..core.egress import EgressPolicy, IPAddress, refusal, url_refusal
from ..core.sealed import label_of
from ..core.timeutil import iso
from ..errors import InvalidInput, NotFound, Refused
from ..store import DeliveryRow, Sealer, SubscriptionRow, WebhookTx
from . import failpoints
from .port import KernelPort
from .resolve import resolve

__all__ = ["Claimed", "Subscribed", "Webhooks", "new_secret", "webhook_url_refusal"]

SECRET_PREFIX = "whsec_"  # noqa: S105 - the Standard Webhooks prefix
LABEL = label_of("Webhook", "/secret")
MAX_URL = 2000
MAX_SUBSCRIPTIONS = 20  # per tenant: each matching event writes one row per subscription


def new_secret() -> str:
    """whsec_ and 32 random bytes in base64 (Standard Webhooks asks 24 to 64)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def key_id(subscription: str) -> str:
    """The id of the subscription's data key in `run_keys` (never a run id: those are hex only)."""
    return f"webhook:{subscription}"


Resolver = Callable[[str, int], list[IPAddress]]


def webhook_url_refusal(
    policy: EgressPolicy, url: str, *, loopback_ok: bool = False, resolver: Resolver = resolve
) -> str | None:
    """Why `url` may not receive the tenant's webhooks (None: it may). A receiver is an egress of the
    tenant like an http step's request: its URL must be under the tenant's egress policy (core/egress.py:
    allowed prefixes or hosts, HTTPS unless allow_http, no credentials), and every address its host
    resolves to must be public (loopback only where the policy and the server's egress_allow_loopback
    both allow it). Checked at subscription; the delivery pass checks again and connects to the checked
    address only (runtime/webhooks_out.py), so a name that later resolves elsewhere reaches nothing."""
    why = url_refusal(policy, url)
    if why is not None:
        return why
    parts = urlsplit(url)
    host = (parts.hostname or "").rstrip(".")
    try:
        addresses = resolver(host, parts.port or (443 if parts.scheme == "https" else 80))
    except (OSError, UnicodeError) as exc:
        return f"host {host} does not resolve ({getattr(exc, 'strerror', None) or exc})"
    for found in addresses:
        refused = refusal(found, policy, loopback_ok)
        if refused is not None:
            return (
                f"host {host} resolves to a refused address ({refused}): webhooks go to public addresses only"
            )
    return None


@dataclass(frozen=True)
class Subscribed:
    id: str
    tenant: str
    url: str
    events: list[str]
    secret: str  # shown once, here; stored sealed


@dataclass(frozen=True)
class Claimed:
    """A delivery taken by the pass: post `body` to `url`, signed with `secret`, as `id`."""

    id: str
    tenant: str
    run_id: str
    seq: int
    event: str
    url: str
    secret: str
    body: str
    attempt: int


class Webhooks:
    def __init__(
        self,
        kernel: KernelPort[WebhookTx],
        sealer: Sealer,
        policy: Callable[[str], EgressPolicy],
    ) -> None:
        self.kernel = kernel
        self.sealer = sealer
        # The tenant's egress policy (app/secrets.Egress.policy): the receivers it may reach.
        self.policy = policy
        # Loopback receivers need the server's egress_allow_loopback (tests only) and the policy's say.
        self.loopback_ok = kernel.server_limits["egress_allow_loopback"] == 1
        self.resolver: Resolver = resolve  # the delivery pass resolves with it too (tests swap it)
        # Server settings (the tests make them small): backoff, attempts, lease.
        self.retry_base_ms = 1000
        self.retry_cap_ms = 300_000
        self.max_attempts = 30
        self.lease_ms = 30_000

    def url_allowed(self, tenant: str, url: str) -> str | None:
        """Why `url` may not receive `tenant`'s webhooks now (None: it may)."""
        return webhook_url_refusal(
            self.policy(tenant), url, loopback_ok=self.loopback_ok, resolver=self.resolver
        )

    def _now_ms(self) -> int:
        return int(self.kernel.clock().timestamp() * 1000)

    def subscribe(self, tenant: str, url: str, events: list[str], actor: str | None) -> Subscribed:
        """A new subscription; its secret is in the answer and nowhere else in clear."""
        events = list(dict.fromkeys(e.strip() for e in events if e.strip()))
        unknown = [e for e in events if e not in WEBHOOK_EVENTS]
        if not events or unknown:
            raise InvalidInput(
                f"events: {'unknown ' + ', '.join(unknown) if unknown else 'name at least one'}; "
                f"subscribe to any of {', '.join(WEBHOOK_EVENTS)}",
                code="invalid_events",
            )
        if len(url) > MAX_URL:
            raise InvalidInput(f"url: at most {MAX_URL} characters", code="invalid_url")
        why = self.url_allowed(tenant, url)
        if why is not None:
            raise InvalidInput(f"url {url[:200]!r} {why}", code="url_not_allowed")
        sub_id, secret = secrets.token_hex(8), new_secret()
        with self.kernel.write() as tx:
            if tx.tenant(tenant) is None:
                raise NotFound(f"tenant {tenant} not found")
            if len(tx.subscriptions(tenant)) >= MAX_SUBSCRIPTIONS:
                raise Refused(
                    f"tenant {tenant} has {MAX_SUBSCRIPTIONS} webhook subscriptions (the limit)",
                    code="too_many_subscriptions",
                )
            (marker,) = self.sealer.seal(tx, tenant, key_id(sub_id), [(LABEL, secret)], new=True)
            tx.insert_subscription(sub_id, tenant, url, events, marker, actor, self._now_ms())
            tx.audit(
                iso(self.kernel.clock()),
                tenant,
                actor,
                "webhook.create",
                sub_id,
                "ok",
                {"url": url, "events": list(events)},
            )
        return Subscribed(sub_id, tenant, url, events, secret)

    def subscriptions(self, tenant: str) -> list[SubscriptionRow]:
        with self.kernel.read() as tx:
            return tx.subscriptions(tenant)

    def _subscription(self, tx: WebhookTx, tenant: str, sub_id: str) -> SubscriptionRow:
        row = tx.subscription(tenant, sub_id)
        if row is None:
            raise NotFound(
                f"no webhook subscription {sub_id[:64]} in tenant {tenant}", code="unknown_webhook"
            )
        return row

    def deliveries(self, tenant: str, sub_id: str, limit: int = 100) -> list[DeliveryRow]:
        """The subscription's delivery log, newest first; another tenant's id is not found."""
        with self.kernel.read() as tx:
            self._subscription(tx, tenant, sub_id)
            return tx.deliveries(tenant, sub_id, max(1, min(limit, 1000)))

    def replay(self, tenant: str, sub_id: str, delivery_id: str, actor: str | None) -> DeliveryRow:
        """Deliver again (same webhook-id, so a receiver that kept it can drop the copy)."""
        with self.kernel.write() as tx:
            self._subscription(tx, tenant, sub_id)
            if not tx.replay_delivery(tenant, sub_id, delivery_id, self._now_ms()):
                raise NotFound(
                    f"no delivery {delivery_id[:100]} of webhook {sub_id}", code="unknown_delivery"
                )
            tx.audit(
                iso(self.kernel.clock()),
                tenant,
                actor,
                "webhook.replay",
                delivery_id,
                "ok",
                {"subscription": sub_id},
            )
            row = tx.delivery(tenant, sub_id, delivery_id)
        if row is None:  # pragma: no cover - just updated in this transaction
            raise NotFound(f"no delivery {delivery_id[:100]}")
        return row

    # --- the delivery pass (runtime/webhooks_out.py) ----------------------------------------------
    def claim(self, limit: int = 50) -> list[Claimed]:
        """Take due deliveries for one lease: another pass takes them again only once it runs out, so a
        pass killed mid-post loses nothing (and the retry carries the same webhook-id)."""
        now = self._now_ms()
        out = []
        with self.kernel.write() as tx:
            for d in tx.due_deliveries(now, limit):
                if not tx.claim_delivery(d["id"], now, now + self.lease_ms):
                    continue
                secret = self.sealer.open(tx, d["tenant"], key_id(d["subscription"]), d["secret"])
                out.append(
                    Claimed(
                        d["id"],
                        d["tenant"],
                        d["run_id"],
                        d["seq"],
                        d["event"],
                        d["url"],
                        str(secret),
                        d["body"],
                        d["attempts"] + 1,
                    )
                )
        return out

    def record(self, c: Claimed, status: int | None, error: str | None) -> str:
        """The outcome of one attempt: delivered (2xx), or retried after a backoff, or failed for good."""
        now = self._now_ms()
        ok = status is not None and 200 <= status < 300 and error is None
        if not ok and failpoints.enabled("unsafe.webhook_drop_failed", delivery=c.id):
            ok = True  # the deliberately broken build: a failed attempt counts as delivered
        if ok:
            outcome, at = "delivered", now
        elif c.attempt >= self.max_attempts:
            outcome, at = "failed", now
        else:
            outcome, at = "pending", now + min(self.retry_cap_ms, self.retry_base_ms * 2 ** (c.attempt - 1))
        with self.kernel.write() as tx:
            tx.mark_delivery(
                c.id,
                outcome,
                last_status=status,
                error=(error or "")[:500] or None,
                available_at=at,
                delivered_at=now if ok else None,
            )
        return outcome
