"""How the events of parallel and for-each steps change the run's state: the shape step (a Group, and its
StepState while its lanes run), and each lane (a Lane: see core/paths.py and core/lanes.py)."""

from __future__ import annotations

from typing import assert_never

from ..events import (
    Event,
    ForEachStarted,
    JoinDecided,
    LaneFinished,
    LaneStarted,
    ParallelStarted,
    ShapeEvent,
    StepJoined,
)
from ..paths import item_lane, lane_of
from ..state import Group, Lane, RunState, StepState
from .copying import replace, steps_with, with_lane

__all__ = ["evolve_shape"]


def evolve_shape(s: RunState, d: ShapeEvent, e: Event) -> RunState:
    match d:
        case ParallelStarted():
            group = Group(
                kind="parallel",
                join=d.join,
                need=d.need,
                lanes=tuple(d.lanes),
                tolerant=tuple(d.tolerant),
                concurrency=len(d.lanes),
                started_seq=e.seq,
            )
            return _opened(s, d.step, group, e)
        case ForEachStarted():
            lanes = tuple(item_lane(d.step, i) for i in range(len(d.items)))
            group = Group(
                kind="for_each",
                join=d.join,
                need=d.need,
                lanes=lanes,
                tolerant=lanes if d.tolerant else (),
                concurrency=d.concurrency,
                items=d.items,
                started_seq=e.seq,
            )
            return _opened(s, d.step, group, e)
        case LaneStarted():
            lane = Lane(step=d.step, index=d.index, started_seq=e.seq, started_at=e.at)
            return replace(s, lanes={**s.lanes, d.lane: lane})
        case LaneFinished():
            return _lane_finished(s, d, e)
        case JoinDecided():
            return _decided(s, d)
        case StepJoined():
            steps = steps_with(s, d.step, status="succeeded", output=d.output, error=None, finished_at=e.at)
            return with_lane(s, lane_of(d.step), {"steps": steps}, last_output_step=d.step)
        case _:
            assert_never(d)


def _opened(s: RunState, key: str, group: Group, e: Event) -> RunState:
    prev = s.steps.get(key, StepState())
    steps = steps_with(
        s,
        key,
        status="running",
        attempts=prev.attempts + 1,
        output=None,
        error=None,
        started_at=e.at,
        finished_at=None,
    )
    run = {"steps": steps, "groups": {**s.groups, key: group}}
    return with_lane(s, lane_of(key), run, current_step=key)


def _lane_finished(s: RunState, d: LaneFinished, e: Event) -> RunState:
    ln = s.lanes.get(d.lane)
    if ln is None or not ln.open:
        raise ValueError(f"LaneFinished at seq {e.seq} for lane {d.lane}, which is not running")
    done = replace(
        ln,
        status=d.outcome,
        output=d.output,
        error=d.error,
        finished_at=e.at,
        active=None,
        approval=None,
        attention=None,
    )
    lanes = {**s.lanes, d.lane: done}
    out = replace(s, lanes=lanes)
    cur = ln.current_step
    if d.outcome == "cancelled" and cur is not None and s.steps.get(cur, StepState()).status == "running":
        out = replace(out, steps=steps_with(out, cur, status="cancelled", finished_at=e.at))  # a shape in it
    g = s.groups.get(d.step)
    if s.cancel is not None and g is not None and g.outcome is None:
        visit = [
            lanes[x] for x in g.lanes if x in lanes and (lanes[x].started_seq or 0) > (g.started_seq or 0)
        ]
        if not any(x.open for x in visit):  # the run's cancel ended its last lane: the step is over
            out = replace(out, steps=steps_with(out, d.step, status="cancelled", finished_at=e.at))
    return out


def _decided(s: RunState, d: JoinDecided) -> RunState:
    group = s.groups.get(d.step)
    if group is None or group.outcome is not None:
        raise ValueError(f"JoinDecided for step {d.step}, whose join is not open")
    lanes = dict(s.lanes)
    for lid in d.cancelling:
        if lid in lanes and lanes[lid].open:
            lanes[lid] = replace(lanes[lid], status="cancelling", attention=None)
    groups = {**s.groups, d.step: replace(group, outcome=d.outcome, error=d.error)}
    return replace(s, groups=groups, lanes=lanes)
