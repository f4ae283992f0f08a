"""The scheduler's duties: fire due timers and expire lost leases. State lives in the database, so any
number of schedulers may run; a restart recovers everything from the timer and task rows."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from datetime import timedelta
from typing import Any

from ..app.service import Service
from ..errors import LockstepError

__all__ = ["Scheduler"]

log = logging.getLogger("lockstep.scheduler")


class Scheduler:
    def __init__(
        self,
        service: Service,
        *,
        poll_interval: timedelta = timedelta(milliseconds=200),
        batch: int = 200,
        partition_ttl: timedelta = timedelta(seconds=10),
        owner: str | None = None,
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
        self._rewrapped_at = 0.0

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
        done += self.service.expire_leases(self.batch, self.partitions)
        if time.monotonic() - self._swept_at >= 1.0:
            self._swept_at = time.monotonic()
            done += self.service.dead_letter_unserved()
        if time.monotonic() - self._rewrapped_at >= 1.0:
            # Key rotation's background re-wrap (app/keys/manage.py): resumable batches, none if idle.
            self._rewrapped_at = time.monotonic()
            done += self.service.rewrap_keys(self.batch)
        if time.monotonic() - self._maintained_at >= 3600:
            self._maintained_at = time.monotonic()
            self.service.maintain()
        return done

    def _sleep_for(self) -> float:
        nxt = self.service.next_wakeup()
        if nxt is None:
            return self.poll
        until = (nxt - self.service.clock()).total_seconds()
        return max(0.005, min(self.poll, until))

    def _on_events(self, _state: Any, events: list[Any]) -> None:
        if any(e.type == "TimerScheduled" for e in events):
            self.wake.set()  # a new timer may be due before the planned wake-up

    def run(self, stop: threading.Event) -> None:
        self.service.listeners.append(self._on_events)
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
