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
from ..state import Attempt, RunState, StepState
from .copying import replace, steps_with, steps_with_comp

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
            return replace(
                s, active=None, steps=steps_with(s, d.step, status="dead_letter", finished_at=e.at)
            )
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
    return replace(
        s,
        active=active,
        current_step=d.step,
        steps=steps_with(
            s,
            d.step,
            status="scheduled",
            attempts=d.attempt,
            started_at=started,
            idempotency_key=d.idempotency_key,
        ),
    )


def _compensation_scheduled(s: RunState, d: CompensationScheduled, e: Event) -> RunState:
    active = _attempt(d, "compensation", e.at)
    return replace(
        s,
        active=active,
        current_step=d.step,
        steps=steps_with_comp(s, d.step, status="scheduled", attempts=d.attempt),
    )


def _leased(s: RunState, d: ActivityStarted, e: Event) -> RunState:
    if s.active is None:
        raise ValueError(f"ActivityStarted at seq {e.seq} without a scheduled attempt")
    active = replace(s.active, fencing=d.fencing, worker=d.worker, started_at=e.at, deadline=d.deadline)
    steps = (steps_with_comp if d.compensation else steps_with)(s, d.step, status="running")
    return replace(s, active=active, steps=steps)


def _succeeded(s: RunState, d: ActivitySucceeded, e: Event) -> RunState:
    if d.compensation:
        rest = s.compensating[1:] if s.compensating else ()
        return replace(
            s,
            active=None,
            compensating=rest,
            steps=steps_with_comp(s, d.step, status="compensated", error=None),
        )
    return replace(
        s,
        last_output_step=d.step,
        active=None,
        completed=(*s.completed, d.step) if d.compensable else s.completed,
        steps=steps_with(s, d.step, status="succeeded", output=d.output, error=None, finished_at=e.at),
    )


def _attempt_failed(s: RunState, d: ActivityFailed | ActivityTimedOut, e: Event) -> RunState:
    status = "unknown" if d.outcome_unknown else ("retrying" if d.will_retry else "failed")
    if d.compensation:
        return replace(s, active=None, steps=steps_with_comp(s, d.step, status=status, error=d.error))
    fin = None if d.will_retry else e.at
    return replace(s, active=None, steps=steps_with(s, d.step, status=status, error=d.error, finished_at=fin))


def _withdrawn(s: RunState, d: ActivityCancelled, e: Event) -> RunState:
    if d.rescheduled:  # withdrawn by a pause; scheduled again on resume
        paused = (steps_with_comp if d.compensation else steps_with)(s, d.step, status="paused")
        return replace(s, active=None, steps=paused)
    return replace(s, active=None, steps=steps_with(s, d.step, status="cancelled", finished_at=e.at))


def _ignored(s: RunState, d: ResultIgnored) -> RunState:
    per_task = {**s.ignored_by_task, d.task_id: s.ignored_by_task.get(d.task_id, 0) + 1}
    return replace(s, ignored_results=s.ignored_results + 1, ignored_by_task=per_task)
