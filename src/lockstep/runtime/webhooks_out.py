"""The delivery pass of run webhooks: claim due deliveries (app/webhooks.py), post each with httpx,
signed per Standard Webhooks (`webhook-id` = the delivery's id on every attempt, `webhook-timestamp`,
`webhook-signature` under the subscription's `whsec_` secret), and record the outcome. No transaction
is open while posting. Redirects are not followed. Before every post the URL is checked again against
the tenant's egress policy and its host resolved once (runtime/egress.py); the connection goes to that
checked address only (PinnedTransport, TLS verified against the URL's name), so a name that resolves
somewhere else later, or between the check and the connect (DNS rebinding), reaches nothing. The
scheduler runs it on a thread of its own, so a slow receiver never delays timers or leases.
"""

from __future__ import annotations

import logging
import ssl
import threading
from datetime import datetime

import httpx
from standardwebhooks.webhooks import Webhook

from ..app import failpoints
from ..app.webhooks import Claimed, Webhooks
from .egress import EgressGuard, EgressRefused, PinnedTransport, Resolver, Unresolved

__all__ = ["WebhookSender"]

log = logging.getLogger("lockstep.webhooks")


class WebhookSender:
    def __init__(
        self,
        webhooks: Webhooks,
        *,
        timeout: float = 5.0,
        batch: int = 50,
        resolver: Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.webhooks = webhooks
        self.batch = batch
        self.timeout = timeout
        self.guard = EgressGuard(resolver or webhooks.resolver, loopback_ok=webhooks.loopback_ok)
        self.ssl_context = ssl_context or ssl.create_default_context()

    def close(self) -> None:
        """Nothing to release: each post has a client of its own, pinned to its checked address."""

    def headers(self, c: Claimed, now: datetime) -> dict[str, str]:
        signature = Webhook(c.secret).sign(c.id, now, c.body)
        return {
            "content-type": "application/json",
            "webhook-id": c.id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": signature,
        }

    def post(self, c: Claimed) -> tuple[int | None, str | None]:
        """(the receiver's status, why it failed): a status outside 2xx, a refused URL or a transport
        error are failures, retried."""
        try:
            hop = self.guard.vet(self.webhooks.policy(c.tenant), c.url)
        except (EgressRefused, Unresolved) as exc:
            return None, f"url refused: {exc}"[:500]
        now = self.webhooks.kernel.clock()
        transport = PinnedTransport(hop, self.ssl_context)
        try:
            with httpx.Client(
                transport=transport, timeout=self.timeout, follow_redirects=False, trust_env=False
            ) as client:
                r = client.post(c.url, content=c.body.encode(), headers=self.headers(c, now))
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}"[:500]
        # The receiver has it, the outcome is not recorded yet: a crash here must cost a second copy
        # under the same webhook-id, never a lost delivery (the fault suite kills here).
        failpoints.hit("webhooks.post", delivery=c.id, attempt=c.attempt)
        if 300 <= r.status_code < 400:
            return r.status_code, f"answered {r.status_code}: redirects are not followed; use the final URL"
        return r.status_code, None if r.status_code < 300 else f"answered {r.status_code}"

    def pass_once(self) -> int:
        """Claim and post one batch; the number of attempts made."""
        claimed = self.webhooks.claim(self.batch)
        for c in claimed:
            status, error = self.post(c)
            outcome = self.webhooks.record(c, status, error)
            if outcome != "delivered":
                log.info("webhook %s attempt %d: %s (%s)", c.id, c.attempt, outcome, error)
        return len(claimed)

    def run(self, stop: threading.Event, poll: float = 0.2) -> None:
        """Until `stop`: a pass, then (when it found nothing) a wait of `poll` seconds."""
        while not stop.is_set():
            try:
                done = self.pass_once()
            except Exception:  # a database hiccup: log, wait, go on (the rows are durable)
                log.exception("webhook delivery pass failed")
                done = 0
            if not done:
                stop.wait(poll)
