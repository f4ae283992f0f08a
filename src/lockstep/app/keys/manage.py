"""Key management, the service side: status, rotation and its background re-wrap, forgetting a run and
shredding a tenant (crypto-shredding). Every change is audited in its own transaction.

What changes on disk: rotation inserts a `tenant_keys` row (the new version) and marks older ones
retired; the re-wrap pass rewrites `run_keys` rows (the same run key, wrapped under the new version) in
batches, each its own transaction, and deletes a retired version's row once no run key uses it.
Forgetting empties one `run_keys` row (key gone, `forgotten_at` set); shredding empties all of a
tenant's and deletes its `tenant_keys` rows. Events, snapshots and task rows never change: their
markers stay as written, so the hash chain and `lockstep verify` stay as they were.
"""

from __future__ import annotations

import logging
from typing import Any

from ...core.commands import CancelRun
from ...core.state import STATUSES, TERMINAL
from ...core.timeutil import iso
from ...errors import InvalidInput, NotFound, Refused
from ...store import AuditTx, RunKeyRow, SealTx, TenantKeyRow, Tx
from .. import failpoints
from ..kernel import Kernel
from ..views import KeysRotated, KeysStatus, KeyVersion, RunForgotten, TenantKeys, TenantShredded
from .ring import KeyRing

__all__ = ["Keys"]

log = logging.getLogger("lockstep.app.keys")
# Unfinished runs named in a refusal (the rest are counted).
NAMED = 10


def _reason(reason: str) -> str:
    if not reason or not reason.strip():
        raise InvalidInput("a reason is required (--reason TEXT): it is recorded in the audit log")
    return reason.strip()[:2000]


