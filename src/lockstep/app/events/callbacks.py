"""Per-wait callback URLs (`callback: true` on a `wait_event` step) and the tenants' integration
secrets that sign their bodies.

A callback is minted on request by someone who may operate the run (the token is shown in that answer
once: 256 bits from `secrets`, of which only the sha256 is stored, in the run's history and in
`event_callbacks`), bound to the tenant, the run, the step key and the wait's generation, expiring
with the step's timeout, single use. The body is the event's payload. When the step names an
integration, the body must carry a valid Standard Webhooks signature under that integration's secret
(`lockstep integrations set`, sealed under a data key of the tenant). Every answer is an approval
link's: unknown or malformed 404, used 409, expired or replaced 410, the run moved on 410, a bad
signature 401; each is audited, and none changes the run."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from datetime import UTC, datetime
from typing import Any

from standardwebhooks.webhooks import Webhook

from ...core.commands import DeliverEvent, IssueCallback, Rejected
from ...core.timeutil import iso, parse_iso
from ...errors import Conflict, Gone, InvalidInput, LockstepError, NotFound, Refused, Unauthenticated
from ...store import CallbackRow, EventTx, Sealer
from ..audit import Audit
from ..kernel import epoch_ms
from ..port import KernelPort
from ..principals import Principal
from ..principals.roles import check_name
from ..views.events import (
    CallbackAccepted,
    CallbackView,
    EventWaitView,
    IntegrationSet,
    IntegrationView,
    MintedCallback,
    RunEventWaits,
)

__all__ = ["TOKEN_RE", "Callbacks", "callback_hash"]

# 256 bits from secrets.token_urlsafe(32): 43 URL-safe characters (as an approval link's).
TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{43}$")
_UNKNOWN = "unknown or malformed callback"


def callback_hash(token: str) -> str:
    """What is stored of a callback's token (and looked up by): its sha256."""
    return hashlib.sha256(token.encode()).hexdigest()


def _key_id(name: str) -> str:
    """The data key an integration's secret is sealed under (a key of its own, wrapped by the
    tenant's key like a run's: rotation re-wraps it, shredding the tenant destroys it)."""
    return f"integration:{name}"


