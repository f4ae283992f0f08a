"""How the events of a durable timer change the run's state: its armed timers, and for a wait step the
step itself (a wait is the timer); a cancelled retry ends its step cancelled."""

from __future__ import annotations

from typing import assert_never

from ..events import Event, TimerCancelled, TimerEvent, TimerFired, TimerScheduled
from ..paths import lane_of
from ..state import RunState, Timer
from .copying import replace, steps_with, with_lane

__all__ = ["evolve_timer"]


def evolve_timer(s: RunState, d: TimerEvent, e: Event) -> RunState:
    match d:
        case TimerScheduled():
            return _timer_set(s, d, e)
        case TimerFired() | TimerCancelled():
            return _timer_gone(s, d, e)
        case _:
            assert_never(d)


def _timer_set(s: RunState, d: TimerScheduled, e: Event) -> RunState:
    timers = {**s.timers, d.key: Timer(d.key, d.generation, d.kind, d.step, d.fire_at, e.at)}
    if d.kind == "wait":
        steps = steps_with(s, d.step, status="waiting", attempts=1, started_at=e.at)
        return with_lane(s, lane_of(d.step), {"timers": timers, "steps": steps}, current_step=d.step)
    return replace(s, timers=timers)


def _timer_gone(s: RunState, d: TimerFired | TimerCancelled, e: Event) -> RunState:
    timers = {k: v for k, v in s.timers.items() if k != d.key}
    fired = isinstance(d, TimerFired)
    if d.kind == "wait":
        status = "succeeded" if fired else "cancelled"
        return replace(s, timers=timers, steps=steps_with(s, d.step, status=status, finished_at=e.at))
    if not fired and d.kind == "retry" and not d.key.endswith(":compensation"):
        # a retry that will never happen: the step ends cancelled (its last error stays visible)
        return replace(s, timers=timers, steps=steps_with(s, d.step, status="cancelled", finished_at=e.at))
    return replace(s, timers=timers)
