"""The scheduler's duties: fire due timers, expire lost leases, purge finished runs past their
tenant's retention (every `purge_interval`, in bounded batches), and scrub: verify a bounded batch of
runs every `scrub_interval`, marking the damaged ones (app/scrub.py). State lives in the database, so any
number of schedulers may run; a restart recovers everything from the timer, task and tombstone rows."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from datetime import timedelta

from ..app.purge import Purge
from ..app.service import Service
from ..core.events import Event
from ..core.state import RunState
from ..errors import LockstepError
from .webhooks_out import WebhookSender

__all__ = ["Scheduler"]

# Events after which this process's scheduler has work at once (a child run's end wakes it too).
_WAKE = frozenset({"TimerScheduled", "ChildRunRequested", "ChildRunCancelRequested", "EventWaitStarted"})

log = logging.getLogger("lockstep.scheduler")
# Purge transactions per tick (tombstones, and as many of deletes): a backlog is worked through between
# the timer and lease passes, a few batches at a time, so it never holds them up for long.
PURGE_BATCHES_PER_TICK = 4


class Scheduler:
    def __init__(
        self,
        service: Service,
        *,
        poll_interval: timedelta = timedelta(milliseconds=200),
        batch: int = 200,
        partition_ttl: timedelta = timedelta(seconds=10),
        owner: str | None = None,
        purge_interval: timedelta = timedelta(seconds=60),
        purge_batch: int = 1000,
        scrub_interval: timedelta = timedelta(seconds=60),
        scrub_batch: int = 200,
    ) -> None:
        self.service = service
        self.poll = poll_interval.total_seconds()
        self.batch = batch
        self.wake = threading.Event()
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.partition_ttl = partition_ttl
        self.partitions: list[int] | None = None
        self._partitions_at = 0.0
        self._maintained_at = 0.0
        self._swept_at = 0.0
        self.purge_interval = purge_interval.total_seconds()
        self.purge = Purge(service.kernel, runs_per_batch=min(100, purge_batch), rows_per_batch=purge_batch)
        self._purged_at = 0.0
        self._purge_more = False
        self._rewrapped_at = 0.0
        # 0 turns the scrub off; the first pass waits one interval, not to slow a start-up.
        self.scrub_interval = scrub_interval.total_seconds()
        self.scrub_batch = scrub_batch
        self._migrations_at = 0.0

    def _refresh_partitions(self) -> None:
        """Renew (or rebalance) this scheduler's share of partitions a few times per lease period."""
        if time.monotonic() - self._partitions_at >= self.partition_ttl.total_seconds() / 4:
            self.partitions = self.service.scheduler_partitions(self.owner, self.partition_ttl)
            self._partitions_at = time.monotonic()

    def tick(self) -> int:
        """One pass; returns how many timers fired and leases expired (loop again at once if > 0)."""
        self._refresh_partitions()
        if self.partitions == []:
            return 0
        done = self.service.fire_due_timers(self.batch, self.partitions)
        done += self.service.fire_due_schedules(self.batch, self.partitions)  # app/schedules/fire.py
        done += self.service.expire_leases(self.batch, self.partitions)
        done += self.service.run_children(self.batch)
        done += self.service.deliver_buffered_events(self.batch)  # a buffered event for a new wait
        if time.monotonic() - self._migrations_at >= 1.0:
            # Migrations that need approval (app/migrations/apply.py): expire the undecided past their
            # time, apply the granted ones a crash left unfinished (idempotent: one outcome row per run).
            self._migrations_at = time.monotonic()
            done += self.service.run_migrations(self.batch)
        if time.monotonic() - self._swept_at >= 1.0:
            self._swept_at = time.monotonic()
            done += self.service.dead_letter_unserved()
        if self._purge_more or time.monotonic() - self._purged_at >= self.purge_interval:
            self._purged_at = time.monotonic()
            done += self._purge()
        if time.monotonic() - self._rewrapped_at >= 1.0:
            # Key rotation's background re-wrap (app/keys/manage.py): resumable batches, none if idle.
            self._rewrapped_at = time.monotonic()
            done += self.service.rewrap_keys(self.batch)
        if time.monotonic() - self._maintained_at >= 3600:
            self._maintained_at = time.monotonic()
            self.service.maintain()
        return done

    def _purge(self) -> int:
        """One purge pass over this scheduler's partitions (the one holding partition 0, or the only one,
        also drops whole event partitions). A failure is logged and retried a purge interval later:
        it never holds up timers and leases."""
        try:
            parts = self.partitions
            report = self.purge.run_pass(
                parts, max_batches=PURGE_BATCHES_PER_TICK, drop_partitions=parts is None or 0 in parts
            )
        except Exception as exc:
            if not isinstance(exc, LockstepError):
                log.exception("purge pass failed unexpectedly")
            log.warning("purge pass failed: %s; retrying in %.0fs", exc, self.purge_interval)
            self._purge_more = False
            return 0
        self._purge_more = report.more
        return report.tombstoned + report.purged

    def _scrub_loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.scrub_interval):
            self._scrub()

    def _scrub(self) -> int:
        """One scrub pass (the scheduler holding partition 0, or the only one: each run is checked by
        one scheduler); returns how many runs it marked. A failure is logged and retried a scrub
        interval later."""
        parts = self.partitions
        if parts is not None and 0 not in parts:
            return 0
        try:
            report = self.service.scrub.run_pass(self.scrub_batch)
        except Exception as exc:
            if not isinstance(exc, LockstepError):
                log.exception("scrub pass failed unexpectedly")
            log.warning("scrub pass failed: %s; retrying in %.0fs", exc, self.scrub_interval)
            return 0
        return len(report.damaged)

    def _sleep_for(self) -> float:
        nxt = self.service.next_wakeup()
        if nxt is None:
            return self.poll
        until = (nxt - self.service.clock()).total_seconds()
        return max(0.005, min(self.poll, until))

    def _on_events(self, state: RunState, events: list[Event]) -> None:
        if any(e.type in _WAKE for e in events) or (state.parent is not None and state.terminal):
            self.wake.set()  # a new timer may be due before the planned wake-up, a child run's row is

    def run(self, stop: threading.Event) -> None:
        self.service.listeners.append(self._on_events)
        # Run webhooks (runtime/webhooks_out.py): on a thread of their own, so a slow receiver never
        # holds up timers and leases.
        sender = WebhookSender(self.service.webhooks)
        threading.Thread(target=sender.run, args=(stop,), name="lockstep-webhooks", daemon=True).start()
        if self.scrub_interval > 0:
            # The scrub (app/scrub.py) reads whole histories: on a thread of its own, so a pass over long
            # ones never delays a timer or a lease expiry.
            threading.Thread(
                target=self._scrub_loop, args=(stop,), name="lockstep-scrub", daemon=True
            ).start()
        try:
            self._run(stop)
        finally:
            if self._on_events in self.service.listeners:
                self.service.listeners.remove(self._on_events)

    def _run(self, stop: threading.Event) -> None:
        # PostgreSQL: a new timer may be due before our next planned wake-up (SQLite: returns at once)
        threading.Thread(
            target=self.service.store.listen,
            args=(["lockstep_timers"], self.wake.set, stop),
            name="lockstep-listen-timers",
            daemon=True,
        ).start()
        backoff = self.poll
        while not stop.is_set():
            try:
                if self.tick() >= self.batch:
                    continue
                pause = self._sleep_for()
                backoff = self.poll
            except Exception as exc:  # database unavailable or a bug: keep trying, never die
                if not isinstance(exc, LockstepError):
                    log.exception("scheduler pass failed unexpectedly")
                log.warning("scheduler pass failed: %s; retrying in %.1fs", exc, backoff)
                pause, backoff = backoff, min(backoff * 2, 5.0)
            self.wake.wait(pause)
            self.wake.clear()
