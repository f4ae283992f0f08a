"""Copies of a run's state (and of its steps) with a few fields changed; the state given is never
changed. Every event goes through these, so they are kept cheap."""

from __future__ import annotations

from typing import Any, TypeVar

from ..state import RunState, StepState

__all__ = ["replace", "steps_with", "steps_with_comp", "with_lane"]

D = TypeVar("D")


def replace(obj: D, **changes: Any) -> D:
    """dataclasses.replace without its per-call introspection of the fields: every event evolves the
    state through a few of these, and the stock one was a third of a transition's CPU. Valid because
    these dataclasses have no __post_init__ and no init=False fields; unknown names are still refused."""
    fields = obj.__dataclass_fields__  # type: ignore[attr-defined]
    if not changes.keys() <= fields.keys():
        raise TypeError(f"{type(obj).__name__} has no field(s) {sorted(changes.keys() - fields.keys())}")
    new = object.__new__(type(obj))
    state = new.__dict__
    state.update(obj.__dict__)
    state.update(changes)
    return new


def steps_with(s: RunState, step_id: str, **changes: Any) -> dict[str, StepState]:
    """The run's steps with one step's fields changed (a step not seen yet starts from StepState())."""
    steps = dict(s.steps)
    steps[step_id] = replace(steps.get(step_id, StepState()), **changes)
    return steps


def steps_with_comp(s: RunState, step_id: str, **changes: Any) -> dict[str, StepState]:
    """The run's steps with the compensation record of one step changed."""
    cur = s.steps.get(step_id, StepState()).compensation or {
        "status": "pending",
        "attempts": 0,
        "error": None,
    }
    return steps_with(s, step_id, compensation={**cur, **changes})


def with_lane(s: RunState, lane: str, run: dict[str, Any] | None = None, **changes: Any) -> RunState:
    """The run with one lane's fields changed: RunState's own for the top-level lane (""), else the
    lane's record (see core/paths.py and core/lanes.py); `run`: fields of the run itself to change
    with them (one copy of the state, as before lanes, for a run without shapes)."""
    if not lane:
        return replace(s, **(run or {}), **changes)
    ln = s.lanes.get(lane)
    if ln is None:
        raise ValueError(f"an event of lane {lane}, which the run has not started")
    return replace(s, **(run or {}), lanes={**s.lanes, lane: replace(ln, **changes)})
