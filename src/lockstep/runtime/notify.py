"""Approval notifications: the outbox rows written with ApprovalRequested (or ApproverReplaced) are
claimed here; for each eligible approver a fresh link is minted at delivery time and handed to a
channel. The raw token exists only in this process's memory and in the message sent.

Channels: `log` (a JSON log line; for development), `webhook:URL` (POST JSON), `smtp://host:port?from=ADDR`
(an e-mail to the user's address). Failed deliveries are retried with backoff, then marked failed.
"""

from __future__ import annotations

import json
import logging
import smtplib
import threading
import urllib.request
from email.message import EmailMessage
from typing import Any, Protocol
from urllib.parse import parse_qs, urlparse

import structlog

from ..approvals import Approvals
from ..errors import LockstepError
from ..service import Service

__all__ = ["Channel", "LogChannel", "Notifier", "SmtpChannel", "WebhookChannel", "channel_from_spec"]

log = logging.getLogger("lockstep.notify")
MAX_ATTEMPTS = 8


class Channel(Protocol):
    def send(self, message: dict[str, Any]) -> None: ...


class LogChannel:
    """Writes the link to the structured log: for development and for `serve --example`."""

    def __init__(self) -> None:
        self.log = structlog.get_logger("lockstep.approvals")

    def send(self, message: dict[str, Any]) -> None:
        self.log.info(
            "approval link",
            approver=message["approver"],
            url=message["url"],
            run_id=message["run_id"],
            step=message["step"],
            expires_at=message["expires_at"],
            link_id=message["link_id"],
        )


class WebhookChannel:
    def __init__(self, url: str, timeout: float = 10.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise LockstepError(f"webhook URL must be http(s): {url!r}")
        self.url = url
        self.timeout = timeout

    def send(self, message: dict[str, Any]) -> None:
        headers = {"Content-Type": "application/json", "Idempotency-Key": message["link_id"]}
        body = json.dumps(message).encode()
        # The scheme is checked in __init__ (http/https only), which is what S310 guards against.
        req = urllib.request.Request(self.url, data=body, method="POST", headers=headers)  # noqa: S310
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
            if resp.status >= 300:
                raise OSError(f"webhook answered {resp.status}")


class SmtpChannel:
    def __init__(self, host: str, port: int, sender: str, emails: dict[str, str] | None = None) -> None:
        self.host, self.port, self.sender = host, port, sender
        self.emails = emails or {}

    def send(self, message: dict[str, Any]) -> None:
        to = message.get("email")
        if not to:
            raise LockstepError(f"no e-mail address for {message['approver']} (lockstep users set-email)")
        mail = EmailMessage()
        mail["From"], mail["To"] = self.sender, to
        mail["Subject"] = f"Approval needed: {message['definition']} / {message['step']}"
        mail.set_content(
            f"{message['details']}\n\nDecide here (log in first): {message['url']}\n"
            f"This link is for you only, works once, and expires at {message['expires_at']}.\n"
        )
        with smtplib.SMTP(self.host, self.port, timeout=15) as smtp:
            smtp.send_message(mail)


def channel_from_spec(spec: str) -> Channel:
    """`log`, `webhook:https://...`, or `smtp://host:port?from=lockstep@example.com`."""
    if spec == "log":
        return LogChannel()
    if spec.startswith("webhook:"):
        return WebhookChannel(spec[len("webhook:") :])
    if spec.startswith("smtp://"):
        u = urlparse(spec)
        sender = parse_qs(u.query).get("from", ["lockstep@localhost"])[0]
        return SmtpChannel(u.hostname or "localhost", u.port or 25, sender)
    raise LockstepError(
        f"unknown notification channel {spec!r}: use log, webhook:URL or smtp://host:port?from=ADDR"
    )


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
        self, tenant: str, request: dict[str, Any], only: str | None
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

    def _deliver(self, n: dict[str, Any], now_ms: int) -> None:
        error = None
        try:
            with self.service.read() as tx:
                request = tx.approval_request(n["request_id"])
            if request is None or request["status"] != "pending":
                self._finish(n, "done", "request no longer pending", now_ms)
                return
            state = self.service.state(n["tenant"], n["run_id"])
            for approver, email in self._eligible(n["tenant"], request, n["approver"]):
                link = self.approvals.mint(n["tenant"], n["run_id"], request["step"], approver, by="notifier")
                self.channel.send(
                    {
                        **link,
                        "run_id": n["run_id"],
                        "step": request["step"],
                        "tenant": n["tenant"],
                        "definition": state.definition["name"],
                        "email": email,
                        "details": (state.approval or {}).get("details", ""),
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

    def _finish(self, n: dict[str, Any], status: str, error: str | None, available_at: int) -> None:
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
