"""Work distribution (service layer): fair claims across tenants with quotas, scheduler passes over
due timers and expired leases, and the dead-letter sweep for tasks no worker takes.

Every pass picks candidates without locking, then locks each run with SKIP LOCKED (run before task,
always: no deadlocks), re-checks the candidate inside the lock, and applies one command.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ..core.commands import (
    ClaimTask,
    DeadLetter,
    ExpireLease,
    FireTimer,
    Rejected,
    ReportFailure,
    ReportSuccess,
)
from ..core.events import ActivityScheduled, ActivityStarted, CompensationScheduled, Event
from ..core.flow import run_of_task
from ..core.shape import shape_of
from ..core.state import RunState
from ..core.timeutil import iso, parse_iso
from ..store import DueTimer, ExpiredLease, LoadedRun, RowLocked, TaskRow, Tx

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..core.shape import Shape
    from .service import Service

log = logging.getLogger("lockstep.app.dispatch")
T = TypeVar("T")

__all__ = [
    "TaskLease",
    "claim",
    "dead_letter_unserved",
    "expire_leases",
    "fire_due_timers",
    "local_eager",
    "report_and_claim",
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


def _isolated(svc: Service, tx: Tx, what: str, fn: Callable[..., T], *args: Any) -> T | None:
    """Run one item of a batch in a savepoint: a broken run (unreadable snapshot, a bug) is logged and
    skipped instead of failing the whole batch, and the next pass tries it again."""
    buffer = getattr(svc._local, "buffer", None)
    mark = len(buffer) if buffer is not None else 0
    try:
        with tx.savepoint():
            return fn(svc, tx, *args)
    except Exception:
        log.exception("skipped %s in this pass", what)
        if buffer is not None:
            del buffer[mark:]  # its events were rolled back: listeners must not see them
        return None


def _as_one_batch(
    svc: Service,
    tx: Tx,
    what: str,
    run_ids: list[str],
    body: Callable[[dict[str, LoadedRun]], T],
    *,
    skip_locked: bool = False,
) -> T | None:
    """The optimistic path of a batch (results, claims, timers): in one savepoint, lock and read all
    its runs with one query (run-id order, so two batches cannot deadlock) and run `body(loaded)` with
    every append in one tx.batch(). None if anything in it failed: it was undone, and the caller goes
    item by item, each in its own savepoint, isolating the broken one."""

    def whole(_svc: Service, _tx: Tx) -> T:
        loaded = tx.load_runs(run_ids, skip_locked=skip_locked)
        with tx.batch():
            return body(loaded)

    return _isolated(svc, tx, what, whole)


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
    versions: Sequence[str] | None = None,
) -> list[TaskLease]:
    """Lease up to `limit` ready tasks in one transaction, tenants in turn, within their quotas.

    `versions` ("name:version") restricts the claim to the definition versions this worker runs."""
    if not activities or limit <= 0:
        return []
    now = svc.clock()
    with svc.write() as tx:
        return _claim_in(svc, tx, now, worker, activities, limit, lease_ttl, tenant, queue, versions)


def report_and_claim(
    svc: Service,
    reports: Sequence[ReportSuccess | ReportFailure],
    worker: str,
    activities: Sequence[str],
    *,
    limit: int,
    lease_ttl: timedelta,
    queue: str = "default",
    versions: Sequence[str] | None = None,
    scan: bool = True,
) -> tuple[list[str | None], list[TaskLease]]:
    """Results and new leases in one transaction. Runs are locked in run-id order, so two workers'
    batches cannot deadlock; each report is isolated in a savepoint (one broken run does not fail
    the others)."""
    # Outputs are measured here, before the transaction; inside it each is compared with its tenant's
    # limits (an output over them becomes a failed attempt, see Service.bounded_report).
    shapes = [
        shape_of(r.output, "output", "max_output_bytes") if isinstance(r, ReportSuccess) else None
        for r in reports
    ]
    now = svc.clock()
    verdicts: dict[int, str | None] = {}
    eager = _Eager(
        worker, frozenset(activities), queue, set(versions) if versions else None, lease_ttl, limit
    )
    with svc.write() as tx:
        order = sorted(range(len(reports)), key=lambda i: reports[i].task_id)

        def report_all(loaded: dict[str, LoadedRun]) -> bool:
            for i in order:
                verdicts[i] = _report_one(svc, tx, reports[i], now, eager, loaded, shapes[i])
            return True

        run_ids = [run_of_task(reports[i].task_id) for i in order]
        if order and _as_one_batch(svc, tx, "a batch of reports", run_ids, report_all) is None:
            eager.leases, eager.room = [], limit
            for i in order:
                what = f"report of {reports[i].task_id}"
                verdicts[i] = _isolated(svc, tx, what, _report_one, reports[i], now, eager, None, shapes[i])
        leases = eager.leases
        if scan and activities and eager.room > 0:
            leases += _claim_in(
                svc, tx, now, worker, activities, eager.room, lease_ttl, None, queue, versions
            )
    return [verdicts[i] for i in range(len(reports))], leases


@dataclass
class _Eager:
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
    owner: Any = None  # the in-process worker the leases go to after the commit (eager starts)

    def follow(
        self, svc: Service, tx: Tx, now: datetime, after: RunState, events: list[Event]
    ) -> ClaimTask | None:
        if self.room <= 0:
            return None
        if svc._tenant_setting(tx, after.tenant, "activity_concurrency") is not None:
            return None
        if (
            self.versions is not None
            and f"{after.definition['name']}:{after.definition['version']}" not in self.versions
        ):
            return None
        for e in events:
            d = e.data
            if (
                isinstance(d, ActivityScheduled | CompensationScheduled)
                and d.activity in self.activities
                and (d.queue or "default") == self.queue
            ):
                return ClaimTask(d.task_id, self.worker, iso(now + timedelta(milliseconds=d.timeout_ms)))
        return None

    def leased(self, tx: Tx, now: datetime, after: RunState, events: list[Event]) -> None:
        started = [
            e.data for e in events if isinstance(e.data, ActivityStarted) and e.data.worker == self.worker
        ]
        if not started:
            return
        st = started[-1]
        sched = next(
            d
            for e in events
            if isinstance(d := e.data, ActivityScheduled | CompensationScheduled) and d.task_id == st.task_id
        )
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
            )
        )


def local_eager(svc: Service) -> _Eager | None:
    """Eager dispatch for a start: the first in-process worker with a free slot (None: no such worker),
    so a run started next to a worker begins its first attempt in the start's own transaction."""
    for w in list(svc.local_workers):
        room = w.free_slots()
        if room > 0:
            versions = set(w.versions) if w.versions else None
            return _Eager(w.worker_id, frozenset(w.activities), w.queue, versions, w.lease_ttl, 1, owner=w)
    return None


