"""Workers: lease tasks, run activities in a thread pool, heartbeat, report with the fencing token.

Delivery is at least once: a worker that dies loses its lease, and the scheduler turns the expiry into
ActivityTimedOut (then a retry, or needs_attention for at-most-once steps). Reports carry the attempt
and fencing token, so a late or duplicate report is recorded as ResultIgnored and changes nothing.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .. import failpoints
from ..errors import LockstepError
from ..service import Service, TaskLease
from .activity import REGISTRY, ActivityContext, ActivityError, LeaseLost, Registry
from .scheduler import Scheduler

__all__ = ["Worker"]

log = logging.getLogger("lockstep.worker")


@dataclass
class _InFlight:
    lease: TaskLease
    lost: bool = False
    started: float = field(default_factory=time.monotonic)


class Worker:
    def __init__(
        self,
        service: Service,
        registry: Registry | None = None,
        *,
        activities: list[str] | None = None,
        concurrency: int = 4,
        lease_ttl: timedelta = timedelta(seconds=10),
        poll_interval: timedelta = timedelta(milliseconds=200),
        scheduler: bool = True,
        worker_id: str | None = None,
        queue: str = "default",
        versions: list[str] | None = None,
    ) -> None:
        self.service = service
        self.queue = queue
        # "name:version" pairs this worker runs (None: all). Old and new workers side by side during a
        # deployment each take only the tasks of the versions their code implements.
        self.versions = versions
        self.registry = registry or REGISTRY
        self.activities = activities or self.registry.names()
        missing = [a for a in self.activities if a not in self.registry]
        if missing:
            raise LockstepError(f"no function registered for activity type(s) {', '.join(missing)}")
        if concurrency < 1:
            raise LockstepError("concurrency must be at least 1")
        self.concurrency = concurrency
        self.lease_ttl = lease_ttl
        self.poll = poll_interval.total_seconds()
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{id(self) % 10_000:04d}"
        self.scheduler = Scheduler(service, poll_interval=poll_interval) if scheduler else None
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self._inflight: dict[str, _InFlight] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="lockstep-activity")
        self._threads: list[threading.Thread] = []
        self.completed = 0

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> Worker:
        self._spawn(self._claim_loop, "lockstep-claim")
        self._spawn(self._heartbeat_loop, "lockstep-heartbeat")
        # In this process: wake up as soon as a committed command queued a task (no poll delay).
        self.service.listeners.append(self._on_events)
        listen = getattr(self.service.store, "listen", None)
        if listen is not None:  # PostgreSQL: wake up when a task is queued instead of at the next poll
            threading.Thread(
                target=listen,
                args=(["lockstep_tasks"], self.wake.set, self.stop_event),
                name="lockstep-listen",
                daemon=True,
            ).start()
        if self.scheduler is not None:
            self._spawn(
                lambda: self.scheduler.run(self.stop_event) if self.scheduler else None, "lockstep-scheduler"
            )
        log.info("worker %s serving %s", self.worker_id, ", ".join(self.activities) or "(no activities)")
        return self

    def _spawn(self, target: Any, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _on_events(self, _state: Any, events: list[Any]) -> None:
        if any(e.type in ("ActivityScheduled", "CompensationScheduled") for e in events):
            self.wake.set()

    def stop(self, timeout: float | None = 30.0) -> None:
        """Stop claiming, let in-flight activities finish and report (graceful drain), then return."""
        self.stop_event.set()
        self.wake.set()
        if self._on_events in self.service.listeners:
            self.service.listeners.remove(self._on_events)
        if self.scheduler is not None:
            self.scheduler.wake.set()
        # The claim loop must be gone before the pool closes, or a last claim could not be submitted.
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
    def _claim_loop(self) -> None:
        backoff = self.poll
        while not self.stop_event.is_set():
            free = self.concurrency - self.busy
            if free <= 0:
                self.wake.wait(self.poll)
                self.wake.clear()
                continue
            try:
                leases = self.service.claim(
                    self.worker_id,
                    self.activities,
                    limit=free,
                    lease_ttl=self.lease_ttl,
                    queue=self.queue,
                    versions=self.versions,
                )
                backoff = self.poll
            except Exception as exc:  # database down or a bug: log, back off, never let the thread die
                if not isinstance(exc, LockstepError):
                    log.exception("claim failed unexpectedly")
                log.warning("claim failed: %s; retrying in %.1fs", exc, backoff)
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            for lease in leases:
                with self._lock:
                    self._inflight[lease.task_id] = _InFlight(lease)
                self._pool.submit(self._execute, lease)
            if not leases:
                self.wake.wait(self.poll)
                self.wake.clear()

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
        where = {"task": lease.task_id, "attempt": lease.attempt, "worker": self.worker_id}
        try:
            failpoints.hit("worker.before_call", **where)
            outcome = self._call(lease)
            failpoints.hit("worker.after_call", **where)  # the effect is done, the report not yet sent
            if failpoints.enabled("worker.deliver_twice", **where):
                # What a broker redelivering the message would cause: the same attempt runs and
                # reports twice. The fencing token must turn the second report into evidence only.
                self._report(lease, outcome)
                outcome = self._call(lease)
            self._report(lease, outcome)
            failpoints.hit("worker.after_report", **where)
        finally:
            with self._lock:
                self._inflight.pop(lease.task_id, None)
            self.wake.set()

    def _call(self, lease: TaskLease) -> tuple[str, Any]:
        fn = self.registry.get(lease.activity)
        if fn is None:
            return (
                "fail",
                ("UnknownActivity", f"no function for {lease.activity} on {self.worker_id}", True, False),
            )

        def beat() -> bool:
            with self._lock:
                item = self._inflight.get(lease.task_id)
            if item is None or item.lost:
                return False
            ok = self._beat(lease)
            item.lost = not ok
            return ok

        key = lease.idempotency_key
        if failpoints.enabled("unsafe.key_per_attempt", task=lease.task_id):
            key = f"{key}#{lease.attempt}"  # a broken build: retries look like new requests downstream
        ctx = ActivityContext(
            lease.tenant,
            lease.run_id,
            lease.step,
            lease.attempt,
            key,
            lease.activity,
            lease.definition,
            lease.version,
            lease.kind,
            beat,
        )
        try:
            args = (lease.input, ctx) if len(inspect.signature(fn).parameters) == 2 else (lease.input,)
            result = fn(*args)
            if inspect.isawaitable(result):
                result = asyncio.run(_await(result))
            return ("ok", result)
        except ActivityError as exc:
            return ("fail", (exc.code, exc.message, exc.retryable, False))
        except LeaseLost as exc:
            return ("fail", ("LeaseLost", str(exc), True, True))
        except Exception as exc:
            return ("fail", (type(exc).__name__, str(exc) or type(exc).__name__, True, True))

    def _report(self, lease: TaskLease, outcome: tuple[str, Any]) -> None:
        """Report until the database takes it; the result stays in memory meanwhile."""
        backoff = 0.1
        deadline = time.monotonic() + 3600
        while True:
            try:
                if outcome[0] == "ok":
                    verdict = self.service.complete(lease.task_id, lease.attempt, lease.fencing, outcome[1])
                else:
                    code, message, retryable, unexpected = outcome[1]
                    verdict = self.service.fail(
                        lease.task_id,
                        lease.attempt,
                        lease.fencing,
                        code,
                        message,
                        retryable=retryable,
                        unexpected=unexpected,
                    )
                self.completed += 1
                if verdict == "ignored":
                    log.info(
                        "result of %s attempt %d was stale and recorded as ResultIgnored",
                        lease.task_id,
                        lease.attempt,
                    )
                return
            except LockstepError as exc:
                if getattr(exc, "code", "") == "not_found" or time.monotonic() > deadline:
                    log.error("giving up reporting %s: %s", lease.task_id, exc)
                    return
                log.warning("report of %s failed: %s; retrying in %.1fs", lease.task_id, exc, backoff)
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)


async def _await(aw: Any) -> Any:
    return await aw
