"""Workers: lease tasks, run activities in a thread pool, heartbeat, report with the fencing token.

Delivery is at least once: a worker that dies loses its lease, and the scheduler turns the expiry into
ActivityTimedOut (then a retry, or needs_attention for at-most-once steps). Reports carry the attempt
and fencing token, so a late or duplicate report is recorded as ResultIgnored and changes nothing.

One thread, the pump, talks to the database: each turn records every result that finished since the
last turn and leases new tasks for the free slots, in one transaction (one commit for many steps:
group commit). A result counts as reported only once that transaction committed; until then it stays
in memory and its lease keeps being renewed.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta

from ..app import failpoints
from ..app.service import Service, TaskLease
from ..core.commands import ReportFailure, ReportSuccess
from ..core.events import ActivityScheduled, ActivityStarted, CompensationScheduled, Event
from ..core.state import RunState
from ..errors import LockstepError
from .activity import DEFAULT_SLOTS, REGISTRY, Registry
from .execute import Attempt, Outcome, execute
from .httpstep import builtin_activities
from .scheduler import Scheduler

__all__ = ["Worker"]

log = logging.getLogger("lockstep.worker")


MAX_BATCH = 64  # results per transaction: enough to amortise the commit, small enough to stay short
REPORT_DEADLINE_S = 3600.0  # a result the database never takes is dropped (logged) after this


@dataclass
class _InFlight:
    lease: TaskLease
    lost: bool = False
    started: float = field(default_factory=time.monotonic)
    reports: int = 0  # results of this lease waiting in the queue


@dataclass
class _Result:
    lease: TaskLease
    command: ReportSuccess | ReportFailure
    finished: float = field(default_factory=time.monotonic)


class Worker:
    def __init__(
        self,
        service: Service,
        registry: Registry | None = None,
        *,
        activities: list[str] | None = None,
        concurrency: int = DEFAULT_SLOTS,
        lease_ttl: timedelta = timedelta(seconds=10),
        poll_interval: timedelta = timedelta(milliseconds=200),
        scheduler: bool = True,
        worker_id: str | None = None,
        queue: str = "default",
        versions: list[str] | None = None,
        http: bool = True,
    ) -> None:
        self.service = service
        self.queue = queue
        # "name:version" pairs this worker runs (None: all). Old and new workers side by side during a
        # deployment each take only the tasks of the versions their code implements.
        self.versions = versions
        self.registry = registry or REGISTRY
        # Built-in activities (`http` steps): executed here, with the tenant's egress policy and secrets;
        # `http=False` leaves them to other workers.
        self.builtins = builtin_activities(service) if http else {}
        self.activities = activities or self.registry.names()
        missing = [a for a in self.activities if a not in self.registry and a not in self.builtins]
        if missing:
            raise LockstepError(f"no function registered for activity type(s) {', '.join(missing)}")
        self.activities += [a for a in self.builtins if a not in self.activities]
        if concurrency < 1:
            raise LockstepError("concurrency must be at least 1")
        self.concurrency = concurrency
        self.lease_ttl = lease_ttl
        self.poll = poll_interval.total_seconds()
        # A given id names a slot that one live worker fills at a time (a supervisor, a pod ordinal), so
        # a worker starting under it may abandon the leases its dead predecessor left behind.
        self.named = worker_id is not None
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{id(self) % 10_000:04d}"
        # A named worker's scheduler takes the same name: restarted, it gets its partitions back at once.
        self.scheduler = (
            Scheduler(service, poll_interval=poll_interval, owner=worker_id) if scheduler else None
        )
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self._inflight: dict[str, _InFlight] = {}
        self._results: deque[_Result] = deque()
        # Whether a claim should look for ready tasks: set when a task was queued (here, or a NOTIFY),
        # after a claim that got all it asked for, and every poll interval; an idle worker reporting
        # results does not scan an empty queue on each of them.
        self._scan_due = True
        self._scanned_at = 0.0
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="lockstep-activity")
        self._threads: list[threading.Thread] = []
        self.completed = 0

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> Worker:
        if self.named:
            try:
                abandoned = self.service.abandon_leases(self.worker_id)
            except LockstepError as exc:  # the database is down: the leases expire on their own
                log.warning("could not abandon the leases of a previous %s: %s", self.worker_id, exc)
            else:
                if abandoned:
                    log.warning(
                        "abandoned %d lease(s) of a previous %s: retried now", abandoned, self.worker_id
                    )
        self.service.local_workers.append(self)
        self._spawn(self._pump, "lockstep-pump")
        self._spawn(self._heartbeat_loop, "lockstep-heartbeat")
        # In this process: wake up as soon as a committed command queued a task (no poll delay).
        self.service.listeners.append(self._on_events)
        # PostgreSQL: wake up when a task is queued instead of at the next poll (SQLite: returns at once)
        threading.Thread(
            target=self.service.store.listen,
            args=(["lockstep_tasks"], self._tasks_queued, self.stop_event),
            name="lockstep-listen",
            daemon=True,
        ).start()
        if self.scheduler is not None:
            self._spawn(
                lambda: self.scheduler.run(self.stop_event) if self.scheduler else None, "lockstep-scheduler"
            )
        log.info("worker %s serving %s", self.worker_id, ", ".join(self.activities) or "(no activities)")
        return self

    def _spawn(self, target: Callable[[], object], name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _on_events(self, _state: RunState, events: list[Event]) -> None:
        scheduled = {
            e.data.task_id for e in events if isinstance(e.data, ActivityScheduled | CompensationScheduled)
        }
        # A task leased in the very transition that scheduled it (eager dispatch) is nothing to look for.
        if scheduled - {e.data.task_id for e in events if isinstance(e.data, ActivityStarted)}:
            self._tasks_queued()

    def _tasks_queued(self) -> None:
        self._scan_due = True
        self.wake.set()

    def stop(self, timeout: float | None = 30.0) -> None:
        """Stop claiming, let in-flight activities finish and report (graceful drain), then return."""
        self.stop_event.set()
        self.wake.set()
        if self in self.service.local_workers:
            self.service.local_workers.remove(self)
        if self._on_events in self.service.listeners:
            self.service.listeners.remove(self._on_events)
        if self.scheduler is not None:
            self.scheduler.wake.set()
        # The pump leaves once every in-flight result is reported; only then may the pool close.
        if self._threads:
            self._threads[0].join(timeout)
        self._pool.shutdown(wait=True, cancel_futures=False)
        for t in self._threads:
            t.join(timeout)

    @property
    def busy(self) -> int:
        with self._lock:
            return len(self._inflight)

    # --- loops ---------------------------------------------------------------------------------
    def _pump(self) -> None:
        backoff = self.poll
        while True:
            with self._lock:
                batch = [self._results.popleft() for _ in range(min(len(self._results), MAX_BATCH))]
                # The slots of the results reported now are free once this transaction commits: the
                # runs they continue can be leased to them eagerly in it (if it fails, nothing is).
                busy = len(self._inflight) - self._freed_by(batch)
            stopping = self.stop_event.is_set()
            if stopping and not batch and busy == 0:
                return
            free = 0 if stopping else self.concurrency - busy
            scan = free > 0 and (self._scan_due or time.monotonic() - self._scanned_at >= self.poll)
            if not batch and not scan:
                self.wake.wait(self.poll)
                self.wake.clear()
                continue
            if scan:
                self._scan_due, self._scanned_at = False, time.monotonic()
            try:
                verdicts, leases = self.service.report_and_claim(
                    [r.command for r in batch],
                    self.worker_id,
                    self.activities if free > 0 else [],
                    limit=free,
                    lease_ttl=self.lease_ttl,
                    queue=self.queue,
                    versions=self.versions,
                    scan=scan,
                )
                if scan and len(leases) >= free:
                    self._scan_due = True  # it got all it asked for: there may be more
                backoff = self.poll
            except Exception as exc:  # database down or a bug: keep the results, back off, try again
                self._scan_due = self._scan_due or scan
                if not isinstance(exc, LockstepError):
                    log.exception("report/claim failed unexpectedly")
                log.warning("report/claim failed: %s; retrying in %.1fs", exc, backoff)
                self._requeue(batch)
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            retry = []
            for result, verdict in zip(batch, verdicts, strict=True):
                if verdict is None:
                    retry.append(result)  # a broken run: logged by the service, tried again later
                    continue
                self._reported(result, verdict)
            self._requeue(retry)
            self.accept(leases)
            if retry:
                self.stop_event.wait(backoff)
            elif not batch and not leases:
                self.wake.wait(self.poll)
                self.wake.clear()

    def _freed_by(self, batch: list[_Result]) -> int:
        """How many in-flight attempts `batch` finishes (an attempt reported twice, by the deliver-twice
        fail point, is finished by its last report)."""
        counts = Counter(r.lease.task_id for r in batch)
        return sum(
            1
            for task_id, n in counts.items()
            if (item := self._inflight.get(task_id)) is not None and item.reports <= n
        )

    def free_slots(self) -> int:
        """Slots for eager leases from a start in this process (none once stopping)."""
        return 0 if self.stop_event.is_set() else self.concurrency - self.busy

    def accept(self, leases: list[TaskLease]) -> None:
        """Run leases handed over by a committed start transaction in this process (eager dispatch)."""
        for lease in leases:
            with self._lock:
                self._inflight[lease.task_id] = _InFlight(lease)
            try:
                self._pool.submit(self._execute, lease)
            except RuntimeError:  # stopped meanwhile: the lease expires and the attempt is retried
                with self._lock:
                    self._inflight.pop(lease.task_id, None)
                log.warning("worker stopping: %s left to lease expiry", lease.task_id)

    def _requeue(self, results: list[_Result]) -> None:
        now = time.monotonic()
        keep = [r for r in results if now - r.finished < REPORT_DEADLINE_S]
        for r in results:
            if r not in keep:
                log.error("giving up reporting %s: the database did not take it for an hour", r.lease.task_id)
                self._reported(r, None)
        with self._lock:
            self._results.extendleft(reversed(keep))

    def _reported(self, result: _Result, verdict: str | None) -> None:
        lease = result.lease
        if verdict == "ignored":
            log.info(
                "result of %s attempt %d was stale and recorded as ResultIgnored",
                lease.task_id,
                lease.attempt,
            )
        elif verdict == "not_found":
            log.error("giving up reporting %s: the task or its run no longer exists", lease.task_id)
        if verdict is not None:
            self.completed += 1
        with self._lock:
            item = self._inflight.get(lease.task_id)
            if item is not None:
                item.reports -= 1
                if item.reports <= 0:
                    del self._inflight[lease.task_id]
        failpoints.hit(
            "worker.after_report", task=lease.task_id, attempt=lease.attempt, worker=self.worker_id
        )
        self.wake.set()

    def _heartbeat_loop(self) -> None:
        interval = max(self.lease_ttl.total_seconds() / 3, 0.05)
        while True:
            # Renew at the normal pace, also while draining after stop(); leave once nothing is in flight.
            deadline = time.monotonic() + interval
            while time.monotonic() < deadline:
                if self.stop_event.is_set() and not self.busy:
                    return
                time.sleep(min(0.05, interval))
            with self._lock:
                items = list(self._inflight.values())
            for item in items:
                if not item.lost:
                    item.lost = not self._beat(item.lease)

    def _beat(self, lease: TaskLease) -> bool:
        try:
            return self.service.heartbeat(lease.task_id, lease.fencing, self.lease_ttl)
        except Exception as exc:  # never let the heartbeat thread die
            log.warning("heartbeat for %s failed: %s", lease.task_id, exc)
            return True  # unknown: keep working; the fencing token decides at report time

    # --- one task ------------------------------------------------------------------------------
    def _execute(self, lease: TaskLease) -> None:
        """Run one attempt in a pool thread and queue its result for the pump."""

        def beat() -> bool:
            with self._lock:
                item = self._inflight.get(lease.task_id)
            if item is None or item.lost:
                return False
            ok = self._beat(lease)
            item.lost = not ok
            return ok

        attempt = Attempt(
            lease.task_id,
            lease.tenant,
            lease.run_id,
            lease.step,
            lease.attempt,
            lease.kind,
            lease.activity,
            lease.input,
            lease.idempotency_key,
            lease.definition,
            lease.version,
            lease.traceparent,
        )
        outcomes = execute(self.registry, attempt, beat, self.worker_id, self.builtins)
        results = [self._command(lease, o) for o in outcomes]
        with self._lock:
            item = self._inflight.get(lease.task_id)
            if item is not None:
                item.reports += len(results)
            self._results.extend(_Result(lease, c) for c in results)
        self.wake.set()

    def _command(self, lease: TaskLease, outcome: Outcome) -> ReportSuccess | ReportFailure:
        if outcome[0] == "ok":
            return self.service.success_report(lease.task_id, lease.attempt, lease.fencing, outcome[1])
        code, message, retryable, unexpected = outcome[1]
        return self.service.failure_report(
            lease.task_id,
            lease.attempt,
            lease.fencing,
            code,
            message,
            retryable=retryable,
            unexpected=unexpected,
        )
