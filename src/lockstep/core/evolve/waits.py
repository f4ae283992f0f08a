"""How the events of a `wait_event` step change the run: the wait it holds (RunState.event_waits, by
the step's key) and, once the event came or the wait timed out, the step itself."""

from __future__ import annotations

from typing import Any, assert_never

from ..events import (
    CallbackIssued,
    Event,
    EventReceived,
    EventWaitCancelled,
    EventWaitEvent,
    EventWaitStarted,
    EventWaitTimedOut,
)
from ..paths import lane_of
from ..state import RunState, StepState
from .copying import replace, steps_with, with_lane

__all__ = ["evolve_event_wait"]


def evolve_event_wait(s: RunState, d: EventWaitEvent, e: Event) -> RunState:
    match d:
        case EventWaitStarted():
            wait = {
                "name": d.name,
                "key": d.key,
                "expires_at": d.expires_at,
                "generation": d.generation,
                "at": e.at,
                "callback": d.callback,
                "integration": d.integration,
                "issued": [],
                "token_hash": None,
            }
            prev = s.steps.get(d.step, StepState())
            steps = steps_with(
                s,
                d.step,
                status="waiting",
                attempts=prev.attempts + 1,
                output=None,
                error=None,
                started_at=e.at,
                finished_at=None,
            )
            run = {"steps": steps, "event_waits": {**s.event_waits, d.step: wait}}
            return with_lane(s, lane_of(d.step), run, current_step=d.step)
        case CallbackIssued():
            current = _waiting(s, d.step, d.type, e)
            issued = [*current["issued"], d.callback_id]
            # The newest callback is the wait's: minting again replaces the one before.
            changed = {**current, "issued": issued, "token_hash": d.token_hash, "callback_id": d.callback_id}
            return replace(s, event_waits={**s.event_waits, d.step: changed})
        case EventReceived():
            _waiting(s, d.step, d.type, e)
            waits = {k: v for k, v in s.event_waits.items() if k != d.step}
            steps = steps_with(s, d.step, status="succeeded", output=d.payload, error=None, finished_at=e.at)
            return with_lane(
                s, lane_of(d.step), {"steps": steps, "event_waits": waits}, last_output_step=d.step
            )
        case EventWaitTimedOut():
            _waiting(s, d.step, d.type, e)
            waits = {k: v for k, v in s.event_waits.items() if k != d.step}
            error = {
                "code": "EventWaitTimedOut",
                "message": f"no event {d.name} (key {d.key}) arrived before {d.expires_at}",
                "step": d.step,
            }
            steps = steps_with(s, d.step, status="failed", error=error, finished_at=e.at)
            return replace(s, steps=steps, event_waits=waits)
        case EventWaitCancelled():
            _waiting(s, d.step, d.type, e)
            waits = {k: v for k, v in s.event_waits.items() if k != d.step}
            steps = steps_with(s, d.step, status="cancelled", finished_at=e.at)
            return replace(s, steps=steps, event_waits=waits)
        case _:
            assert_never(d)


def _waiting(s: RunState, step: str, what: str, e: Event) -> dict[str, Any]:
    wait = s.event_waits.get(step)
    if wait is None:
        raise ValueError(f"{what} at seq {e.seq} for step {step}, which waits for no event")
    return wait
