"""The scheduler's duties: fire due timers and expire lost leases. State lives in the database, so any
number of schedulers may run; a restart recovers everything from the timer and task rows."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from ..errors import LockstepError
from ..service import Service

__all__ = ["Scheduler"]

log = logging.getLogger("lockstep.scheduler")


class Scheduler:
    def __init__(
        self, service: Service, *, poll_interval: timedelta = timedelta(milliseconds=200), batch: int = 200
    ) -> None:
        self.service = service
        self.poll = poll_interval.total_seconds()
        self.batch = batch
        self.wake = threading.Event()

    def tick(self) -> int:
        """One pass; returns how many timers fired and leases expired (loop again at once if > 0)."""
        done = self.service.fire_due_timers(self.batch)
        done += self.service.expire_leases(self.batch)
        return done

    def _sleep_for(self) -> float:
        nxt = self.service.next_wakeup()
        if nxt is None:
            return self.poll
        until = (nxt - self.service.clock()).total_seconds()
        return max(0.005, min(self.poll, until))

    def run(self, stop: threading.Event) -> None:
        backoff = self.poll
        while not stop.is_set():
            try:
                if self.tick() >= self.batch:
                    continue
                pause = self._sleep_for()
                backoff = self.poll
            except LockstepError as exc:  # database unavailable: keep trying, never die
                log.warning("scheduler pass failed: %s; retrying in %.1fs", exc, backoff)
                pause, backoff = backoff, min(backoff * 2, 5.0)
            self.wake.wait(pause)
            self.wake.clear()