class Callbacks:
    def __init__(self, kernel: KernelPort[EventTx], sealer: Sealer | None, base_url: str) -> None:
        self.kernel = kernel
        self.sealer = sealer
        self.base_url = base_url.rstrip("/")
        self.audit = Audit(kernel)

    def linking_to(self, base_url: str) -> Callbacks:
        """The same callbacks, minting URLs under `base_url` (the server's public address)."""
        return Callbacks(self.kernel, self.sealer, base_url)

    # --- minting -------------------------------------------------------------------------------
    def mint(self, p: Principal, run_id: str, step: str) -> MintedCallback:
        token = secrets.token_urlsafe(32)
        callback_id = "cb_" + secrets.token_hex(8)
        now = self.kernel.clock()
        try:
            with self.kernel.write() as tx:
                loaded = tx.load_run(run_id)
                if loaded is None or loaded.state.tenant != p.tenant:
                    raise self.kernel.missing(tx, run_id, p.tenant)
                wait = loaded.state.event_waits.get(step)
                if wait is None:
                    raise Refused(
                        f"run {run_id} does not wait for an event at step {step}", code="not_waiting"
                    )
                cmd = IssueCallback(step, wait["generation"], callback_id, callback_hash(token), p.name)
                try:
                    self.kernel.apply(tx, loaded, cmd, now, self.kernel.definition_of(tx, loaded.state))
                except Rejected as r:
                    raise Refused(r.reason, code=r.code) from None
                detail = {"run_id": run_id, "step": step, "expires_at": wait["expires_at"]}
                self.audit.record(p.tenant, p.name, "event.callback_mint", callback_id, "ok", tx=tx, **detail)
        except LockstepError as exc:
            self.audit.refused(p.tenant, p.name, "event.callback_mint", run_id, exc.code, step=step)
            raise
        return MintedCallback(
            url=f"{self.base_url}/v1/callbacks/{token}",
            token=token,
            callback_id=callback_id,
            run_id=run_id,
            step=step,
            expires_at=wait["expires_at"],
            signed_by=wait.get("integration"),
        )

    # --- receiving -----------------------------------------------------------------------------
    def receive(self, token: str, body: bytes, headers: dict[str, str]) -> CallbackAccepted:
        """A callback's POST: checked like an approval link, then the step's event in one transaction."""
        row: CallbackRow | None = None
        try:
            row = self._row(token)
            self._usable(row)
            payload = self._checked(row, body, headers)
            return self._deliver(row, payload)
        except LockstepError as exc:
            tenant = row["tenant"] if row is not None else None
            target = row["callback_id"] if row is not None else None
            extra = {"run_id": row["run_id"], "step": row["step"]} if row is not None else {}
            self.audit.refused(tenant, None, "event.callback", target, exc.code, **extra)
            raise

    def _row(self, token: str) -> CallbackRow:
        if not TOKEN_RE.match(token):
            raise NotFound(_UNKNOWN, code="unknown_callback")
        with self.kernel.read() as tx:
            row = tx.callback_get(callback_hash(token))
        if row is None:
            raise NotFound(_UNKNOWN, code="unknown_callback")
        return row

    def _usable(self, row: CallbackRow) -> None:
        status, cid = row["status"], row["callback_id"]
        if status == "used":
            raise Conflict(f"callback {cid} was used already: it is single use", code="already_used")
        if status == "replaced":
            raise Gone(f"callback {cid} was replaced by a newer one for the same wait", code="replaced")
        if status == "closed":
            raise Gone(f"callback {cid}: the run moved on, its step no longer waits", code="stale")
        if parse_iso(row["expires_at"]) <= self.kernel.clock():
            raise Gone(f"callback {cid} expired at {row['expires_at']}", code="expired")

    def _checked(self, row: CallbackRow, body: bytes, headers: dict[str, str]) -> Any:
        """The payload, once the wait is still this callback's and the signature (if any) is good."""
        state = self.kernel.state(row["tenant"], row["run_id"])
        wait = state.event_waits.get(row["step"])
        if wait is None or wait["generation"] != row["generation"]:
            raise Gone(
                f"callback {row['callback_id']}: the run moved on, its step no longer waits", code="stale"
            )
        integration = wait.get("integration")
        if integration:
            secret = self._secret(row["tenant"], str(integration))
            try:
                Webhook(secret).verify(body, headers, json_parse=False)
            except Exception:  # any malformed header or signature is the same answer
                raise Unauthenticated(
                    f"the body is not signed by integration {integration} (Standard Webhooks: webhook-id, "
                    "webhook-timestamp within 5 minutes, webhook-signature)",
                    code="bad_signature",
                ) from None
        try:
            payload = json.loads(body) if body else None
        except (ValueError, UnicodeDecodeError):
            raise InvalidInput("the callback's body must be JSON (it is the event's payload)") from None
        self.kernel.check_value(row["tenant"], payload, "max_payload_bytes", "the callback's payload")
        return payload

    def _deliver(self, row: CallbackRow, payload: Any) -> CallbackAccepted:
        now = self.kernel.clock()
        tenant, run_id, step = row["tenant"], row["run_id"], row["step"]
        with self.kernel.write() as tx:
            if not tx.callback_use(row["token_hash"], epoch_ms(now)):  # a concurrent use won
                again = tx.callback_get(row["token_hash"])
                self._usable(again or row)
                raise Conflict(f"callback {row['callback_id']} was used already", code="already_used")
            loaded = tx.load_run(run_id)
            if loaded is None or loaded.state.tenant != tenant:
                raise self.kernel.missing(tx, run_id, tenant)
            wait = loaded.state.event_waits.get(step) or {}
            cmd = DeliverEvent(
                step,
                row["generation"],
                f"callback:{row['callback_id']}",
                str(wait.get("name", "")),
                str(wait.get("key", "")),
                payload,
                via="callback",
                callback_id=row["callback_id"],
                token_hash=row["token_hash"],
            )
            try:
                self.kernel.apply(tx, loaded, cmd, now, self.kernel.definition_of(tx, loaded.state))
            except Rejected as r:  # rolled back: the callback stays as it was
                if r.code == "payload_invalid":
                    raise InvalidInput(r.reason, code="payload_invalid") from None
                raise Gone(f"callback {row['callback_id']}: {r.reason}", code="stale") from None
            detail = {"run_id": run_id, "step": step}
            self.audit.record(tenant, None, "event.callback", row["callback_id"], "ok", tx=tx, **detail)
        return CallbackAccepted(run_id=run_id, step=step, callback_id=row["callback_id"])

    def waits(self, tenant: str, run_id: str) -> RunEventWaits:
        """A run's open event waits and every callback minted for it, never a token."""
        state = self.kernel.state(tenant, run_id)
        with self.kernel.read() as tx:
            rows = tx.callbacks_of_run(run_id)
        waits = [
            EventWaitView(
                step=k,
                name=w["name"],
                key=w["key"],
                generation=w["generation"],
                since=w["at"],
                expires_at=w["expires_at"],
                callback=bool(w.get("callback")),
                integration=w.get("integration"),
            )
            for k, w in sorted(state.event_waits.items())
        ]
        callbacks = [
            CallbackView(
                callback_id=r["callback_id"],
                step=r["step"],
                generation=r["generation"],
                status=r["status"],
                expires_at=r["expires_at"],
            )
            for r in rows
        ]
        return RunEventWaits(run_id=run_id, waits=waits, callbacks=callbacks)

    # --- integrations --------------------------------------------------------------------------
    def set_integration(self, tenant: str, name: str, secret: str, actor: str | None) -> IntegrationSet:
        check_name("integration", name)
        secret = secret.strip()
        try:
            raw = Webhook(secret)._whsecret
        except Exception:
            raw = b""
        if not secret.startswith("whsec_") or len(raw) < 24:
            raise InvalidInput(
                "an integration secret is a Standard Webhooks secret: whsec_ and at least 24 random bytes "
                "in base64 (e.g. `lockstep webhooks secret`), given on stdin"
            )
        sealer = self._sealer()
        with self.kernel.write() as tx:
            if tx.tenant(tenant) is None:
                raise NotFound(f"tenant {tenant} not found")
            existed = tx.integration_get(tenant, name) is not None
            (marker,) = sealer.seal(tx, tenant, _key_id(name), [("secret", secret)])
            tx.integration_put(tenant, name, marker, epoch_ms(self.kernel.clock()))
            status = "replaced" if existed else "created"
            self.audit.record(tenant, actor, "integration.set", name, "ok", tx=tx, status=status)
        return IntegrationSet(name=name, tenant=tenant, status=status)

    def integrations(self, tenant: str) -> list[IntegrationView]:
        def at(ms: int) -> str:
            return iso(datetime.fromtimestamp(ms / 1000, tz=UTC))

        with self.kernel.read() as tx:
            rows = tx.integration_names(tenant)
        return [IntegrationView(name=n, created_at=at(c), updated_at=at(u)) for n, c, u in rows]

    def _secret(self, tenant: str, name: str) -> str:
        with self.kernel.read() as tx:
            marker = tx.integration_get(tenant, name)
            if marker is None:
                raise Unauthenticated(
                    f"integration {name} of tenant {tenant} has no secret: nothing can sign for it",
                    code="bad_signature",
                )
            clear = self._sealer().open(tx, tenant, _key_id(name), marker)
        return str(clear)

    def _sealer(self) -> Sealer:
        if self.sealer is None:
            raise Refused("this process has no key ring to seal or open integration secrets", code="no_key")
        return self.sealer
