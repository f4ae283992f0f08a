"""Reading a run whose steps may run side by side: its lanes (the top-level one is RunState itself, the
others are RunState.lanes, see core/paths.py), every attempt in flight, every pending approval and
everything that waits for an operator. Pure; evolve/copying.py has the writer (`with_lane`).

A run without parallel or for-each steps has only the top-level lane, so each answer here is what its
single fields say (`active`, `approval`, `attention`)."""

from __future__ import annotations

from collections.abc import Iterator

from .canonical import JSONObject
from .paths import ROOT, in_step, lane_of, within
from .state import Attempt, Lane, RunState

__all__ = [
    "active_of",
    "approval_at",
    "approval_by_request",
    "approval_of",
    "approvals",
    "attempt_of_task",
    "attempts",
    "attention_of",
    "attentions",
    "children_in",
    "current_of",
    "in_flight",
    "lane",
    "last_output_of",
    "open_lanes",
    "open_lanes_of",
    "step_of_task",
]


def lane(s: RunState, lane_id: str) -> Lane | None:
    return s.lanes.get(lane_id) if lane_id else None


def active_of(s: RunState, lane_id: str) -> Attempt | None:
    if lane_id == ROOT:
        return s.active
    ln = s.lanes.get(lane_id)
    return ln.active if ln is not None else None


def approval_of(s: RunState, lane_id: str) -> JSONObject | None:
    if lane_id == ROOT:
        return s.approval
    ln = s.lanes.get(lane_id)
    return ln.approval if ln is not None else None


def attention_of(s: RunState, lane_id: str) -> JSONObject | None:
    if lane_id == ROOT:
        return s.attention
    ln = s.lanes.get(lane_id)
    return ln.attention if ln is not None else None


def current_of(s: RunState, lane_id: str) -> str | None:
    if lane_id == ROOT:
        return s.current_step
    ln = s.lanes.get(lane_id)
    return ln.current_step if ln is not None else None


def last_output_of(s: RunState, lane_id: str) -> str | None:
    if lane_id == ROOT:
        return s.last_output_step
    ln = s.lanes.get(lane_id)
    return ln.last_output_step if ln is not None else None


def attempts(s: RunState, inside: str = ROOT) -> Iterator[Attempt]:
    """Every attempt not yet over (queued or running), of the lane `inside` and the lanes within it."""
    if s.active is not None and inside == ROOT:
        yield s.active
    for lid in sorted(s.lanes):
        a = s.lanes[lid].active
        if a is not None and within(lid, inside):
            yield a


def in_flight(s: RunState, inside: str = ROOT) -> list[Attempt]:
    """The attempts a worker has started (their results must be waited for) in `inside` and within it."""
    return [a for a in attempts(s, inside) if a.fencing is not None]


def step_of_task(task_id: str, run_id: str | None = None) -> str | None:
    """The step key a task id names (core/tx.task_id: `run/step/a1-7`), if it has that form."""
    parts = task_id.split("/")
    if len(parts) != 3 or (run_id is not None and parts[0] != run_id):
        return None
    return parts[1]


def attempt_of_task(s: RunState, task_id: str) -> Attempt | None:
    """The run's attempt for `task_id`, if it is one not yet over."""
    key = step_of_task(task_id)
    if key is None:
        return None
    a = active_of(s, lane_of(key))
    return a if a is not None and a.task_id == task_id else None


def approvals(s: RunState) -> list[JSONObject]:
    """Every pending approval request (the top-level one first)."""
    out = [s.approval] if s.approval is not None else []
    out += [s.lanes[k].approval for k in sorted(s.lanes) if s.lanes[k].approval is not None]  # type: ignore[misc]
    return out


def approval_at(s: RunState, step: str) -> JSONObject | None:
    """The request pending at step key `step`, if that step waits for one."""
    a = approval_of(s, lane_of(step))
    return a if a is not None and a["step"] == step else None


def approval_by_request(s: RunState, request_id: str) -> JSONObject | None:
    for a in approvals(s):
        if a["request_id"] == request_id:
            return a
    return None


def attentions(s: RunState) -> list[JSONObject]:
    """Everything that waits for an operator (the top-level lane first)."""
    out = [s.attention] if s.attention is not None else []
    out += [s.lanes[k].attention for k in sorted(s.lanes) if s.lanes[k].attention is not None]  # type: ignore[misc]
    return out


def open_lanes(s: RunState, inside: str = ROOT) -> list[str]:
    """Lane ids not yet finished, within `inside` (deepest first: a lane ends after the lanes in it)."""
    found = [k for k, ln in s.lanes.items() if ln.open and within(k, inside) and k != inside]
    return sorted(found, key=lambda k: (-k.count(".") - k.count("["), k))


def open_lanes_of(s: RunState, key: str) -> list[str]:
    """Lane ids not yet finished of shape step `key` and inside them (deepest first)."""
    found = [k for k, ln in s.lanes.items() if ln.open and in_step(k, key)]
    return sorted(found, key=lambda k: (-k.count(".") - k.count("["), k))


def children_in(s: RunState, inside: str = ROOT) -> list[tuple[str, JSONObject]]:
    """The child runs waited for by steps of lane `inside` and the lanes within it: (step key, child)."""
    return [(k, c) for k, c in sorted(s.children.items()) if within(lane_of(k), inside)]
