"""Remote workers: the database worker's guarantees over the HTTP task API, for a process that holds an
API key and never sees the database.

- Leases come from a long poll (`POST /v1/tasks/poll`) for the free slots only.
- Activities run in a thread pool with the database worker's calling convention (runtime/execute.py).
- Each lease is renewed while its activity runs and until its result is delivered. A heartbeat that is
  answered "lost" makes `ctx.heartbeat()` raise LeaseLost; one that gets no answer changes nothing
  (the fencing token decides when the result arrives).
- A result is sent at once from the activity's thread (results go out in parallel) and kept in
  memory until the server answers it. No answer (server down, network cut, 5xx): tried again, in
  order, by one reporter thread with a growing pause (at most MAX_BACKOFF_S), for up to
  REPORT_DEADLINE_S. A fencing answer (409 stale result, 404, 410) ends it: the lease was superseded,
  another attempt owns the step, and the result is dropped (the server recorded it as ResultIgnored).
- `stop()` (SIGTERM) polls no more, lets in-flight activities finish and delivers their results
  (graceful drain); what is left when the drain times out goes back by lease expiry.

Delivery is at least once, as for the database worker: a SIGKILLed remote worker's leases expire and the
scheduler retries the attempts with the same idempotency key.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from ..app import failpoints
from ..errors import Conflict, Gone, InvalidInput, LockstepError, NotFound, RateLimited
from .activity import DEFAULT_SLOTS, REGISTRY, Registry
from .execute import Attempt, Outcome, execute

__all__ = ["RemoteTask", "RemoteWorker", "TaskApi"]

log = logging.getLogger("lockstep.worker")
MAX_BACKOFF_S = 5.0
REPORT_DEADLINE_S = 3600.0  # as the database worker: a result never taken is dropped (logged) after this
MAX_CODE, MAX_MESSAGE = 200, 10_000  # what the task API takes of an error's code and message


class RemoteTask(Protocol):
    """A leased task as the task API describes it (lockstep.client.Task is one)."""

    @property
    def task_id(self) -> str: ...
    @property
    def tenant(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def step(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def activity(self) -> str: ...
    @property
    def input(self) -> Any: ...
    @property
    def idempotency_key(self) -> str: ...
    @property
    def definition(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def fencing_token(self) -> int: ...
    @property
    def traceparent(self) -> str: ...


class TaskApi(Protocol):
    """The task API of a lockstep server (lockstep.client.Client is one). Errors are lockstep errors:
    Unavailable when there was no answer, Conflict/NotFound/Gone when the lease is no longer held."""

    def poll_tasks(
        self,
        activities: Sequence[str],
        *,
        max_tasks: int = 1,
        wait_seconds: float = 20.0,
        lease_seconds: float = 30.0,
        worker_id: str | None = None,
        queue: str | None = None,
        versions: Sequence[str] | None = None,
    ) -> Sequence[RemoteTask]: ...

    def abandon_leases(self, worker_id: str) -> int: ...

    def heartbeat(self, task_id: str, fencing_token: int, lease_seconds: float = 30.0) -> bool: ...

    def complete_task(self, task_id: str, attempt: int, fencing_token: int, output: Any) -> None: ...

    def fail_task(
        self,
        task_id: str,
        attempt: int,
        fencing_token: int,
        code: str,
        message: str = "",
        *,
        retryable: bool = True,
    ) -> None: ...


@dataclass
class _InFlight:
    task: RemoteTask
    lost: bool = False
    pending: int = 1  # results of this lease not yet answered by the server


@dataclass
class _Result:
    task: RemoteTask
    outcome: Outcome
    finished: float = field(default_factory=time.monotonic)
    tries: int = 0


class RemoteWorker:
    def __init__(
        self,
        api: TaskApi,
        registry: Registry | None = None,
        *,
        activities: list[str] | None = None,
        concurrency: int = DEFAULT_SLOTS,
        lease_ttl: timedelta = timedelta(seconds=30),
        poll_wait: timedelta = timedelta(seconds=10),
        worker_id: str | None = None,
        queue: str = "default",
        versions: list[str] | None = None,
    ) -> None:
        self.api = api
        self.registry = registry or REGISTRY
        self.activities = activities or self.registry.names()
        missing = [a for a in self.activities if a not in self.registry]
        if missing:
            raise LockstepError(f"no function registered for activity type(s) {', '.join(missing)}")
        if not self.activities:
            raise LockstepError("a remote worker needs at least one activity")
        if concurrency < 1:
            raise LockstepError("concurrency must be at least 1")
        if lease_ttl.total_seconds() < 1:
            raise InvalidInput("the lease of a remote worker must be at least 1s (the task API's minimum)")
        self.concurrency = concurrency
        self.lease_s = lease_ttl.total_seconds()
        self.poll_wait_s = min(max(poll_wait.total_seconds(), 0.0), 30.0)
        # As a database worker's: a given id is one live worker at a time, so it may hand back the
        # leases its dead predecessor left (a made-up id has no predecessor).
        self.named = worker_id is not None
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self.queue = queue
        self.versions = versions
        self.stop_event = threading.Event()
        self._inflight: dict[str, _InFlight] = {}
        self._results: deque[_Result] = deque()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a slot freed, a result queued or answered
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="lockstep-activity")
        self._threads: list[threading.Thread] = []
        self.completed = 0  # results the server answered (accepted or refused as stale)
        self.dropped = 0  # of those, refused as stale (fenced)

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> RemoteWorker:
        if self.named:
            self._abandon_predecessor()
        for target, name in (
            (self._poll_loop, "lockstep-poll"),
            (self._report_loop, "lockstep-report"),
            (self._heartbeat_loop, "lockstep-heartbeat"),
        ):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        log.info("remote worker %s serving %s", self.worker_id, ", ".join(self.activities))
        return self

    def _abandon_predecessor(self) -> None:
        try:
            abandoned = self.api.abandon_leases(self.worker_id)
        except LockstepError as exc:  # server down or too old to know the call: the leases expire anyway
            log.warning("could not abandon the leases of a previous %s: %s", self.worker_id, exc)
        else:
            if abandoned:
                log.warning("abandoned %d lease(s) of a previous %s: retried now", abandoned, self.worker_id)

    def stop(self, timeout: float | None = 30.0) -> bool:
        """Poll no more, let in-flight activities finish and their results be delivered (graceful
        drain); True if everything was delivered within `timeout` seconds (else those leases expire and
        their attempts are retried elsewhere)."""
        self.stop_event.set()
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        if self._threads:  # a long poll in flight may still lease tasks: wait for it, then drain them
            self._threads[0].join(None if timeout is None else max(0.0, deadline - time.monotonic()))
        with self._changed:
            self._changed.notify_all()
            while self._inflight and time.monotonic() < deadline:
                self._changed.wait(min(0.2, max(0.0, deadline - time.monotonic())))
            left = len(self._inflight)
        if left:
            log.warning("drain timed out: %d task(s) left to lease expiry (retried elsewhere)", left)
        self._pool.shutdown(wait=not left, cancel_futures=True)
        return left == 0

    @property
    def busy(self) -> int:
        with self._lock:
            return len(self._inflight)

    # --- polling -------------------------------------------------------------------------------
    def _poll_loop(self) -> None:
        backoff = 0.2
        while not self.stop_event.is_set():
            with self._changed:
                free = self.concurrency - len(self._inflight)
                if free <= 0:
                    self._changed.wait(0.5)
                    continue
            try:
                tasks = self.api.poll_tasks(
                    self.activities,
                    max_tasks=free,
                    wait_seconds=self.poll_wait_s,
                    lease_seconds=self.lease_s,
                    worker_id=self.worker_id,
                    queue=self.queue,
                    versions=self.versions,
                )
                backoff = 0.2
            except RateLimited as exc:  # the server says when: wait that long (bounded), not our back-off
                self.stop_event.wait(min(max(exc.retry_after, backoff), MAX_BACKOFF_S))
                continue
            except LockstepError as exc:  # server down, key revoked, ...: keep trying, more slowly
                log.warning("poll failed: %s; retrying in %.1fs", exc, backoff)
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            for task in tasks:  # leased to us: run it even when stopping (the drain finishes it)
                with self._lock:
                    self._inflight[task.task_id] = _InFlight(task)
                try:
                    self._pool.submit(self._run, task)
                except RuntimeError:  # the drain timed out meanwhile: left to lease expiry
                    with self._lock:
                        self._inflight.pop(task.task_id, None)
                    log.warning("worker stopped: %s left to lease expiry", task.task_id)

    def _run(self, task: RemoteTask) -> None:
        def beat() -> bool:
            with self._lock:
                item = self._inflight.get(task.task_id)
            if item is None or item.lost:
                return False
            item.lost = not self._beat(task)
            return not item.lost

        attempt = Attempt(
            task.task_id,
            task.tenant,
            task.run_id,
            task.step,
            task.attempt,
            task.kind,
            task.activity,
            task.input,
            task.idempotency_key,
            task.definition,
            task.version,
            task.traceparent,
        )
        outcomes = execute(self.registry, attempt, beat, self.worker_id)
        with self._changed:
            item = self._inflight.get(task.task_id)
            if item is not None:
                item.pending = len(outcomes)
        # Delivered from this thread first, so results go out in parallel (one per slot); one that gets
        # no answer goes to the reporter thread, which tries again in order with a growing pause.
        for outcome in outcomes:
            result = _Result(task, outcome)
            if self._deliver(result):
                self._answered(result)
                continue
            with self._changed:
                self._results.append(result)
                self._changed.notify_all()

    # --- reporting -----------------------------------------------------------------------------
    def _report_loop(self) -> None:
        backoff = 0.2
        while True:
            with self._changed:
                while not self._results:
                    if self.stop_event.is_set() and not self._inflight:
                        return
                    self._changed.wait(0.5)
                result = self._results.popleft()
            if self._deliver(result):
                backoff = 0.2
                self._answered(result)
                continue
            if time.monotonic() - result.finished > REPORT_DEADLINE_S:
                log.error("giving up reporting %s: no server took it for an hour", result.task.task_id)
                self._answered(result)
                continue
            with self._lock:
                self._results.appendleft(result)  # the oldest first, once the server answers again
            time.sleep(backoff)  # also while draining: the drain waits for exactly these
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _deliver(self, r: _Result) -> bool:
        """Send one result; True once the server answered it for good (taken, or refused as stale)."""
        t = r.task
        r.tries += 1
        try:
            if r.outcome[0] == "ok":
                output = _json_or_none(r.outcome[1])
                if output is None:
                    self.api.fail_task(
                        t.task_id,
                        t.attempt,
                        t.fencing_token,
                        "InvalidOutput",
                        "activity output is not JSON",
                        retryable=False,
                    )
                else:
                    self.api.complete_task(t.task_id, t.attempt, t.fencing_token, r.outcome[1])
            else:
                code, message, retryable, _unexpected = r.outcome[1]
                self.api.fail_task(
                    t.task_id,
                    t.attempt,
                    t.fencing_token,
                    code[:MAX_CODE],
                    message[:MAX_MESSAGE],
                    retryable=retryable,
                )
        except (Conflict, NotFound, Gone) as exc:  # fenced: another attempt owns the step now
            log.info("result of %s attempt %d refused (%s): dropped", t.task_id, t.attempt, exc)
            self.dropped += 1
            return True
        except InvalidInput as exc:
            if r.outcome[0] == "ok" and exc.code != "output_too_large":
                # The server refused the output itself (a reserved key, ...): the attempt fails with
                # its reason, as the database worker records an output it cannot store.
                r.outcome = ("fail", ("InvalidOutput", str(exc), False, False))
                return self._deliver(r)
            log.error("result of %s refused: %s", t.task_id, exc)
            return True
        except RateLimited as exc:
            self.stop_event.wait(min(exc.retry_after, MAX_BACKOFF_S))
            return False
        except LockstepError as exc:  # no answer, 5xx, a revoked key: kept and tried again
            if r.tries == 1 or r.tries % 10 == 0:
                log.warning("report of %s failed (try %d): %s; kept, retrying", t.task_id, r.tries, exc)
            return False
        return True

    def _answered(self, result: _Result) -> None:
        with self._changed:
            self.completed += 1
            item = self._inflight.get(result.task.task_id)
            if item is not None:
                item.pending -= 1
                if item.pending <= 0:
                    del self._inflight[result.task.task_id]
            self._changed.notify_all()
        t = result.task
        failpoints.hit("worker.after_report", task=t.task_id, attempt=t.attempt, worker=self.worker_id)

    # --- heartbeats ----------------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        interval = max(self.lease_s / 3, 0.2)
        while True:
            deadline = time.monotonic() + interval
            while time.monotonic() < deadline:
                if self.stop_event.is_set() and not self.busy:
                    return
                time.sleep(min(0.1, interval))
            with self._lock:
                items = list(self._inflight.values())
            for item in items:
                if not item.lost:
                    item.lost = not self._beat(item.task)

    def _beat(self, task: RemoteTask) -> bool:
        try:
            return self.api.heartbeat(task.task_id, task.fencing_token, self.lease_s)
        except Exception as exc:  # no answer: unknown, keep working (the fencing token decides later)
            log.warning("heartbeat for %s failed: %s", task.task_id, exc)
            return True


def _json_or_none(value: object) -> str | None:
    """The output as JSON text, or None when it is not JSON (the attempt then fails: InvalidOutput)."""
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None
