"""Parallel and for-each steps, as decisions: opening a shape step's lanes, what its join says now
(start more items, decide the outcome, finish the step), and winding down lanes that are cancelled.

flow.py carries the verdicts out (entering steps, advancing, failing), so this module never calls back
into it. The join is decided exactly once per visit of a shape step (JoinDecided, or the step ending at
once when every lane is over); the lanes still open then are cancelled: attempts nobody started are
withdrawn, timers made stale, approval requests closed, and a lane with an attempt in flight waits for
its result (as a cancelled run does) before it finishes as cancelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .canonical import JSONObject, JSONValue
from .definition import ForEachStep, ParallelStep
from .events import (
    ApprovalCancelled,
    ChildRunCancelRequested,
    ForEachStarted,
    JoinDecided,
    LaneStarted,
    ParallelStarted,
)
from .lanes import attempts, children_in, open_lanes, open_lanes_of
from .paths import ROOT, branch_lane, item_lane, lane_name, lane_of, lane_step, within
from .state import Group, Lane, RunState
from .tx import Tx, cancel_timers, withdraw
from .waitstart import cancel_waits

__all__ = [
    "Verdict",
    "cancel_work",
    "describe_lane",
    "group_output",
    "open_for_each",
    "open_parallel",
    "settled_lanes",
    "verdict",
    "winding_down",
]


def open_parallel(tx: Tx, key: str, step: ParallelStep) -> None:
    """Record the parallel step's lanes (flow.py starts each one)."""
    lanes = [branch_lane(key, b.id) for b in step.branches]
    tolerant = [branch_lane(key, b.id) for b in step.branches if b.on_failure == "continue"]
    tx.emit(ParallelStarted(step=key, lanes=lanes, join=step.join, need=step.need, tolerant=tolerant))


def open_for_each(tx: Tx, key: str, step: ForEachStep, items: list[JSONValue]) -> None:
    need = len(items) if step.need is None else step.need
    tx.emit(
        ForEachStarted(
            step=key,
            items=items,
            concurrency=step.concurrency,
            join=step.join,
            need=need,
            tolerant=step.on_failure == "continue",
        )
    )


def start_lane(tx: Tx, key: str, lane: str, index: int) -> None:
    tx.emit(LaneStarted(step=key, lane=lane, index=index))


def this_visit(s: RunState, key: str) -> list[tuple[str, Lane]]:
    """The lanes of the current visit of shape step `key` that have started, in order."""
    g = s.groups[key]
    out = []
    for lid in g.lanes:
        ln = s.lanes.get(lid)
        if ln is not None and ln.started_seq is not None and ln.started_seq > (g.started_seq or 0):
            out.append((lid, ln))
    return out


@dataclass
class Verdict:
    """What a shape step's join says now: items to start (for-each), the outcome to decide (once per
    visit, with the reason and, for a failure, the error), and whether the step is over (decided, and
    every lane it started finished)."""

    start: list[tuple[str, int]] = field(default_factory=list)
    decide: tuple[str, str, JSONObject | None] | None = None
    finish: bool = False


def _failure(key: str, lid: str, ln: Lane, g: Group) -> tuple[str, str, JSONObject]:
    err = ln.error or {"code": "Failed", "message": "failed"}
    what = describe_lane(lid, g)
    message = f"{what} of step {key} failed ({err.get('code')}: {err.get('message')})"
    return "failed", f"{what} failed", {"code": err.get("code"), "message": message, "step": key, "lane": lid}


