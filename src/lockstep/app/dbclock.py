"""The database's clock, read from this process: every lease, timer, deadline and expiry is decided
against it, so processes on hosts whose clocks disagree still agree on what time it is.

Reading the database's clock on every call would add a round trip to every command, so the offset
between the database and this process is measured at most once a second (and at once when this
process's wall clock steps, seen as the wall clock moving apart from the monotonic one) and added to
the local clock in between. docs/design.md ("Whose clock decides what") states the bound.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

__all__ = ["DatabaseClock"]

# How stale the measured offset may get; and how far the wall clock may drift from the monotonic
# clock between two measurements before it counts as a step (NTP slews far slower than this).
REFRESH_S = 1.0
STEP_S = 0.25


class DatabaseClock:
    """A clock that reads `database_ms` (the database's time in epoch milliseconds, or None where the
    database has no clock of its own) and interpolates between reads with the local clock."""

    def __init__(
        self,
        database_ms: Callable[[], int | None],
        *,
        local: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        refresh_s: float = REFRESH_S,
    ) -> None:
        self._database_ms = database_ms
        self._local = local
        self._monotonic = monotonic
        self._refresh_s = refresh_s
        self._lock = threading.Lock()
        self._offset_s = 0.0
        self._measured_mono = -float("inf")
        self._measured_wall = 0.0

    @property
    def offset(self) -> timedelta:
        """The database's clock minus this process's, as last measured."""
        return timedelta(seconds=self._offset_s)

    def __call__(self) -> datetime:
        wall, mono = self._local(), self._monotonic()
        since = mono - self._measured_mono
        stepped = abs((wall - self._measured_wall) - since) > STEP_S
        if since >= self._refresh_s or stepped:
            with self._lock:
                self._measure()
            wall = self._local()
        return datetime.fromtimestamp(wall + self._offset_s, UTC)

    def _measure(self) -> None:
        before = self._local()
        try:
            at_ms = self._database_ms()
        except Exception:  # unreachable: keep the last offset (the command's own transaction fails)
            self._measured_mono, self._measured_wall = self._monotonic(), self._local()
            return
        after = self._local()
        self._offset_s = 0.0 if at_ms is None else at_ms / 1000 - (before + after) / 2
        self._measured_mono, self._measured_wall = self._monotonic(), after
