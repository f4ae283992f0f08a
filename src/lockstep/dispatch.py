"""Work distribution (service layer): fair claims across tenants with quotas, scheduler passes over
due timers and expired leases, and the dead-letter sweep for tasks no worker takes.

Every pass picks candidates without locking, then locks each run with SKIP LOCKED (run before task,
always: no deadlocks), re-checks the candidate inside the lock, and applies one command.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from .core.commands import ClaimTask, DeadLetter, ExpireLease, FireTimer, Rejected
from .core.timeutil import iso
from .store import LoadedRun, RowLocked, Tx

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .service import Service

__all__ = [
    "TaskLease",
    "claim",
    "dead_letter_unserved",
    "expire_leases",
    "fire_due_timers",
    "round_robin",
]


@dataclass(frozen=True)
class TaskLease:
    """What a worker receives: enough to run the activity and to report with the right fencing token."""

    task_id: str
    tenant: str
    run_id: str
    step: str
    attempt: int
    kind: str
    activity: str
    input: Any
    idempotency_key: str
    definition: str
    version: int
    delivery: str
    fencing: int
    deadline: datetime


def _ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def round_robin(per_tenant: dict[str, list[str]], limit: int) -> list[str]:
    """One from each tenant in turn: a tenant with 100,000 queued tasks cannot starve one with 10."""
    out: list[str] = []
    queues = [list(v) for v in per_tenant.values() if v]
    i = 0
    while queues and len(out) < limit:
        q = queues[i % len(queues)]
        out.append(q.pop(0))
        if not q:
            queues.remove(q)
        else:
            i += 1
    return out


def _lock(tx: Tx, run_id: str) -> LoadedRun | Literal[False] | None:
    """The run, locked; None if it does not exist; False if another transaction holds it."""
    try:
        return tx.load_run(run_id, skip_locked=True)
    except RowLocked:
        return False


def claim(
    svc: Service,
    worker: str,
    activities: Sequence[str],
    *,
    limit: int,
    lease_ttl: timedelta,
    tenant: str | None = None,
    queue: str = "default",
) -> list[TaskLease]:
    """Lease up to `limit` ready tasks in one transaction, tenants in turn, within their quotas."""
    if not activities or limit <= 0:
        return []
    now = svc.clock()
    now_ms = _ms(now)
    out: list[TaskLease] = []
    with svc.write() as tx:
        per_tenant: dict[str, list[str]] = {}
        for ten in [tenant] if tenant else tx.ready_tenants():
            room = limit
            settings = tx.tenant(ten)
            quota = settings.settings.get("activity_concurrency") if settings else None
            if quota is not None:
                tx.lock_tenant(ten)  # two claimers must not both take the last free slot
                room = min(room, int(quota) - tx.leased_count(ten))
            if room > 0:
                per_tenant[ten] = tx.ready_ids(ten, activities, queue, now_ms, room)
        for task_id in round_robin(per_tenant, limit):
            t = tx.task(task_id)
            if t is None:
                continue
            loaded = _lock(tx, t.run_id)
            if loaded is False:
                continue
            t = tx.task(task_id)  # re-read under the run's lock: someone may have taken or closed it
            if t is None or t.status != "ready":
                continue
            if loaded is None:
                tx.close_task(task_id, "stale")
                continue
            deadline = now + timedelta(milliseconds=t.timeout_ms)
            try:
                d = svc.definition_for(tx, t.tenant, t.definition, t.version)
                _after, events = svc.apply(tx, loaded, ClaimTask(t.task_id, worker, iso(deadline)), now, d)
            except Rejected:
                tx.close_task(t.task_id, "stale")
                continue
            tx.set_lease(t.task_id, _ms(now + lease_ttl))
            out.append(
                TaskLease(
                    t.task_id,
                    t.tenant,
                    t.run_id,
                    t.step,
                    t.attempt,
                    t.kind,
                    t.activity,
                    t.input,
                    t.idempotency_key,
                    t.definition,
                    t.version,
                    t.delivery,
                    events[0].data["fencing"],
                    deadline,
                )
            )
    return out


def fire_due_timers(svc: Service, limit: int = 200, partitions: list[int] | None = None) -> int:
    now = svc.clock()
    fired = 0
    with svc.write() as tx:
        for t in tx.due_timers(_ms(now), limit, partitions):
            loaded = _lock(tx, t.run_id)
            if loaded is False or tx.timer_status(t.run_id, t.key, t.generation) != "scheduled":
                continue
            if loaded is None:
                tx.close_timer(t.run_id, t.key, t.generation, "stale")
                continue
            s = loaded.state
            try:
                d = svc.definition_for(tx, s.tenant, s.definition["name"], s.definition["version"])
                svc.apply(tx, loaded, FireTimer(t.key, t.generation), now, d)
                fired += 1
            except Rejected as r:
                # A duplicate or superseded timer: the generation check turns it into a no-op.
                if r.code == "stale_timer":
                    tx.close_timer(t.run_id, t.key, t.generation, "stale")
    return fired


def expire_leases(svc: Service, limit: int = 200, partitions: list[int] | None = None) -> int:
    now = svc.clock()
    now_ms = _ms(now)
    expired = 0
    with svc.write() as tx:
        for lease in tx.expired_leases(now_ms, limit, partitions):
            loaded = _lock(tx, lease.run_id)
            if loaded is False:
                continue
            current = tx.task(lease.task_id)  # a heartbeat may have renewed it meanwhile
            if (
                current is None
                or current.status != "leased"
                or current.fencing != lease.fencing
                or (current.lease_expires_at or 0) > now_ms
            ):
                continue
            if loaded is None:
                tx.close_task(lease.task_id, "stale")
                continue
            if now_ms >= lease.deadline:
                reason = "the attempt did not finish within its timeout"
            else:
                reason = f"worker {lease.worker} stopped renewing its lease (crashed, hung or cut off)"
            s = loaded.state
            try:
                d = svc.definition_for(tx, s.tenant, s.definition["name"], s.definition["version"])
                svc.apply(
                    tx, loaded, ExpireLease(lease.task_id, lease.attempt, lease.fencing, reason), now, d
                )
                expired += 1
            except Rejected:
                tx.close_task(lease.task_id, "stale")
    return expired


def dead_letter_unserved(svc: Service, limit: int = 200) -> int:
    """Tasks queued longer than their tenant's `unserved_after` (default: the service's) go to the
    dead-letter state: the run waits in needs_attention instead of silently queueing forever."""
    now = svc.clock()
    default_s = svc.unserved_after.total_seconds()
    shortest = default_s
    with svc.read() as tx:
        for t in tx.tenants():
            v = t.settings.get("unserved_after")
            if v is not None:
                shortest = min(shortest, float(v))
    done = 0
    with svc.write() as tx:
        for task_id, run_id, tenant, activity, available_at in tx.stale_ready(
            _ms(now) - int(shortest * 1000), limit
        ):
            row = tx.tenant(tenant)
            after = float(row.settings.get("unserved_after", default_s)) if row else default_s
            waited = (_ms(now) - available_at) / 1000
            if waited < after:
                continue
            loaded = _lock(tx, run_id)
            current = tx.task(task_id)
            if loaded is False or current is None or current.status != "ready" or loaded is None:
                continue
            s = loaded.state
            reason = (
                f"no worker took this {activity} task for {int(waited)}s (limit {int(after)}s): is a worker "
                f"serving {activity} on queue {current.queue} running?"
            )
            try:
                d = svc.definition_for(tx, s.tenant, s.definition["name"], s.definition["version"])
                svc.apply(tx, loaded, DeadLetter(task_id, reason), now, d)
                done += 1
            except Rejected:
                tx.close_task(task_id, "stale")
    return done