def verdict(s: RunState, key: str) -> Verdict:
    g = s.groups[key]
    started = this_visit(s, key)
    open_ = [lid for lid, ln in started if ln.open]
    done = {lid: ln for lid, ln in started if not ln.open}
    waiting = len(g.lanes) - len(started)  # for-each items not started yet
    out = Verdict()
    if g.outcome is None:
        succeeded = [lid for lid, ln in done.items() if ln.status == "succeeded"]
        bad = [lid for lid, ln in done.items() if ln.status == "failed" and lid not in g.tolerant]
        can = len(succeeded) + len(open_) + waiting
        if bad:
            out.decide = _failure(key, bad[0], done[bad[0]], g)
        elif g.join != "all" and len(succeeded) >= g.need:
            out.decide = ("succeeded", f"{len(succeeded)} of {len(g.lanes)} succeeded ({_rule(g)})", None)
        elif g.join != "all" and can < g.need:
            lanes = "branches" if g.kind == "parallel" else "items"
            reason = f"only {can} of {len(g.lanes)} {lanes} can still succeed; {_rule(g)} needs {g.need}"
            out.decide = ("failed", reason, {"code": "JoinFailed", "message": reason, "step": key})
        elif not open_ and not waiting:
            lanes = "branches" if g.kind == "parallel" else "items"
            reason = f"all {len(g.lanes)} {lanes} finished, {len(succeeded)} succeeded ({_rule(g)})"
            out.decide = ("succeeded", reason, None)
        elif g.kind == "for_each" and waiting:
            room = g.concurrency - len(open_)
            first = len(started)
            out.start = [(item_lane(key, i), i) for i in range(first, min(first + room, len(g.lanes)))]
        return out
    out.finish = not open_
    return out


def _rule(g: Group) -> str:
    return {"all": "join all", "any": "join any"}.get(g.join, f"join n_of {g.need}")


def describe_lane(lane: str, g: Group | None = None) -> str:
    """E.g. "branch legal" or "item 3"."""
    kind = g.kind if g is not None else ("for_each" if lane.endswith("]") else "parallel")
    return f"{'item' if kind == 'for_each' else 'branch'} {lane_name(lane)}"


def group_output(s: RunState, key: str) -> JSONValue:
    """A parallel step's {branch id: output}, a for-each's [output per item]; null where a lane did not
    succeed."""
    g = s.groups[key]
    visit = dict(this_visit(s, key))
    outputs = [
        visit[lid].output if lid in visit and visit[lid].status == "succeeded" else None for lid in g.lanes
    ]
    if g.kind == "for_each":
        return outputs
    return {lane_name(lid): out for lid, out in zip(g.lanes, outputs, strict=True)}


def winding_down(s: RunState, lane: str) -> bool:
    """Whether work in `lane` is being cancelled: the run's, or a lane around it (a join decided)."""
    if s.cancel is not None:
        return True
    here = lane
    while here:
        ln = s.lanes.get(here)
        if ln is not None and ln.status == "cancelling":
            return True
        here = lane_of(lane_step(here))
    return False


def cancel_work(tx: Tx, inside: str, reason: str) -> None:
    """Stop what has not started in the lanes within `inside` (ROOT: the whole run): withdraw attempts
    nobody took, make timers stale, close approval requests. Attempts in flight report first."""
    cancel_timers(tx, reason, inside=inside)
    for lid in [ROOT, *sorted(tx.s.lanes)]:
        a = tx.s.approval if lid == ROOT else tx.s.lanes[lid].approval
        if a is not None and within(lid, inside) and (lid != ROOT or inside == ROOT):
            tx.emit(ApprovalCancelled(step=a["step"], request_id=a["request_id"], reason=reason))
    why = f"{reason} before any worker started it" if inside == ROOT else reason
    for queued in list(attempts(tx.s, inside)):
        if queued.fencing is None and queued.kind == "action":
            withdraw(tx, queued, why)
    for key, child in children_in(tx.s, inside):  # a child run is cancelled too, and reports its end
        if child.get("cancel") is None:
            tx.emit(ChildRunCancelRequested(step=key, child_run_id=child["child_run_id"], reason=reason))
    cancel_waits(tx, inside, reason)  # an event wait ends at once: nothing of it is in flight


def settled_lanes(s: RunState) -> list[str]:
    """Open lanes being cancelled with nothing left in flight in them: they can finish now (deepest
    first, so a lane finishes after the lanes inside it)."""
    out = []
    for lid in open_lanes(s):
        ln = s.lanes[lid]
        winding = s.cancel is not None or ln.status == "cancelling"
        busy = any(True for _ in attempts(s, lid)) or children_in(s, lid)
        if winding and ln.attention is None and not busy:
            out.append(lid)
    return out


def decided_event(key: str, s: RunState, decision: tuple[str, str, JSONObject | None]) -> JoinDecided:
    outcome, reason, error = decision
    cancelling = open_lanes_of(s, key)
    return JoinDecided(step=key, outcome=outcome, reason=reason, cancelling=cancelling, error=error)