def _report_one(
    svc: Service,
    tx: Tx,
    report: ReportSuccess | ReportFailure,
    now: datetime,
    eager: _Eager,
    preloaded: dict[str, LoadedRun] | None = None,
    shape: Shape | None = None,
) -> str:
    # Task ids begin with their run's id: lock the run straight away (one round trip fewer). A
    # preloaded run is used once: a second report for it must see the first one's transition.
    run_id = run_of_task(report.task_id)
    loaded = preloaded.pop(run_id, None) if preloaded is not None else None
    loaded = loaded or tx.load_run(run_id)
    if loaded is None:
        return "not_found"  # (an unknown task of a live run is recorded as ResultIgnored evidence)
    s = loaded.state
    d = svc.definition_for(tx, s.tenant, s.definition["name"], s.definition["version"])
    report = svc.bounded_report(tx, s.tenant, report, shape)
    try:
        after, events = svc.apply(
            tx,
            loaded,
            report,
            now,
            d,
            then=lambda st, evs: eager.follow(svc, tx, now, st, evs),
            lease_until=now + eager.lease_ttl,
        )
    except Rejected as r:
        if r.code != "result_ignored":
            raise
        svc.count_unrecorded(s.tenant)  # a stale report past the bound: answered, not appended
        return "ignored"
    if after is not None:
        eager.leased(tx, now, after, events)
    return "ignored" if events and events[0].type == "ResultIgnored" else "accepted"


def _claim_in(
    svc: Service,
    tx: Tx,
    now: datetime,
    worker: str,
    activities: Sequence[str],
    limit: int,
    lease_ttl: timedelta,
    tenant: str | None,
    queue: str,
    versions: Sequence[str] | None,
) -> list[TaskLease]:
    now_ms = _ms(now)
    out: list[TaskLease] = []
    per_tenant: dict[str, list[str]] = {}
    tenants = [tenant] if tenant else tx.ready_tenants()
    # Start each claim at the next tenant: a worker with one free slot must not always serve the
    # alphabetically first tenant.
    if len(tenants) > 1:
        k = svc.next_claim_turn() % len(tenants)
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
    batch = _as_one_batch(
        svc,
        tx,
        "a batch of claims",
        [run_of_task(i) for i in ids],
        lambda loaded: _claim_many(svc, tx, ids, loaded, worker, now, lease_ttl, alone),
        skip_locked=True,
    )
    if batch is None:
        alone = ids
    else:
        out.extend(batch)
    for task_id in alone:
        lease = _isolated(svc, tx, f"task {task_id}", _claim_one, task_id, worker, now, lease_ttl)
        if lease is not None:
            out.append(lease)
    return out


