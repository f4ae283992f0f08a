"""How the events of a run as a whole and of its instant steps change its state."""

from __future__ import annotations

from typing import assert_never

from ..events import (
    CancelRequested,
    ChoiceEvaluated,
    CompensationStarted,
    Event,
    NeedsAttention,
    RunCancelled,
    RunCompleted,
    RunEvent,
    RunFailed,
    RunStarted,
    StepFailed,
)
from ..paths import lane_of
from ..state import RunState, StepState
from .copying import replace, steps_with, with_lane

__all__ = ["evolve_run", "started"]


def started(d: RunStarted, e: Event) -> RunState:
    """The state a run begins with (the one event that needs no state before it)."""
    return RunState(
        run_id=d.run_id,
        tenant=d.tenant,
        definition=d.definition,
        status="running",
        seq=e.seq,
        input=d.input,
        started_at=e.at,
        updated_at=e.at,
        start_key=d.start_key,
        actor=d.actor,
        steps={sid: StepState() for sid in d.steps},
        trace=d.trace if isinstance(d.trace, str) else None,
        trace_parent=d.trace_parent if isinstance(d.trace_parent, str) else None,
        parent=d.parent if isinstance(d.parent, dict) else None,
    )


def evolve_run(s: RunState, d: RunEvent, e: Event) -> RunState:
    match d:
        case ChoiceEvaluated():
            return _chosen(s, d, e)
        case RunCompleted():
            return replace(
                s, status="completed", output=d.output, current_step=None, finished_at=e.at, timers={}
            )
        case CompensationStarted():
            return replace(
                s,
                compensating=tuple(d.steps),
                compensation_cause=d.cause,
                attention=None,
                error=d.error or s.error,
                compensation_seq=e.seq,
                compensation_at=e.at,
            )
        case StepFailed():
            return _step_failed(s, d, e)
        case RunFailed():
            return replace(
                s,
                status="failed",
                error=d.error,
                current_step=None,
                finished_at=e.at,
                compensating=None,
                timers={},
            )
        case RunCancelled():
            return replace(
                s, status="cancelled", current_step=None, finished_at=e.at, compensating=None, timers={}
            )
        case NeedsAttention():
            attention = {"step": d.step, "code": d.code, "reason": d.reason, "since": e.at}
            return with_lane(s, lane_of(d.step), attention=attention)
        case CancelRequested():
            # Cancelling a paused run resumes it for the cancellation (compensations must be able to run);
            # what waited for an operator, in any lane, is cancelled with the run.
            lanes = {k: replace(v, attention=None) if v.attention else v for k, v in s.lanes.items()}
            cancel = {"reason": d.reason, "actor": d.actor, "at": e.at}
            return replace(s, cancel=cancel, attention=None, paused=None, lanes=lanes)
        case RunStarted():
            raise ValueError("RunStarted on a run that already exists")
        case _:
            assert_never(d)


def _chosen(s: RunState, d: ChoiceEvaluated, e: Event) -> RunState:
    steps = steps_with(
        s, d.step, status="succeeded", output={"next": d.next}, attempts=1, started_at=e.at, finished_at=e.at
    )
    return with_lane(s, lane_of(d.step), {"steps": steps}, current_step=d.step)


def _step_failed(s: RunState, d: StepFailed, e: Event) -> RunState:
    before = s.steps.get(d.step, StepState())
    steps = steps_with(
        s,
        d.step,
        status="failed",
        error=d.error,
        attempts=max(1, before.attempts),
        started_at=before.started_at or e.at,
        finished_at=e.at,
    )
    lane = lane_of(d.step)
    if not lane:
        return replace(s, current_step=d.step, error=d.error, steps=steps)
    return with_lane(s, lane, {"steps": steps}, current_step=d.step, error=d.error)
