"""evolve(state, event) -> state and fold(events): the checks every event passes, then the dispatch to the
function of its group of events (one module each, beside this one)."""

from __future__ import annotations

from typing import assert_never

from ..events import (
    KEEPS_PROPOSAL,
    ApprovalRecord,
    AttemptRecord,
    ChildRecord,
    Event,
    EventData,
    EventWaitRecord,
    RepairRecord,
    RunRecord,
    RunStarted,
    ShapeRecord,
    TimerRecord,
)
from ..state import STEP_OPEN, TERMINAL, RunState
from .approvals import evolve_approval
from .attempts import evolve_attempt
from .children import evolve_child
from .copying import replace
from .repairs import evolve_repair
from .run import evolve_run, started
from .shapes import evolve_shape
from .timers import evolve_timer
from .waits import evolve_event_wait

__all__ = ["evolve", "fold"]


def evolve(state: RunState | None, event: Event) -> RunState:
    """Apply one event. RunStarted creates the state; every event advances seq by exactly one."""
    d = event.data
    if isinstance(d, RunStarted):
        if state is not None:
            raise ValueError("RunStarted on a run that already exists")
        return started(d, event)
    if state is None:
        raise ValueError(f"{event.type} before RunStarted")
    if event.seq != state.seq + 1:
        raise ValueError(f"event seq {event.seq} does not follow {state.seq}")
    s = _apply(state, d, event)
    step = getattr(d, "step", None)
    if step is not None:
        s = _entered(state, s, step, event)
    if s.proposal is not None and d.type not in KEEPS_PROPOSAL:
        s = replace(s, proposal=None)  # the run moved on: the proposal was made for a state that is gone
    s = replace(s, seq=event.seq, updated_at=event.at)
    return replace(s, status=_derive_status(s))


def fold(events: list[Event]) -> RunState | None:
    state: RunState | None = None
    for e in events:
        state = evolve(state, e)
    return state


def _apply(s: RunState, d: EventData, e: Event) -> RunState:
    """One case per group of records (mypy checks that every record is in one: assert_never). Attempts
    and timers come first: they are most of a history, and the match tries the cases in order."""
    match d:
        case AttemptRecord():
            return evolve_attempt(s, d, e)
        case TimerRecord():
            return evolve_timer(s, d, e)
        case RunRecord():
            return evolve_run(s, d, e)
        case ApprovalRecord():
            return evolve_approval(s, d, e)
        case RepairRecord():
            return evolve_repair(s, d, e)
        case ShapeRecord():
            return evolve_shape(s, d, e)
        case ChildRecord():
            return evolve_child(s, d, e)
        case EventWaitRecord():
            return evolve_event_wait(s, d, e)
        case _:
            assert_never(d)


def _entered(before: RunState, s: RunState, step: str, e: Event) -> RunState:
    """Mark a new visit of `step` when this event moved it into an open status from another one."""
    now = s.steps.get(step)
    if now is None or now.status not in STEP_OPEN:
        return s
    was = before.steps.get(step)
    if was is not None and was.status in STEP_OPEN:
        return s
    return replace(s, steps={**s.steps, step: replace(now, entered_seq=e.seq, entered_at=e.at)})


def _derive_status(s: RunState) -> str:
    if s.status in TERMINAL:
        return s.status
    lanes = s.lanes.values() if s.lanes else ()
    if s.attention is not None or any(ln.attention is not None for ln in lanes):
        return "needs_attention"
    if s.paused is not None:
        return "paused"
    if s.compensating is not None:
        return "compensating"
    if s.cancel is not None:
        return "cancelling"
    if s.active is not None or any(ln.active is not None for ln in lanes):
        return "running"
    if s.timers or s.approval is not None or s.children or any(ln.approval is not None for ln in lanes):
        return "waiting"
    return "running"
