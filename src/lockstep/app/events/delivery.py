"""Delivering external events (POST /v1/events) to the runs waiting for them, and the buffered ones
to the first run that starts waiting (the scheduler's pass).

An event is idempotent by its id per tenant: its inbox row is written first (status `delivering`), then
each waiting run gets it in a transaction of its own (the run's command and the row's `delivered_to`
together, so a crash between two runs loses nothing and doubles nothing), then the row says what
happened (`delivered`, or `buffered` when nobody waited). A resend of the same id answers from the
row; one that finds it still `delivering` (the sender's first try was cut off) finishes the delivery,
skipping every run that has it. Every delivery and every refusal is audited.

Several runs waiting for the same name and key all get the event (a broadcast, like a Camunda signal;
one run per event is the correlation key's job: make it unique). A buffered event goes to exactly one
run, the first to start waiting for it within the tenant's `event_buffer_ttl`."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from ...core.commands import DeliverEvent, Rejected
from ...core.definition import WaitEventStep
from ...core.limits import tenant_limit
from ...core.timeutil import iso
from ...core.waitstart import MAX_KEY_LENGTH, payload_problems
from ...errors import Conflict, InvalidInput, LockstepError, RateLimited
from ...store import ConcurrencyError, EventTx, InboxRow, WaitRow
from ..audit import Audit
from ..kernel import epoch_ms
from ..port import KernelPort
from ..principals import Principal
from ..views.events import EventDelivery

__all__ = ["EVENT_ID_RE", "EventDeliveries", "check_event"]

log = logging.getLogger("lockstep.app.events")
EVENT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$")
NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")
# A delivery still under way after this long was cut off (its process died): the scheduler finishes it.
STALLED = timedelta(seconds=30)


def check_event(name: str, key: str, event_id: str) -> None:
    """InvalidInput, saying what and how, for a name, key or id no wait could ever match."""
    if not NAME_RE.match(name):
        raise InvalidInput(
            f"event name {name!r}: use lowercase letters, digits and - (e.g. parcel-delivered)"
        )
    if not key or len(key) > MAX_KEY_LENGTH:
        raise InvalidInput(f"event key: between 1 and {MAX_KEY_LENGTH} characters (the correlation key)")
    if not EVENT_ID_RE.match(event_id):
        raise InvalidInput(
            "event id: 1 to 200 characters, letters, digits and . _ : - (your own unique id for this event: "
            "a resend with the same id is answered with the first result)"
        )


def _view(row: InboxRow, replay: bool) -> EventDelivery:
    until = row["buffer_until"]
    return EventDelivery(
        event_id=row["event_id"],
        name=row["name"],
        key=row["key"],
        status=row["status"],
        delivered_to=list(row["delivered_to"]),
        buffered_until=iso(datetime.fromtimestamp(until / 1000, tz=UTC)) if until is not None else None,
        replay=replay,
    )


class EventDeliveries:
    def __init__(self, kernel: KernelPort[EventTx]) -> None:
        self.kernel = kernel
        self.audit = Audit(kernel)

    # --- POST /v1/events -----------------------------------------------------------------------
    def publish(self, p: Principal, name: str, key: str, payload: Any, event_id: str) -> EventDelivery:
        tenant = p.tenant
        detail = {"event_id": event_id, "name": name, "key": key}
        try:
            check_event(name, key, event_id)
            self.kernel.check_value(tenant, payload, "max_payload_bytes", "the event payload")
        except InvalidInput as exc:
            self.audit.refused(tenant, p.name, "event.publish", event_id[:200], exc.code, **detail)
            raise
        now = self.kernel.clock()
        first = self._begin(p, name, key, payload, event_id, now, detail)
        if first is not None:
            return first
        return self._deliver_all(tenant, p.name, event_id, name, key, payload, now)

    def _deliver_all(
        self, tenant: str, actor: str | None, event_id: str, name: str, key: str, payload: Any, now: datetime
    ) -> EventDelivery:
        for wait in self._waiting(tenant, name, key):
            self._deliver_one(tenant, actor, event_id, wait, payload, now)
        return self._finish(tenant, event_id, now)

    def _begin(
        self, p: Principal, name: str, key: str, payload: Any, event_id: str, now: datetime, detail: Any
    ) -> EventDelivery | None:
        """The first answer for a replay; None when this call delivers (a new id, or one whose first
        delivery was cut off). A payload some waiting run's schema refuses is refused here: nothing is
        written but the audit row."""
        try:
            return self._begin_tx(p, name, key, payload, event_id, now, detail)
        except LockstepError as exc:  # the refusal's audit row: in a transaction of its own
            self.audit.refused(p.tenant, p.name, "event.publish", event_id, exc.code, **detail)
            raise

    def _begin_tx(
        self, p: Principal, name: str, key: str, payload: Any, event_id: str, now: datetime, detail: Any
    ) -> EventDelivery | None:
        tenant, who = p.tenant, p.name
        with self.kernel.write() as tx:
            row = tx.inbox_get(tenant, event_id)
            if row is not None:
                if (row["name"], row["key"], row["payload"]) != (name, key, payload):
                    raise Conflict(
                        f"event id {event_id} was sent before with another name, key or payload: an id names "
                        "one event; use a new id for a new event",
                        code="id_reused",
                    )
                if row["status"] != "delivering":
                    self.audit.record(tenant, who, "event.replay", event_id, "ok", tx=tx, **detail)
                    return _view(row, replay=True)
                self.audit.record(tenant, who, "event.resume", event_id, "ok", tx=tx, **detail)
                return None
            waits = tx.waits_for(tenant, name, key)
            problems = self._problems(tx, waits, payload)
            if problems:
                raise InvalidInput(
                    f"the payload of event {name} does not match the schema of a run waiting for it: "
                    + "; ".join(problems[:5]),
                    code="payload_invalid",
                )
            most = tenant_limit(self.kernel.settings_of(tenant, tx), "max_buffered_events")
            if not waits and tx.inbox_buffered_count(tenant, epoch_ms(now)) >= most:
                raise RateLimited(
                    f"tenant {tenant} already keeps {most} events nobody waits for (max_buffered_events): "
                    "send it again later, or once a run waits for it",
                    retry_after=60,
                    code="buffer_full",
                )
            if not tx.inbox_insert(tenant, event_id, name, key, payload, epoch_ms(now)):
                raise Conflict(f"event {event_id} is being delivered by another request; send it again")
            self.audit.record(
                tenant, who, "event.publish", event_id, "ok", tx=tx, waiting=len(waits), **detail
            )
        return None

    def _problems(self, tx: EventTx, waits: list[WaitRow], payload: Any) -> list[str]:
        out: list[str] = []
        for w in waits:
            loaded = tx.load_run(w["run_id"])
            if loaded is None:
                continue
            step = self.kernel.definition_of(tx, loaded.state).step(w["step"])
            if isinstance(step, WaitEventStep):
                out += [f"run {w['run_id']} step {w['step']}: {p}" for p in payload_problems(step, payload)]
        return out

    def _waiting(self, tenant: str, name: str, key: str) -> list[WaitRow]:
        with self.kernel.read() as tx:
            return tx.waits_for(tenant, name, key)

    def _deliver_one(
        self, tenant: str, actor: str | None, event_id: str, wait: WaitRow, payload: Any, now: datetime
    ) -> bool:
        """One run's delivery, in its own transaction; False if it was not (any more) waiting."""
        run_id = wait["run_id"]
        for _ in range(5):
            try:
                with self.kernel.write() as tx:
                    row = tx.inbox_get(tenant, event_id)
                    if row is None or run_id in row["delivered_to"]:
                        return False
                    if not self._apply(tx, wait, event_id, payload, now, actor):
                        return False
                    runs = [*row["delivered_to"], run_id]
                    tx.inbox_delivered_to(tenant, event_id, runs, epoch_ms(now))
                    return True
            except ConcurrencyError:
                continue
        log.warning("event %s: run %s kept changing; its delivery is left to a resend", event_id, run_id)
        return False

    def _apply(
        self, tx: EventTx, wait: WaitRow, event_id: str, payload: Any, now: datetime, actor: str | None
    ) -> bool:
        """The DeliverEvent command on the waiting run, audited either way (in `tx`)."""
        tenant, run_id = wait["tenant"], wait["run_id"]
        detail = {"event_id": event_id, "step": wait["step"], "name": wait["name"], "key": wait["key"]}
        loaded = tx.load_run(run_id)
        if loaded is None or loaded.state.tenant != tenant:  # pragma: no cover - the index is the run's
            return False
        cmd = DeliverEvent(wait["step"], wait["generation"], event_id, wait["name"], wait["key"], payload)
        try:
            self.kernel.apply(tx, loaded, cmd, now, self.kernel.definition_of(tx, loaded.state))
        except Rejected as r:
            self.audit.refused(tenant, actor, "event.deliver", run_id, r.code, tx=tx, **detail)
            return False
        self.audit.record(tenant, actor, "event.deliver", run_id, "ok", tx=tx, **detail)
        return True

    def _finish(self, tenant: str, event_id: str, now: datetime) -> EventDelivery:
        with self.kernel.write() as tx:
            row = tx.inbox_get(tenant, event_id)
            if row is None:  # pragma: no cover - inbox rows are never deleted
                raise Conflict(f"event {event_id} vanished while it was delivered")
            if row["status"] == "delivering":
                if row["delivered_to"]:
                    tx.inbox_status(tenant, event_id, "delivering", "delivered", epoch_ms(now))
                else:
                    ttl = tenant_limit(self.kernel.settings_of(tenant, tx), "event_buffer_ttl")
                    until = epoch_ms(now + timedelta(seconds=ttl))
                    tx.inbox_status(tenant, event_id, "delivering", "buffered", epoch_ms(now), until)
                row = tx.inbox_get(tenant, event_id) or row
        return _view(row, replay=False)

    # --- the scheduler's pass: buffered events to the runs that started waiting ----------------
    def deliver_buffered(self, limit: int = 100) -> int:
        """Hand buffered events to the runs now waiting for them (each event to one run, the first),
        expire the ones past their window, finish deliveries cut off by a crash; how many buffered
        events were delivered."""
        now = self.kernel.clock()
        with self.kernel.write() as tx:
            tx.inbox_expire(epoch_ms(now))
            pairs = tx.waits_buffered(epoch_ms(now), limit)
            stalled = tx.inbox_stalled(epoch_ms(now - STALLED), limit)
        for row in stalled:  # its sender's request died with its process: finish it for them
            self.audit.record(row["tenant"], None, "event.resume", row["event_id"], "ok", name=row["name"])
            self._deliver_all(
                row["tenant"], None, row["event_id"], row["name"], row["key"], row["payload"], now
            )
        done = 0
        for wait, event_id in pairs:
            try:
                done += self._consume(wait, event_id, now)
            except ConcurrencyError:
                continue  # the run changed meanwhile: the next pass
        return done

    def _consume(self, wait: WaitRow, event_id: str, now: datetime) -> bool:
        tenant = wait["tenant"]
        with self.kernel.write() as tx:
            row = tx.inbox_get(tenant, event_id)
            if row is None or row["status"] != "buffered":
                return False  # consumed by the run before this one in the pass
            with tx.savepoint():
                if not self._apply(tx, wait, event_id, row["payload"], now, None):
                    return False
                if not tx.inbox_status(tenant, event_id, "buffered", "consumed", epoch_ms(now)):
                    raise Conflict(f"event {event_id} was consumed meanwhile")  # pragma: no cover - locked
                tx.inbox_delivered_to(tenant, event_id, [wait["run_id"]], epoch_ms(now))
        return True