class Keys:
    def __init__(self, kernel: Kernel, ring: KeyRing) -> None:
        self.kernel = kernel
        self.ring = ring
        ring.on_created = self._created

    def _audit(
        self,
        tx: AuditTx,
        tenant: str | None,
        actor: str | None,
        action: str,
        target: str | None,
        **detail: Any,
    ) -> None:
        tx.audit(iso(self.kernel.clock()), tenant, actor, action, target, "ok", detail)

    def _created(self, tx: SealTx, tenant: str, version: int, provider: str) -> None:
        self._audit(tx, tenant, None, "keys.create", f"{tenant}/v{version}", provider=provider)

    # --- status and rotation -------------------------------------------------------------------
    def status(self, tenant: str | None = None) -> KeysStatus:
        provider = self.ring.provider.provider_id if self.ring.provider is not None else None
        out = []
        with self.kernel.read() as tx:
            names = [tenant] if tenant else [t.name for t in tx.tenants()]
            for name in names:
                rows = tx.tenant_keys(name)
                counts = tx.run_key_counts(name)
                newest = rows[-1].version if rows else 0
                out.append(
                    TenantKeys(
                        tenant=name,
                        versions=[
                            KeyVersion(
                                version=r.version,
                                provider=r.provider,
                                created_at=r.created_at,
                                retired_at=r.retired_at,
                                run_keys=counts.get(r.version, 0),
                            )
                            for r in rows
                        ],
                        rewrap_pending=sum(n for v, n in counts.items() if v < newest),
                        forgotten_runs=tx.forgotten_run_keys(name),
                        readable=bool(rows) and rows[-1].provider == provider,
                    )
                )
        return KeysStatus(provider=provider, tenants=out)

    def rotate(self, tenant: str, actor: str | None = None) -> KeysRotated:
        """A new version of the tenant's data key for every new run key; the runs' keys are re-wrapped
        under it by the scheduler's re-wrap pass, and each older version is deleted once none is left."""
        self.ring.require(f"rotating tenant {tenant}'s key")
        with self.kernel.write() as tx:
            rows = tx.tenant_keys(tenant)
            if not rows and tx.tenant(tenant) is None:
                raise NotFound(f"tenant {tenant} does not exist")
            version = rows[-1].version + 1 if rows else 1
            row = self.ring.new_tenant_key(tx, tenant, version)
            if rows:
                # The old versions must still open: check before they stop being the current one.
                self.ring.tenant_cipher(rows[-1])
            tx.retire_tenant_keys(tenant, version, row.created_at)
            self.ring.forget_current(tenant)
            pending = sum(tx.run_key_counts(tenant).values())
            retired = [r.version for r in rows]
            self._audit(
                tx, tenant, actor, "keys.rotate", f"{tenant}/v{version}", retired=retired, rewrap=pending
            )
        return KeysRotated(tenant=tenant, version=version, retired=retired, rewrap_pending=pending)

    def rewrap(self, limit: int = 200) -> int:
        """One pass of the background re-wrap: up to `limit` run keys moved to their tenant's newest
        version in one transaction, then the versions nobody uses any more deleted. Interrupted at any
        point, nothing is lost (a run key is always wrapped under a version that exists: the foreign
        key says so) and the next pass goes on where this one stopped. 0: nothing left (or no key)."""
        if self.ring.provider is None:
            return 0
        with self.kernel.read() as tx:
            rotating = [t for t, _newest in tx.rotating_tenants()]
        if not rotating:
            return 0  # the common case: one small read per pass
        moved: dict[tuple[str, int, int], int] = {}
        with self.kernel.write() as tx:
            rows = tx.stale_run_keys(limit)
            newest: dict[str, TenantKeyRow] = {}
            for row in rows:
                target = newest.get(row.tenant) or self.ring.current_tenant_key(tx, row.tenant, fresh=True)
                newest[row.tenant] = target
                if self._rewrap_one(tx, row, target):
                    k = (row.tenant, int(row.key_version or 0), target.version)
                    moved[k] = moved.get(k, 0) + 1
            for (tenant, old, new), n in moved.items():
                self._audit(tx, tenant, None, "keys.rewrap", f"{tenant}/v{new}", from_version=old, run_keys=n)
            failpoints.hit("keys.rewrap", moved=sum(moved.values()))  # written, not yet committed
        if len(rows) < limit:
            self._retire_unused(rotating)
        return sum(moved.values())

    def _rewrap_one(self, tx: Tx, row: RunKeyRow, target: TenantKeyRow) -> bool:
        try:
            key = self.ring.run_key_bytes(row)
        except Refused as exc:  # an altered row: reported, left as it is (it does not open either way)
            log.warning("run key of %s not re-wrapped: %s", row.run_id, exc)
            return False
        wrapped = self.ring.wrap_run_key(key, row.tenant, row.run_id, target)
        return tx.rewrap_run_key(row.run_id, int(row.key_version or 0), target.version, wrapped)

    def _retire_unused(self, tenants: list[str]) -> None:
        with self.kernel.write() as tx:
            for tenant in tenants:
                rows = tx.tenant_keys(tenant)
                for r in rows[:-1]:
                    if r.retired_at is not None and tx.delete_tenant_key(tenant, r.version):
                        self._audit(tx, tenant, None, "keys.retire", f"{tenant}/v{r.version}")

    # --- crypto-shredding ----------------------------------------------------------------------
    def forget(self, tenant: str, run_id: str, reason: str, actor: str | None = None) -> RunForgotten:
        """Destroy a finished run's key: its sealed values can never be read again; its history, hash
        chain and every clear field stay (verify passes)."""
        why = _reason(reason)
        with self.kernel.write() as tx:
            loaded = tx.load_run(run_id)
            if loaded is None or loaded.stored.tenant != tenant:
                raise NotFound(f"run {run_id} not found in tenant {tenant}")
            if loaded.stored.status not in TERMINAL:
                raise Refused(
                    f"run {run_id} is {loaded.stored.status}: only a finished run can be forgotten "
                    f"(cancel it first: `lockstep cancel {run_id} --reason ...`)",
                    code="not_finished",
                )
            tx.forget_run_key(run_id, tenant, iso(self.kernel.clock()))
            self._audit(tx, tenant, actor, "keys.forget", run_id, reason=why)
        self.ring.drop(run_id=run_id)
        return RunForgotten(run_id=run_id)

    def shred(
        self, tenant: str, reason: str, actor: str | None = None, *, cancel: bool = False
    ) -> TenantShredded:
        """Destroy every key of a tenant (all its runs' sealed values become unreadable). Refused while
        the tenant has unfinished runs, unless `cancel`: then they are cancelled first and finish their
        cancellation without their sensitive values."""
        why = _reason(reason)
        with self.kernel.read() as tx:
            # The tenant "default" may have runs and keys without a row of its own.
            if tx.tenant(tenant) is None and not tx.tenant_keys(tenant) and not tx.run_ids(tenant):
                raise NotFound(f"tenant {tenant} does not exist")
            live = self._unfinished(tx, tenant)
        cancelled: list[str] = []
        if live and not cancel:
            named = ", ".join(live[:NAMED]) + (f" and {len(live) - NAMED} more" if len(live) > NAMED else "")
            raise Refused(
                f"tenant {tenant} has {len(live)} unfinished run(s): {named}; let them finish, or shred "
                "with --cancel to cancel them first",
                code="unfinished_runs",
            )
        for run_id in live:
            self.kernel.command(run_id, CancelRun(f"tenant shredded: {why}", actor), tenant)
            cancelled.append(run_id)
        with self.kernel.write() as tx:
            runs = tx.forget_tenant_run_keys(tenant, iso(self.kernel.clock()))
            versions = tx.delete_all_tenant_keys(tenant)
            self._audit(
                tx,
                tenant,
                actor,
                "tenant.shred",
                tenant,
                reason=why,
                run_keys=runs,
                key_versions=versions,
                cancelled=len(cancelled),
            )
        self.ring.drop(tenant=tenant)
        return TenantShredded(tenant=tenant, run_keys=runs, key_versions=versions, cancelled=cancelled)

    def _unfinished(self, tx: Tx, tenant: str) -> list[str]:
        out: list[str] = []
        for status in STATUSES:
            if status in TERMINAL:
                continue
            after = ""
            while True:
                page = tx.runs(tenant, status=status, definition=None, after=after, limit=500)
                out += [s.run_id for s in page]
                if len(page) < 500:
                    break
                after = page[-1].run_id
        return sorted(out)
