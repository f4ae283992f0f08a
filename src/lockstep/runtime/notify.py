"""Approval notifications: the outbox rows written with ApprovalRequested (or ApproverReplaced) are
claimed here; for each eligible approver a fresh link is minted at delivery time and handed to a
channel. The raw token exists only in this process's memory and in the message sent.

Channels: `log` (a JSON log line; for development), `webhook:URL` (a signed JSON POST: webhook.py),
`smtp://` or `smtps://` (an e-mail to the user's address: mail.py). Where they may connect is the
destination policy's call (outbound.py). Failed deliveries are retried with backoff, then marked failed;
every retry of a message keeps its message id.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Mapping
from typing import Protocol

import structlog

from ..app.approvals import Approvals
from ..app.service import Service
from ..core.canonical import JSONObject, JSONValue
from ..core.lanes import approval_at
from ..core.sealed import READ_GRANT, REDACTED, contains_marker
from ..errors import InvalidInput, LockstepError
from ..store import ApprovalRequestRow, NotificationRow
from .mail import SmtpChannel, smtp_channel
from .outbound import OutboundPolicy
from .webhook import WebhookChannel, webhook_secret

__all__ = [
    "Channel",
    "LogChannel",
    "Notifier",
    "OutboundPolicy",
    "SmtpChannel",
    "WebhookChannel",
    "channel_from_spec",
    "shown_details",
]

log = logging.getLogger("lockstep.notify")
MAX_ATTEMPTS = 8


class Channel(Protocol):
    def send(self, message: JSONObject) -> None: ...


class LogChannel:
    """Writes the link to the structured log: for development and for `serve --example`."""

    def __init__(self) -> None:
        self.log = structlog.get_logger("lockstep.app.approvals")

    def send(self, message: JSONObject) -> None:
        self.log.info(
            "approval link",
            approver=message["approver"],
            url=message["url"],
            run_id=message["run_id"],
            step=message["step"],
            expires_at=message["expires_at"],
            link_id=message["link_id"],
        )


def channel_from_spec(
    spec: str, policy: OutboundPolicy | None = None, env: Mapping[str, str] | None = None
) -> Channel:
    """`log`, `webhook:https://...` or `smtp(s)://host:port?from=ADDR`: refused (InvalidInput, with the
    fix) when the destination policy or the channel's secrets say no, so `lockstep serve` stops at once."""
    policy = policy or OutboundPolicy()
    env = os.environ if env is None else env
    if spec == "log":
        return LogChannel()
    if spec.startswith("webhook:"):
        return WebhookChannel(spec[len("webhook:") :], webhook_secret(env), policy)
    if spec.startswith(("smtp://", "smtps://")):
        return smtp_channel(spec, env, policy)
    raise InvalidInput(
        f"unknown notification channel {spec!r}: use log, webhook:https://HOST/PATH or "
        "smtp://HOST:PORT?from=ADDR (smtps:// for implicit TLS)"
    )


def shown_details(details: JSONValue) -> str:
    """The approval details a message carries: a sealed value (or one holding any) is never sent, only
    a note that it exists and who may read it on the approval page."""
    if isinstance(details, str):
        return details
    if contains_marker(details) or (isinstance(details, dict) and REDACTED in details):
        return f"(the details are sensitive: only users with the {READ_GRANT} grant read them, in lockstep)"
    return str(details)


def message_id(n: NotificationRow, approver: str) -> str:
    """The Standard Webhooks `webhook-id` of one outbox row's message to one approver: the same on every
    retry, so a receiver that saw it drops the duplicate (each retry carries a freshly minted link, as
    raw tokens are never stored; the first one stays valid until it expires)."""
    key = f"{n['tenant']}\n{n['run_id']}\n{n['request_id']}\n{n['id']}\n{approver}"
    return "msg_" + hashlib.sha256(key.encode()).hexdigest()[:32]


class Notifier:
    def __init__(
        self, service: Service, approvals: Approvals, channel: Channel, *, poll: float = 0.5
    ) -> None:
        self.service = service
        self.approvals = approvals
        self.channel = channel
        self.poll = poll
        self.wake = threading.Event()

    def _eligible(
        self, tenant: str, request: ApprovalRequestRow, only: str | None
    ) -> list[tuple[str, str | None]]:
        with self.service.read() as tx:
            users = tx.tenant_users(tenant)
            decided = {u.name for u in users if tx.approval_decision(request["request_id"], u.name)}
        out = []
        for u in users:
            if u.disabled or "approver" not in u.roles or u.name in decided:
                continue
            if only is not None and u.name != only:
                continue
            if u.name not in request["users"] and not set(u.groups) & set(request["groups"]):
                continue
            if not request["allow_initiator"] and u.name == request["initiator"]:
                continue
            out.append((u.name, u.email))
        return out

    def tick(self) -> int:
        now_ms = int(self.service.clock().timestamp() * 1000)
        with self.service.write() as tx:
            batch = tx.claim_notifications(now_ms, 20, 60_000)
        for n in batch:
            self._deliver(n, now_ms)
        return len(batch)

    def _deliver(self, n: NotificationRow, now_ms: int) -> None:
        error = None
        try:
            with self.service.read() as tx:
                request = tx.approval_request(n["request_id"])
            if request is None or request["status"] != "pending":
                self._finish(n, "done", "request no longer pending", now_ms)
                return
            state = self.service.state(n["tenant"], n["run_id"])
            pending = approval_at(state, request["step"]) or {}  # one of several, in a parallel step
            for approver, email in self._eligible(n["tenant"], request, n["approver"]):
                link = self.approvals.mint(n["tenant"], n["run_id"], request["step"], approver, by="notifier")
                self.channel.send(
                    {
                        **link.plain(),
                        "run_id": n["run_id"],
                        "step": request["step"],
                        "tenant": n["tenant"],
                        "definition": state.definition["name"],
                        "email": email,
                        "details": shown_details(pending.get("details", "")),
                        "message_id": message_id(n, approver),
                    }
                )
        except (LockstepError, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            log.warning("approval notification %s failed (attempt %d): %s", n["id"], n["attempts"], error)
        if error is None:
            self._finish(n, "done", None, now_ms)
        elif n["attempts"] >= MAX_ATTEMPTS:
            self._finish(n, "failed", error, now_ms)
        else:
            self._finish(n, "ready", error, now_ms + 1000 * 2 ** min(n["attempts"], 8))

    def _finish(self, n: NotificationRow, status: str, error: str | None, available_at: int) -> None:
        with self.service.write() as tx:
            tx.finish_notification(n["id"], status, error, available_at)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                if self.tick():
                    continue
            except Exception as exc:  # never let the notifier thread die
                log.warning("notifier pass failed: %s", exc)
            self.wake.wait(self.poll)
            self.wake.clear()
