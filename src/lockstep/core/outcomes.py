"""What an approval's decision leads to, in words, for the person deciding (the approval page): what
happens once the request is approved, once it is rejected, and when nobody decides in time. Derived
from the definition and the run's state alone, the way core/approval.py acts on a decision, so the page
says what the engine will do: the step after the approval in its own lane, `on_reject` and
`on_timeout`, a failure that ends a branch or an item (and what its parallel or for-each step then
does), and, when the run itself fails, the completed steps it compensates, newest first. Pure."""

from __future__ import annotations

from typing import TypedDict

from .canonical import JSONObject
from .definition import Definition, ForEachStep, ParallelStep
from .paths import ROOT, is_item_lane, lane_name, lane_of, lane_step, step_id
from .state import RunState

__all__ = ["Outcomes", "approval_outcomes"]


class Outcomes(TypedDict):
    approve: str
    reject: str
    timeout: str


def _code(name: str) -> str:
    return f"`{name}`"


def _lane_words(lane: str) -> str:
    shape = step_id(lane_step(lane))
    if is_item_lane(lane):
        return f"item {lane_name(lane)} of for-each step {_code(shape)}"
    return f"branch {_code(lane_name(lane))} of parallel step {_code(shape)}"


def _enter(d: Definition, lane: str, target: str | None) -> str:
    """What entering `target` (None: the end of the lane) in `lane` means."""
    if target is not None:
        where = "the run continues" if lane == ROOT else f"{_lane_words(lane)} continues"
        return f"{where} with {_code(target)}"
    if lane == ROOT:
        return "the run completes"
    return f"{_lane_words(lane)} ends successfully (its step's join decides what follows)"


def _tolerant(d: Definition, lane: str) -> bool:
    """A failure of `lane` does not fail its shape step (`on_failure: continue`)."""
    shape = d.step(lane_step(lane))
    if isinstance(shape, ParallelStep):
        name = lane_name(lane)
        return any(b.id == name and b.on_failure == "continue" for b in shape.branches)
    return isinstance(shape, ForEachStep) and shape.on_failure == "continue"


def _fail(d: Definition, s: RunState, lane: str) -> str:
    """What a step failing for good in `lane` leads to (core/flow.py `fail`, core/join.py `verdict`)."""
    if lane == ROOT:
        done = list(reversed(s.completed))  # keys: a for-each item's step names its item
        if not done:
            return "the run fails (nothing to compensate)"
        return "the run fails and compensates " + ", then ".join(_code(k) for k in done)
    if _tolerant(d, lane):
        shape = step_id(lane_step(lane))
        return f"{_lane_words(lane)} fails; {_code(shape)} goes on without it (on_failure: continue)"
    outer = lane_of(lane_step(lane))
    return f"{_lane_words(lane)} fails, which fails {_code(step_id(lane_step(lane)))}: " + _fail(d, s, outer)


def _target(d: Definition, s: RunState, lane: str, target: str, failing: str) -> str:
    if target == "fail":
        return _fail(d, s, lane)
    return failing if target == "reject" else _enter(d, lane, None if target == "end" else target)


def approval_outcomes(d: Definition, s: RunState, key: str, policy: JSONObject) -> Outcomes:
    """The outcomes of the request at step `key`, from its recorded `policy` (what the engine applies)."""
    lane = lane_of(key)
    quorum = int(str(policy.get("quorum", 1)))
    reject_quorum = int(str(policy.get("reject_quorum", 1)))
    approve = _enter(d, lane, d.following(key))
    reject = _target(d, s, lane, str(policy.get("on_reject", "fail")), "")
    timeout = _target(d, s, lane, str(policy.get("on_timeout", "reject")), reject)
    need_a = f"once {quorum} approve" if quorum > 1 else "once approved"
    need_r = f"once {reject_quorum} reject" if reject_quorum > 1 else "once rejected"
    return Outcomes(
        approve=f"{need_a}, {approve}",
        reject=f"{need_r}, {reject}",
        timeout=f"if nobody decides in time, {timeout}",
    )
