"""A clock tests move by hand: pass `clock=FakeClock(...)` to Service or Engine.open."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

__all__ = ["FakeClock"]


class FakeClock:
    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta | float) -> datetime:
        with self._lock:
            self._now += delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
            return self._now
