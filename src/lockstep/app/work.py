"""Work distribution: fair claims across tenants within their quotas, eager dispatch (an attempt leased
in the transition that scheduled it), leases and their heartbeats.

A claim picks candidates without locking, then locks their runs with SKIP LOCKED (run before task,
always: no deadlocks), re-checks each candidate inside the lock, and appends ActivityStarted.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from ..core.canonical import JSONValue
from ..core.commands import ClaimTask, Rejected
from ..core.events import ActivityScheduled, ActivityStarted, CompensationScheduled, Event
from ..core.flow import run_of_task
from ..core.state import RunState
from ..core.timeutil import iso, parse_iso
from ..errors import NotFound
from ..store import ClaimTx, LoadedRun, TaskRow, TaskTx, TenantsTx
from .kernel import epoch_ms, lock_run
from .port import KernelPort
from .tracing import attempt_traceparent

__all__ = ["Eager", "LocalWorker", "TaskLease", "Work", "round_robin"]


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
    input: JSONValue
    idempotency_key: str
    definition: str
    version: int
    delivery: str
    fencing: int
    deadline: datetime
    # The W3C traceparent of the attempt's span (app/tracing): the parent of the activity's own spans.
    traceparent: str = ""


class LocalWorker(Protocol):
    """A worker in this process (runtime.Worker registers itself): a start may lease its first attempt
    to one of them in the same transaction, handed over after the commit."""

    @property
    def worker_id(self) -> str: ...
    @property
    def activities(self) -> Sequence[str]: ...
    @property
    def queue(self) -> str: ...
    @property
    def versions(self) -> Sequence[str] | None: ...
    @property
    def lease_ttl(self) -> timedelta: ...
    def free_slots(self) -> int: ...
    def accept(self, leases: list[TaskLease]) -> None: ...


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


@dataclass
class Eager:
    """Eager dispatch: when a result schedules the run's next attempt and this worker runs that
    activity, it is leased in the same transition (no outbox scan, no second snapshot write, no wait
    for the next claim). Not for tenants with an activity_concurrency quota (counted under a lock)."""

    worker: str
    activities: frozenset[str]
    queue: str
    versions: set[str] | None
    lease_ttl: timedelta
    room: int
    leases: list[TaskLease] = field(default_factory=list)
    owner: LocalWorker | None = None  # the in-process worker the leases go to after the commit (starts)

    def follow(
        self,
        kernel: KernelPort[TenantsTx],
        tx: TenantsTx,
        now: datetime,
        after: RunState,
        events: list[Event],
    ) -> list[ClaimTask]:
        """The claims of the attempts `events` scheduled that this worker runs, as many as it has room
        for (the branches of a parallel step are scheduled together)."""
        if self.room <= 0:
            return []
        if kernel.settings_of(after.tenant, tx).get("activity_concurrency") is not None:
            return []
        if (
            self.versions is not None
            and f"{after.definition['name']}:{after.definition['version']}" not in self.versions
        ):
            return []
        out: list[ClaimTask] = []
        for e in events:
            d = e.data
            if (
                isinstance(d, ActivityScheduled | CompensationScheduled)
                and d.activity in self.activities
                and (d.queue or "default") == self.queue
                and len(out) < self.room
            ):
                deadline = iso(now + timedelta(milliseconds=d.timeout_ms))
                out.append(ClaimTask(d.task_id, self.worker, deadline))
        return out

    def leased(self, tx: object, now: datetime, after: RunState, events: list[Event]) -> None:
        started = [
            e.data for e in events if isinstance(e.data, ActivityStarted) and e.data.worker == self.worker
        ]
        scheduled = {
            d.task_id: d for e in events if isinstance(d := e.data, ActivityScheduled | CompensationScheduled)
        }
        for st in started:
            sched = scheduled.get(st.task_id)
            if sched is None:  # pragma: no cover - an eager claim is of an attempt scheduled with it
                continue
            self.room -= 1
            self.leases.append(
                TaskLease(
                    st.task_id,
                    after.tenant,
                    after.run_id,
                    st.step,
                    st.attempt,
                    "compensation" if st.compensation else "action",
                    sched.activity,
                    sched.input,
                    sched.idempotency_key,
                    after.definition["name"],
                    int(after.definition["version"]),
                    sched.delivery,
                    st.fencing,
                    parse_iso(st.deadline),
                    attempt_traceparent(after, st.task_id, st.fencing),
                )
            )


class Work:
    def __init__(self, kernel: KernelPort[ClaimTx]) -> None:
        self.kernel = kernel
        # In-process workers (runtime.Worker registers itself), for eager dispatch of starts.
        self.local_workers: list[LocalWorker] = []
        self._turn = 0
        self._turn_lock = threading.Lock()

    def local_eager(self) -> Eager | None:
        """Eager dispatch for a start: the first in-process worker with a free slot (None: no such
        worker), so a run started next to a worker begins its first attempt in the start's own
        transaction."""
        for w in list(self.local_workers):
            room = w.free_slots()
            if room > 0:
                versions = set(w.versions) if w.versions else None
                # Room for each attempt the start schedules (a parallel step's branches: several).
                return Eager(
                    w.worker_id, frozenset(w.activities), w.queue, versions, w.lease_ttl, room, owner=w
                )
        return None

    def claim(
        self,
        worker: str,
        activities: Sequence[str],
        *,
        limit: int,
        lease_ttl: timedelta,
        tenant: str | None = None,
        queue: str = "default",
        versions: Sequence[str] | None = None,
    ) -> list[TaskLease]:
        """Lease up to `limit` ready tasks in one transaction, tenants in turn, within their quotas; each
        lease appends ActivityStarted. `versions` ("name:version") restricts the claim to the definition
        versions this worker runs."""
        if not activities or limit <= 0:
            return []
        now = self.kernel.clock()
        with self.kernel.write() as tx:
            return self.claim_in(tx, now, worker, activities, limit, lease_ttl, tenant, queue, versions)

    def abandon_leases(self, worker: str, tenant: str | None = None) -> int:
        """A worker restarting under the same id gives up the leases of its dead previous incarnation:
        they expire now (the scheduler retries them at once) instead of after their lease time. A
        remote worker's are those of its tenant only (worker ids are the tenant's own names); a database
        worker (None) serves every tenant."""
        with self.kernel.write() as tx:
            return tx.abandon_leases(worker, epoch_ms(self.kernel.clock()), tenant)

    def heartbeat(self, task_id: str, fencing: int, lease_ttl: timedelta) -> bool:
        """Extend a lease (never past the attempt's deadline); False if the lease is no longer ours."""
        with self.kernel.write() as tx:
            return tx.heartbeat(task_id, fencing, epoch_ms(self.kernel.clock() + lease_ttl))

    def task(self, task_id: str, tenant: str | None = None) -> TaskRow:
        with self.kernel.read() as tx:
            t = tx.task(task_id)
        if t is None or (tenant is not None and t.tenant != tenant):
            raise NotFound(f"task {task_id} not found")
        return t

    def claim_in(
        self,
        tx: ClaimTx,
        now: datetime,
        worker: str,
        activities: Sequence[str],
        limit: int,
        lease_ttl: timedelta,
        tenant: str | None,
        queue: str,
        versions: Sequence[str] | None,
    ) -> list[TaskLease]:
        """Claim inside the caller's transaction (a worker's results and new leases share one)."""
        now_ms = epoch_ms(now)
        out: list[TaskLease] = []
        per_tenant: dict[str, list[str]] = {}
        tenants = [tenant] if tenant else tx.ready_tenants()
        # Start each claim at the next tenant: a worker with one free slot must not always serve the
        # alphabetically first tenant.
        if len(tenants) > 1:
            k = self._next_turn() % len(tenants)
            tenants = tenants[k:] + tenants[:k]
        for ten in tenants:
            room = limit
            settings = tx.tenant(ten)
            quota = settings.settings.get("activity_concurrency") if settings else None
            if quota is not None:
                tx.lock_tenant(ten)  # two claimers must not both take the last free slot
                room = min(room, int(quota) - tx.leased_count(ten))
            if room > 0:
                per_tenant[ten] = tx.ready_ids(ten, activities, queue, now_ms, room, versions)
        ids = round_robin(per_tenant, limit)
        if not ids:
            return out
        alone: list[str] = []
        batch = self.kernel.as_one_batch(
            tx,
            "a batch of claims",
            [run_of_task(i) for i in ids],
            lambda loaded: self._claim_many(tx, ids, loaded, worker, now, lease_ttl, alone),
            skip_locked=True,
        )
        if batch is None:
            alone = ids
        else:
            out.extend(batch)
        for task_id in alone:
            what = f"task {task_id}"
            lease = self.kernel.isolated(tx, what, self._claim_one, task_id, worker, now, lease_ttl)
            if lease is not None:
                out.append(lease)
        return out

    def _next_turn(self) -> int:
        """A counter that rotates which tenant a claim serves first (per process)."""
        with self._turn_lock:
            self._turn += 1
            return self._turn

    def _claim_many(
        self,
        tx: TaskTx,
        task_ids: list[str],
        loaded: dict[str, LoadedRun],
        worker: str,
        now: datetime,
        lease_ttl: timedelta,
        alone: list[str],
    ) -> list[TaskLease]:
        """Claim several tasks whose runs are locked and `loaded`, with one read of the tasks under those
        locks. A task whose run is locked by someone else or gone is put in `alone`, for the
        one-at-a-time path that tells the two apart."""
        tasks = tx.tasks([i for i in task_ids if run_of_task(i) in loaded])
        out: list[TaskLease] = []
        # Tasks of one run (the branches of a parallel step, items of a for-each) are claimed in one
        # transition of that run: one append, one snapshot write.
        per_run: dict[str, list[TaskRow]] = {}
        for task_id in task_ids:
            run_id = run_of_task(task_id)
            t = tasks.get(task_id)
            if t is None:
                if run_id not in loaded:
                    alone.append(task_id)
                continue
            if t.status == "ready":  # else taken or closed before we locked its run
                per_run.setdefault(run_id, []).append(t)
        for run_id, rows in per_run.items():
            # A preloaded run is used once: a later claim of it must see this one's.
            run = loaded.pop(run_id, None) or tx.load_run(run_id)
            if run is not None:
                out.extend(self._claim_loaded(tx, rows, run, worker, now, lease_ttl))
        return out

    def _claim_one(
        self, tx: TaskTx, task_id: str, worker: str, now: datetime, lease_ttl: timedelta
    ) -> TaskLease | None:
        t = tx.task(task_id)
        if t is None:
            return None
        loaded = lock_run(tx, t.run_id)
        if loaded is False:
            return None
        t = tx.task(task_id)  # re-read under the run's lock: someone may have taken or closed it
        if t is None or t.status != "ready":
            return None
        if loaded is None:
            tx.close_task(task_id, "stale")
            return None
        leases = self._claim_loaded(tx, [t], loaded, worker, now, lease_ttl)
        return leases[0] if leases else None

    def _claim_loaded(
        self,
        tx: TaskTx,
        rows: list[TaskRow],
        loaded: LoadedRun,
        worker: str,
        now: datetime,
        lease_ttl: timedelta,
    ) -> list[TaskLease]:
        """Claim tasks of one run in one transition (the first claim, the others as its follow-ups); a
        task the core refuses (no longer wanted, already taken) is closed as stale."""
        t = rows[0]
        claims = [ClaimTask(r.task_id, worker, iso(now + timedelta(milliseconds=r.timeout_ms))) for r in rows]
        try:
            d = self.kernel.definition_for(tx, t.tenant, t.definition, t.version)
            after, events = self.kernel.apply(
                tx, loaded, claims[0], now, d, then=lambda _s, _e: claims[1:], lease_until=now + lease_ttl
            )
        except Rejected:
            tx.close_task(t.task_id, "stale")
            # Nothing was appended (the core refused the first claim): the others on the same run as loaded.
            return self._claim_loaded(tx, rows[1:], loaded, worker, now, lease_ttl) if rows[1:] else []
        fencing = {e.data.task_id: e.data.fencing for e in events if isinstance(e.data, ActivityStarted)}
        out = []
        for r in rows:
            if r.task_id not in fencing:
                tx.close_task(r.task_id, "stale")
                continue
            out.append(
                TaskLease(
                    r.task_id,
                    r.tenant,
                    r.run_id,
                    r.step,
                    r.attempt,
                    r.kind,
                    r.activity,
                    self.kernel.opened(tx, r.tenant, r.run_id, r.input) if r.sealed else r.input,
                    r.idempotency_key,
                    r.definition,
                    r.version,
                    r.delivery,
                    fencing[r.task_id],
                    now + timedelta(milliseconds=r.timeout_ms),
                    attempt_traceparent(after or loaded.state, r.task_id, fencing[r.task_id]),
                )
            )
        return out
