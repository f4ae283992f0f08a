"""Retention: legal holds on runs and tenants, an operator's purge of one run, the status of what the
purge will do, and the tombstones of what it did. The purge pass itself is purge.py.

Who may do what (docs/security.md, "Retention and purge"): the platform operator sets a tenant's
retention (`lockstep tenants set T --retention 90d`), places and releases holds and purges a run, all
over the CLI only; tenant admins and operators read their own tenant's status over the API. Every hold,
release and purge is an audit row, written in the same transaction as the change.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ..core.limits import Settings
from ..core.state import TERMINAL
from ..core.timeutil import format_duration, iso, parse_iso
from ..errors import Conflict, InvalidInput, NotFound, Refused
from ..store import ConcurrencyError, HoldRow, TombstoneRow, Tx
from .kernel import Kernel
from .purge import Purge, retention_of
from .views import HoldView, PurgeReport, RetentionStatus, TenantRetention, TombstoneView, VerifyResult

__all__ = ["Retention"]

SHOWN_HOLDS = 100


def _hold(h: HoldRow) -> HoldView:
    return HoldView(
        id=h.id,
        tenant=h.tenant,
        run_id=h.run_id,
        reason=h.reason,
        held_by=h.held_by,
        held_at=h.held_at,
        released_by=h.released_by,
        released_at=h.released_at,
        release_reason=h.release_reason,
    )


def _tombstone(t: TombstoneRow) -> TombstoneView:
    return TombstoneView.model_validate({k: getattr(t, k) for k in TombstoneView.model_fields})


def _held(h: HoldRow) -> str:
    return f"held since {h.held_at} by {h.held_by} ({h.reason})"


class Retention:
    def __init__(self, kernel: Kernel, purge: Purge | None = None) -> None:
        self.kernel = kernel
        self.purge = purge or Purge(kernel)

    def _reason(self, tenant: str, reason: str) -> str:
        if not reason or not reason.strip():
            raise InvalidInput(
                "a reason is required (--reason TEXT): it is recorded with the hold and audited"
            )
        self.kernel.check_value(tenant, reason, "max_payload_bytes", "the reason")
        return reason.strip()

    # --- holds ---------------------------------------------------------------------------------
    def hold_run(self, tenant: str, run_id: str, reason: str, actor: str) -> HoldView:
        """Hold run `run_id` (finished or not): the purge never deletes it until it is released."""
        why = self._reason(tenant, reason)
        at = iso(self.kernel.clock())
        with self.kernel.write() as tx:
            found = tx.lock_run_for_hold(run_id)  # a purge of it in progress finishes first
            if found is None or found[0] != tenant:
                raise self.kernel.missing(tx, run_id, tenant)
            self._not_held(tx, tenant, run_id)
            h = self._insert(tx, tenant, run_id, why, actor, at)
            tx.audit(at, tenant, actor, "retention.hold", run_id, "ok", {"reason": why, "hold": h.id})
        return _hold(h)

    def hold_tenant(self, tenant: str, reason: str, actor: str) -> HoldView:
        """Hold the whole tenant: no run of it is purged until the hold is released."""
        why = self._reason(tenant, reason)
        at = iso(self.kernel.clock())
        with self.kernel.write() as tx:
            if not tx.lock_tenant_for_hold(tenant):  # every purge of the tenant in progress ends first
                raise NotFound(f"tenant {tenant} does not exist")
            self._not_held(tx, tenant, None)
            h = self._insert(tx, tenant, None, why, actor, at)
            tx.audit(at, tenant, actor, "retention.hold", tenant, "ok", {"reason": why, "hold": h.id})
        return _hold(h)

    def _not_held(self, tx: Tx, tenant: str, run_id: str | None) -> None:
        current = tx.active_hold(tenant, run_id)
        if current is not None:
            what = f"run {run_id}" if run_id else f"tenant {tenant}"
            raise Conflict(
                f"{what} is already {_held(current)}; release that hold first to replace it",
                code="already_held",
            )

    def _insert(self, tx: Tx, tenant: str, run_id: str | None, why: str, actor: str, at: str) -> HoldRow:
        try:
            return tx.insert_hold(tenant, run_id, why, actor, at)
        except ConcurrencyError:
            raise Conflict(
                f"{'run ' + run_id if run_id else 'tenant ' + tenant} was held or purged by another "
                "transaction meanwhile; look again with `lockstep retention status`",
                code="already_held",
            ) from None

    def release_run(self, tenant: str, run_id: str, reason: str, actor: str) -> HoldView:
        return self._release(tenant, run_id, reason, actor)

    def release_tenant(self, tenant: str, reason: str, actor: str) -> HoldView:
        return self._release(tenant, None, reason, actor)

    def _release(self, tenant: str, run_id: str | None, reason: str, actor: str) -> HoldView:
        why = self._reason(tenant, reason)
        at = iso(self.kernel.clock())
        what = f"run {run_id}" if run_id else f"tenant {tenant}"
        with self.kernel.write() as tx:
            h = tx.active_hold(tenant, run_id)
            if h is None:
                raise NotFound(f"{what} has no active hold (`lockstep retention status --tenant {tenant}`)")
            if not tx.release_hold(h.id, actor, at, why):  # pragma: no cover - raced by another release
                raise Conflict(f"the hold on {what} was released meanwhile")
            detail = {"reason": why, "hold": h.id, "held_by": h.held_by, "held_reason": h.reason}
            tx.audit(at, tenant, actor, "retention.release", run_id or tenant, "ok", detail)
        return _hold(HoldRow(h.id, h.tenant, h.run_id, h.reason, h.held_by, h.held_at, actor, at, why))

    def holds(self, tenant: str | None = None, *, active: bool = True, limit: int = 100) -> list[HoldView]:
        with self.kernel.read() as tx:
            return [_hold(h) for h in tx.holds(tenant, active=active, limit=limit)]

    def holding(self, tenant: str, run_id: str) -> list[HoldView]:
        """The active holds that keep run `run_id` from being purged: its own, then its tenant's."""
        with self.kernel.read() as tx:
            found = (tx.active_hold(tenant, run_id), tx.active_hold(tenant, None))
        return [_hold(h) for h in found if h is not None]

    # --- an operator's purge of one run --------------------------------------------------------
    def purge_run(self, tenant: str, run_id: str, reason: str, actor: str) -> TombstoneView:
        """Purge one finished, unheld run now, whatever the tenant's retention (e.g. an erasure
        request): its tombstone names the operator and the reason."""
        why = self._reason(tenant, reason)
        at = iso(self.kernel.clock())
        with self.kernel.write() as tx:
            found = tx.lock_run_for_hold(run_id)
            if found is None or found[0] != tenant:
                raise self.kernel.missing(tx, run_id, tenant)
            if found[1] not in TERMINAL:
                raise Refused(
                    f"run {run_id} is {found[1]}: only a finished run is purged (cancel it first)",
                    code="not_finished",
                )
            for h in (tx.active_hold(tenant, run_id), tx.active_hold(tenant, None)):
                if h is not None:
                    on = f"run {run_id}" if h.run_id else f"tenant {tenant}"
                    raise Refused(f"{on} is {_held(h)}: release the hold first", code="held")
            t = tx.tombstone_run(run_id, purged_at=at, purged_by=actor, reason=why)
            if t is None:  # pragma: no cover - locked above
                raise Conflict(f"run {run_id} is being changed; try again")
            tx.audit(at, tenant, actor, "retention.purge", run_id, "ok", {"reason": why, "events": t.events})
        self.purge.finish_run(run_id)
        with self.kernel.read() as tx:
            done = tx.tombstone(run_id)
        return _tombstone(done or t)

    def purge_now(self, tenant: str | None = None) -> PurgeReport:
        """One purge pass over every partition now (the scheduler runs them on its own)."""
        return self.purge.run_pass(None, tenant=tenant)

    # --- status and tombstones -----------------------------------------------------------------
    def status(self, tenant: str | None = None) -> RetentionStatus:
        """Per tenant: the retention, what is due now and next, what is held, the tombstones."""
        now = self.kernel.clock()
        out = []
        with self.kernel.read() as tx:
            rows = [t for t in tx.tenants() if tenant is None or t.name == tenant]
            if tenant is not None and not rows:
                raise NotFound(f"tenant {tenant} does not exist")
            for row in rows:
                out.append(self._tenant_status(tx, row.name, row.settings, now))
        return RetentionStatus(at=iso(now), tenants=out)

    def _tenant_status(self, tx: Tx, name: str, settings: Settings, now: datetime) -> TenantRetention:
        keep = retention_of(settings)
        tenant_hold = tx.active_hold(name, None)
        due, next_due = 0, None
        if keep is not None:
            due, next_finish = tx.purge_due(name, iso(now - keep))
            if next_finish is not None:
                next_due = iso(parse_iso(next_finish) + keep)
            if tenant_hold is not None:
                due = 0
        run_holds = [h for h in tx.holds(name, active=True, limit=SHOWN_HOLDS + 1) if h.run_id is not None]
        return TenantRetention(
            tenant=name,
            retention=format_duration(keep) if keep is not None else None,
            retention_seconds=int(keep / timedelta(seconds=1)) if keep is not None else None,
            tenant_hold=_hold(tenant_hold) if tenant_hold is not None else None,
            held_runs=tx.run_holds_count(name),
            run_holds=[_hold(h) for h in run_holds[:SHOWN_HOLDS]],
            finished_runs=tx.finished_count(name),
            due_now=due,
            next_due_at=next_due,
            tombstones={"purging": 0, "purged": 0, **tx.tombstone_counts(name)},
        )

    def tombstones(
        self, tenant: str | None = None, *, after: str = "", limit: int = 100
    ) -> list[TombstoneView]:
        with self.kernel.read() as tx:
            return [_tombstone(t) for t in tx.tombstones(tenant, after=after, limit=limit)]

    def tombstone(self, tenant: str | None, run_id: str) -> TombstoneView:
        with self.kernel.read() as tx:
            t = tx.tombstone(run_id)
        if t is None or (tenant is not None and t.tenant != tenant):
            raise NotFound(f"run {run_id} has no tombstone" + (f" in tenant {tenant}" if tenant else ""))
        return _tombstone(t)

    def check_tombstones(self, tenant: str | None = None) -> list[VerifyResult]:
        """What `lockstep verify` adds: the tombstones contradicted by what is stored (none, normally),
        each as a failed verification of its run."""
        with self.kernel.read() as tx:
            bad = tx.tombstones_with_rows(tenant, 100)
        return [
            VerifyResult(
                run_id=rid,
                events=0,
                ok=False,
                problems=[
                    f"the run has a tombstone ({state}) but its run row or (purged) events are still stored"
                ],
            )
            for rid, state in bad
        ]
