"""How the events of an operator's repairs change the run's state: a pause and the transitions it holds
back, a retried, skipped or resolved step, an edited input, a migration to another version, and the
open four-eyes proposal."""

from __future__ import annotations

from typing import Any, assert_never

from ..events import (
    Event,
    InputEdited,
    RepairConfirmed,
    RepairEvent,
    RepairProposed,
    RepairRejected,
    RunPaused,
    RunResumed,
    StepResolved,
    StepRetried,
    StepSkipped,
    TransitionDeferred,
    WorkflowMigrated,
)
from ..lanes import last_output_of
from ..paths import lane_of
from ..state import RunState, StepState
from .attempts import compensated
from .copying import replace, steps_with, steps_with_comp, with_lane

__all__ = ["evolve_repair"]


def evolve_repair(s: RunState, d: RepairEvent, e: Event) -> RunState:
    match d:
        case StepRetried():
            return with_lane(s, lane_of(d.step), {"paused": _superseded(s)}, attention=None)
        case RunPaused():
            return replace(s, paused={"reason": d.reason, "actor": d.actor, "at": e.at, "deferred": []})
        case TransitionDeferred():
            return _deferred(s, d, e)
        case RunResumed():
            return replace(s, paused=None)
        case StepSkipped():
            return _skipped(s, d, e)
        case InputEdited():
            return replace(s, input=d.new)
        case StepResolved():
            return _resolved(s, d, e)
        case WorkflowMigrated():
            return _migrated(s, d)
        case RepairProposed():
            return _proposed(s, d, e)
        case RepairConfirmed() | RepairRejected():
            return replace(s, proposal=None)
        case _:
            assert_never(d)


def _deferred(s: RunState, d: TransitionDeferred, e: Event) -> RunState:
    if s.paused is None:
        raise ValueError(f"TransitionDeferred at seq {e.seq} on a run that is not paused")
    deferred = [*s.paused["deferred"], {"action": d.action, "args": d.args}]
    return replace(s, paused={**s.paused, "deferred": deferred})


def _skipped(s: RunState, d: StepSkipped, e: Event) -> RunState:
    lane = lane_of(d.step)
    run = {
        "paused": _superseded(s),
        "steps": steps_with(s, d.step, status="skipped", output=d.output, error=None, finished_at=e.at),
    }
    last = d.step if d.output is not None else last_output_of(s, lane)
    return with_lane(s, lane, run, attention=None, last_output_step=last)


def _resolved(s: RunState, d: StepResolved, e: Event) -> RunState:
    lane = lane_of(d.step)
    if d.compensation:
        run = {
            "compensating": compensated(s.compensating, d.step),
            "paused": _superseded(s),
            "steps": steps_with_comp(s, d.step, status="compensated", error=None),
        }
        return with_lane(s, lane, run, attention=None)
    ok = d.outcome == "succeeded"
    run = {
        "completed": (*s.completed, d.step) if d.compensable else s.completed,
        "paused": _superseded(s),
        "steps": steps_with(
            s,
            d.step,
            status="succeeded" if ok else "failed",
            output=d.output if ok else None,
            finished_at=e.at,
        ),
    }
    last = d.step if ok else last_output_of(s, lane)
    return with_lane(s, lane, run, attention=None, last_output_step=last)


def _proposed(s: RunState, d: RepairProposed, e: Event) -> RunState:
    proposal = {
        "proposal_id": d.proposal_id,
        "kind": d.kind,
        "command": d.command,
        "reason": d.reason,
        "actor": d.actor,
        "at": e.at,
        "seq": e.seq,
    }
    return replace(s, proposal=proposal, proposals_made=s.proposals_made + 1)


def _superseded(s: RunState) -> dict[str, Any] | None:
    """A repair while paused replaces the transitions held back so far (they were computed for the state
    the repair changes); the repair's own continuation is held back in their place."""
    return {**s.paused, "deferred": []} if s.paused is not None else None


def _migrated(s: RunState, d: WorkflowMigrated) -> RunState:
    """Re-key the run onto the target version's steps (mapping: old id -> new id)."""
    mapping = d.mapping
    inverse = {new: old for old, new in mapping.items()}
    steps = {sid: s.steps.get(inverse.get(sid, ""), StepState()) for sid in d.steps}
    # Steps inside a shape step (keys with lanes) are kept while that step is carried as it was.
    for key, st in s.steps.items():
        top = key.split(".", 1)[0].split("[", 1)[0]
        if key != top and mapping.get(top, top) in steps:
            steps[key] = st

    def m(x: str | None) -> str | None:
        return mapping.get(x, x) if x is not None else None

    approval = s.approval
    if approval is not None:
        approval = {**approval, "step": m(approval["step"])}
    return replace(
        s,
        definition=d.definition,
        steps=steps,
        current_step=m(s.current_step),
        completed=tuple(mapping.get(x, x) for x in s.completed),
        last_output_step=m(s.last_output_step),
        approval=approval,
        attention={**s.attention, "step": m(s.attention["step"])} if s.attention is not None else None,
        paused=_superseded(s),
    )
