"""How the events of an activity attempt (an action's or a compensation's) change the run's state: the
attempt in flight (`RunState.active`), and its step's status or compensation record."""

from __future__ import annotations

from typing import assert_never

from ..events import (
    ActivityCancelled,
    ActivityDeadLettered,
    ActivityFailed,
    ActivityScheduled,
    ActivityStarted,
    ActivitySucceeded,
    ActivityTimedOut,
    AttemptEvent,
    CompensationScheduled,
    Event,
    ResultIgnored,
)
from ..lanes import active_of
from ..paths import lane_of
from ..state import Attempt, RunState, StepState
from .copying import replace, steps_with, steps_with_comp, with_lane

__all__ = ["evolve_attempt"]


def evolve_attempt(s: RunState, d: AttemptEvent, e: Event) -> RunState:
    """The most frequent kinds come first, as the match tries them in order."""
    match d:
        case ActivityScheduled():
            return _scheduled(s, d, e)
        case ActivityStarted():
            return _leased(s, d, e)
        case ActivitySucceeded():
            return _succeeded(s, d, e)
        case ActivityFailed() | ActivityTimedOut():
            return _attempt_failed(s, d, e)
        case ResultIgnored():
            return _ignored(s, d)
        case CompensationScheduled():
            return _compensation_scheduled(s, d, e)
        case ActivityCancelled():
            return _withdrawn(s, d, e)
        case ActivityDeadLettered():
            gone = steps_with(s, d.step, status="dead_letter", finished_at=e.at)
            return with_lane(s, lane_of(d.step), {"steps": gone}, active=None)
        case _:
            assert_never(d)


def _attempt(d: ActivityScheduled | CompensationScheduled, kind: str, at: str) -> Attempt:
    """The attempt in flight that an action's or a compensation's scheduling event opens."""
    return Attempt(
        step=d.step,
        attempt=d.attempt,
        task_id=d.task_id,
        activity=d.activity,
        kind=kind,
        delivery=d.delivery,
        idempotency_key=d.idempotency_key,
        scheduled_at=at,
        timeout_ms=d.timeout_ms,
    )


def _scheduled(s: RunState, d: ActivityScheduled, e: Event) -> RunState:
    active = _attempt(d, "action", e.at)
    started = s.steps.get(d.step, StepState()).started_at or e.at
    steps = steps_with(
        s,
        d.step,
        status="scheduled",
        attempts=d.attempt,
        started_at=started,
        idempotency_key=d.idempotency_key,
    )
    return with_lane(s, lane_of(d.step), {"steps": steps}, active=active, current_step=d.step)


def _compensation_scheduled(s: RunState, d: CompensationScheduled, e: Event) -> RunState:
    active = _attempt(d, "compensation", e.at)
    steps = steps_with_comp(s, d.step, status="scheduled", attempts=d.attempt)
    return with_lane(s, lane_of(d.step), {"steps": steps}, active=active, current_step=d.step)


def _leased(s: RunState, d: ActivityStarted, e: Event) -> RunState:
    lane = lane_of(d.step)
    was = active_of(s, lane)
    if was is None:
        raise ValueError(f"ActivityStarted at seq {e.seq} without a scheduled attempt")
    active = replace(was, fencing=d.fencing, worker=d.worker, started_at=e.at, deadline=d.deadline)
    steps = (steps_with_comp if d.compensation else steps_with)(s, d.step, status="running")
    return with_lane(s, lane, {"steps": steps}, active=active)


def _succeeded(s: RunState, d: ActivitySucceeded, e: Event) -> RunState:
    lane = lane_of(d.step)
    if d.compensation:
        run = {
            "compensating": compensated(s.compensating, d.step),
            "steps": steps_with_comp(s, d.step, status="compensated", error=None),
        }
        return with_lane(s, lane, run, active=None)
    run = {
        "completed": (*s.completed, d.step) if d.compensable else s.completed,
        "steps": steps_with(s, d.step, status="succeeded", output=d.output, error=None, finished_at=e.at),
    }
    return with_lane(s, lane, run, last_output_step=d.step, active=None)


def compensated(remaining: tuple[str, ...] | None, step: str) -> tuple[str, ...]:
    """The compensations still to run once `step`'s has: the first time it appears in the list (one
    after the other, that is the head; branches compensate side by side, so any of them may finish)."""
    rest = list(remaining or ())
    if step in rest:
        rest.remove(step)
    return tuple(rest)


def _attempt_failed(s: RunState, d: ActivityFailed | ActivityTimedOut, e: Event) -> RunState:
    status = "unknown" if d.outcome_unknown else ("retrying" if d.will_retry else "failed")
    if d.compensation:
        steps = steps_with_comp(s, d.step, status=status, error=d.error)
    else:
        fin = None if d.will_retry else e.at
        steps = steps_with(s, d.step, status=status, error=d.error, finished_at=fin)
    return with_lane(s, lane_of(d.step), {"steps": steps}, active=None)


def _withdrawn(s: RunState, d: ActivityCancelled, e: Event) -> RunState:
    if d.rescheduled:  # withdrawn by a pause; scheduled again on resume
        steps = (steps_with_comp if d.compensation else steps_with)(s, d.step, status="paused")
    else:
        steps = steps_with(s, d.step, status="cancelled", finished_at=e.at)
    return with_lane(s, lane_of(d.step), {"steps": steps}, active=None)


def _ignored(s: RunState, d: ResultIgnored) -> RunState:
    per_task = {**s.ignored_by_task, d.task_id: s.ignored_by_task.get(d.task_id, 0) + 1}
    return replace(s, ignored_results=s.ignored_results + 1, ignored_by_task=per_task)
