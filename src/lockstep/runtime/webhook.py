"""The approval webhook: a JSON POST signed per the Standard Webhooks specification.

Headers: `webhook-id` (the same for every retry of one message, so a receiver drops duplicates),
`webhook-timestamp` (seconds; a receiver refuses old ones, which stops replays) and `webhook-signature`
(`v1,` + base64 HMAC-SHA256 of "id.timestamp.body" under the channel's `whsec_` secret). Any Standard
Webhooks library verifies it. The secret comes from LOCKSTEP_WEBHOOK_SECRET or the file named by
LOCKSTEP_WEBHOOK_SECRET_FILE; `lockstep webhooks secret` makes one.

Redirects are never followed (a 3xx is a failed delivery) and no proxy is used: the connection goes to
the address that the destination policy (outbound.py) vetted.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import http.client
import json
import secrets
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from urllib.parse import urlsplit

from standardwebhooks.webhooks import Webhook

from ..core.canonical import JSONObject
from ..errors import InvalidInput
from .outbound import IPAddress, OutboundPolicy, read_secret, resolve

__all__ = ["SECRET_ENV", "WebhookChannel", "new_secret", "webhook_secret"]

SECRET_ENV = "LOCKSTEP_WEBHOOK_SECRET"  # noqa: S105 - the variable's name
SECRET_PREFIX = "whsec_"  # noqa: S105 - the specification's prefix
HOW_TO_CREATE = (
    "create one with `lockstep webhooks secret > webhook.secret` (chmod 600), give it to the receiver, "
    f"and start with {SECRET_ENV}_FILE=webhook.secret (or {SECRET_ENV}=whsec_...)"
)


def new_secret() -> str:
    """A fresh channel secret: whsec_ and 32 random bytes in base64 (the specification asks 24 to 64)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def webhook_secret(env: Mapping[str, str]) -> str:
    """The configured secret, checked; InvalidInput saying how to create one when it is missing or bad."""
    value = read_secret(env, SECRET_ENV, "the webhook signing secret", HOW_TO_CREATE)
    if value is None:
        raise InvalidInput(f"webhook notifications are signed and no secret is set: {HOW_TO_CREATE}")
    if not value.startswith(SECRET_PREFIX):
        raise InvalidInput(f"the webhook secret must start with {SECRET_PREFIX}: {HOW_TO_CREATE}")
    try:
        key = base64.b64decode(value[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"the webhook secret is not {SECRET_PREFIX} + base64: {HOW_TO_CREATE}") from None
    if not 24 <= len(key) <= 64:
        raise InvalidInput(
            f"the webhook secret must hold 24 to 64 bytes (it has {len(key)}): {HOW_TO_CREATE}"
        )
    return value


class WebhookChannel:
    def __init__(
        self,
        url: str,
        secret: str,
        policy: OutboundPolicy | None = None,
        *,
        timeout: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.policy = policy or OutboundPolicy()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(f"webhook URL must be https://host/path: {url!r}")
        if parts.username is not None or parts.password is not None:
            raise InvalidInput(
                "put no credentials in the webhook URL (they would show in the process list and logs): "
                "the receiver authenticates lockstep by the webhook-signature header"
            )
        self.url, self.host = url, parts.hostname
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.signer = Webhook(secret)
        self.timeout = timeout
        self.ssl_context = ssl_context or ssl.create_default_context()
        self.wall_clock = wall_clock
        with contextlib.suppress(OSError):  # not resolvable now: checked again before each delivery
            self._vetted()

    def _vetted(self) -> list[IPAddress]:
        addresses = resolve(self.host, self.port)
        self.policy.vet(
            "webhook", self.host, addresses, clear_text=not self.tls, insecure_flag="--allow-insecure-http"
        )
        return addresses

    def headers(self, message_id: str, body: bytes) -> dict[str, str]:
        now = int(self.wall_clock())
        signature = self.signer.sign(message_id, datetime.fromtimestamp(now, UTC), body.decode())
        return {
            "Content-Type": "application/json",
            "webhook-id": message_id,
            "webhook-timestamp": str(now),
            "webhook-signature": signature,
        }

    def send(self, message: JSONObject) -> None:
        body = json.dumps(message, separators=(",", ":")).encode()
        headers = self.headers(message["message_id"], body)
        try:
            addresses = self._vetted()
        except InvalidInput as exc:  # the name now resolves somewhere it may not go: a failed delivery
            raise OSError(str(exc)) from None
        conn = self._connect(addresses)
        try:
            conn.request("POST", self.target, body=body, headers=headers)
            status = conn.getresponse().status
        except http.client.HTTPException as exc:  # a garbled answer: a failed delivery, retried
            raise OSError(f"webhook answered badly: {type(exc).__name__}: {exc}") from None
        finally:
            conn.close()
        if 300 <= status < 400:
            raise OSError(f"webhook answered {status}: redirects are not followed; use the final URL")
        if status >= 300:
            raise OSError(f"webhook answered {status}")

    def _connect(self, addresses: list[IPAddress]) -> http.client.HTTPConnection:
        """A connection to the first vetted address that accepts one (and, for https, whose certificate
        is valid for the host name). Only connecting moves on to the next address: once a request is
        sent, a failure is the delivery's, so the receiver never gets the message twice from one try."""
        last: OSError = OSError(f"webhook host {self.host} has no address")
        for address in addresses:
            conn = self._connection(address)
            try:
                conn.connect()
                return conn
            except OSError as exc:
                conn.close()
                last = exc
        raise last

    def _connection(self, address: IPAddress) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self.tls:  # the certificate is checked against the host name, the socket goes to `address`
            conn = http.client.HTTPSConnection(
                self.host, self.port, timeout=self.timeout, context=self.ssl_context
            )
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        conn._create_connection = lambda _addr, timeout, source: socket.create_connection(  # type: ignore[attr-defined]
            (str(address), self.port), timeout, source
        )
        return conn
