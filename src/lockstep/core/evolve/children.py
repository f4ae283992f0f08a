"""How the events of a `run` step change its parent's state: the child it waits for (RunState.children,
by the step's key) and, once the child ended, the step itself."""

from __future__ import annotations

from typing import assert_never

from ..events import ChildEvent, ChildRunCancelRequested, ChildRunEnded, ChildRunRequested, Event
from ..paths import lane_of
from ..state import RunState, StepState
from .copying import replace, steps_with, with_lane

__all__ = ["evolve_child"]

_ENDED = {"completed": "succeeded", "failed": "failed", "cancelled": "cancelled"}


def evolve_child(s: RunState, d: ChildEvent, e: Event) -> RunState:
    match d:
        case ChildRunRequested():
            child = {
                "child_run_id": d.child_run_id,
                "definition": d.definition,
                "version": d.version,
                "start_key": d.start_key,
                "at": e.at,
                "cancel": None,
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
            run = {"steps": steps, "children": {**s.children, d.step: child}}
            return with_lane(s, lane_of(d.step), run, current_step=d.step)
        case ChildRunCancelRequested():
            awaited = s.children.get(d.step)
            if awaited is None or awaited["child_run_id"] != d.child_run_id:
                raise ValueError(f"{d.type} at seq {e.seq} for child run {d.child_run_id}, not awaited")
            return replace(s, children={**s.children, d.step: {**awaited, "cancel": d.reason}})
        case ChildRunEnded():
            children = {k: v for k, v in s.children.items() if k != d.step}
            status = _ENDED.get(d.status, "failed")
            output = d.output if status == "succeeded" else None
            steps = steps_with(s, d.step, status=status, output=output, error=d.error, finished_at=e.at)
            run = {"steps": steps, "children": children}
            lane = lane_of(d.step)
            if status == "succeeded":
                return with_lane(s, lane, run, last_output_step=d.step)
            return replace(s, **run)
        case _:
            assert_never(d)