def _claim_many(
    svc: Service,
    tx: Tx,
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
    for task_id in task_ids:
        run_id = run_of_task(task_id)
        t = tasks.get(task_id)
        if t is None:
            if run_id not in loaded:
                alone.append(task_id)
            continue
        if t.status != "ready":
            continue  # taken or closed before we locked its run
        # A preloaded run is used once: a second task of it must see the first claim.
        run = loaded.pop(run_id, None) or tx.load_run(run_id)
        lease = _claim_loaded(svc, tx, t, run, worker, now, lease_ttl) if run else None
        if lease is not None:
            out.append(lease)
    return out


def _claim_one(
    svc: Service, tx: Tx, task_id: str, worker: str, now: datetime, lease_ttl: timedelta
) -> TaskLease | None:
    t = tx.task(task_id)
    if t is None:
        return None
    loaded = _lock(tx, t.run_id)
    if loaded is False:
        return None
    t = tx.task(task_id)  # re-read under the run's lock: someone may have taken or closed it
    if t is None or t.status != "ready":
        return None
    if loaded is None:
        tx.close_task(task_id, "stale")
        return None
    return _claim_loaded(svc, tx, t, loaded, worker, now, lease_ttl)


def _claim_loaded(
    svc: Service, tx: Tx, t: TaskRow, loaded: LoadedRun, worker: str, now: datetime, lease_ttl: timedelta
) -> TaskLease | None:
    deadline = now + timedelta(milliseconds=t.timeout_ms)
    try:
        d = svc.definition_for(tx, t.tenant, t.definition, t.version)
        claim = ClaimTask(t.task_id, worker, iso(deadline))
        _after, events = svc.apply(tx, loaded, claim, now, d, lease_until=now + lease_ttl)
    except Rejected:
        tx.close_task(t.task_id, "stale")
        return None
    return TaskLease(
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
        next(e.data.fencing for e in events if isinstance(e.data, ActivityStarted)),
        deadline,
    )


def fire_due_timers(svc: Service, limit: int = 200, partitions: list[int] | None = None) -> int:
    now = svc.clock()
    with svc.write() as tx:
        due = tx.due_timers(_ms(now), limit, partitions)
        if not due:
            return 0

        # Runs another transaction holds are skipped, and the armed-or-not question is left to the
        # core's generation check (a fired or superseded timer is refused there).
        fired = _as_one_batch(
            svc,
            tx,
            "a batch of timers",
            [t.run_id for t in due],
            lambda loaded: sum(_fire_one(svc, tx, t, now, loaded) for t in due),
            skip_locked=True,
        )
        if fired is not None:
            return fired
        return sum(
            bool(_isolated(svc, tx, f"timer {t.key} of run {t.run_id}", _fire_one, t, now)) for t in due
        )


def _fire_one(
    svc: Service, tx: Tx, t: DueTimer, now: datetime, preloaded: dict[str, LoadedRun] | None = None
) -> bool:
    if preloaded is not None:
        loaded: LoadedRun | Literal[False] | None = preloaded.pop(t.run_id, None) or _lock(tx, t.run_id)
    else:
        loaded = _lock(tx, t.run_id)
        if loaded is not False and tx.timer_status(t.run_id, t.key, t.generation) != "scheduled":
            return False
    if loaded is False:
        return False
    if loaded is None:
        tx.close_timer(t.run_id, t.key, t.generation, "stale")
        return False
    s = loaded.state
    try:
        d = svc.definition_for(tx, s.tenant, s.definition["name"], s.definition["version"])
        svc.apply(tx, loaded, FireTimer(t.key, t.generation), now, d)
        return True
    except Rejected as r:
        # A duplicate or superseded timer: the generation check turns it into a no-op.
        if r.code == "stale_timer":
            tx.close_timer(t.run_id, t.key, t.generation, "stale")
        return False


def expire_leases(svc: Service, limit: int = 200, partitions: list[int] | None = None) -> int:
    now = svc.clock()
    with svc.write() as tx:
        expired = tx.expired_leases(_ms(now), limit, partitions)
        return sum(
            bool(
                _isolated(
                    svc,
                    tx,
                    f"lease of task {lease.task_id}",
                    _expire_one,
                    lease,
                    now,
                )
            )
            for lease in expired
        )


def _expire_one(svc: Service, tx: Tx, lease: ExpiredLease, now: datetime) -> bool:
    now_ms = _ms(now)
    loaded = _lock(tx, lease.run_id)
    if loaded is False:
        return False
    current = tx.task(lease.task_id)  # a heartbeat may have renewed it meanwhile
    if (
        current is None
        or current.status != "leased"
        or current.fencing != lease.fencing
        or (current.lease_expires_at or 0) > now_ms
    ):
        return False
    if loaded is None:
        tx.close_task(lease.task_id, "stale")
        return False
    if now_ms >= lease.deadline:
        reason = "the attempt did not finish within its timeout"
    else:
        reason = f"worker {lease.worker} stopped renewing its lease (crashed, hung or cut off)"
    s = loaded.state
    try:
        d = svc.definition_for(tx, s.tenant, s.definition["name"], s.definition["version"])
        svc.apply(tx, loaded, ExpireLease(lease.task_id, lease.attempt, lease.fencing, reason), now, d)
        return True
    except Rejected:
        tx.close_task(lease.task_id, "stale")
        return False


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
