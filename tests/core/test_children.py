"""The `run` step in the pure core: a child run is requested with a derived id and start key (one per
visit), the parent waits without an attempt, takes the child's output or fails with its error, cancels
it when it is cancelled itself (and waits for its end), and a child's own end is handed to its parent
(effects); a stale end changes nothing."""

from __future__ import annotations

import pytest
from corekit import load, types
from shapekit import LaneRun

from lockstep.core.commands import ChildEnded, Rejected, SkipStep, StartRun
from lockstep.core.decide import decide
from lockstep.core.effects import CancelChild, EndChild, StartChild, effects_of
from lockstep.core.events import ChildRunRequested
from lockstep.core.evolve import fold
from lockstep.core.explain import explain

PARENT = """
name: onboarding
steps:
  - id: open
    activity: acct.open
    timeout: 5s
    compensate: {activity: acct.close}
  - id: kyc
    run:
      definition: kyc-check
      version: latest
      input: {customer: "${input.customer}"}
  - id: welcome
    activity: mail.welcome
    timeout: 5s
    input: {score: "${steps.kyc.output.score}"}
"""


def parent() -> LaneRun:
    r = LaneRun(load(PARENT), {"customer": "c-1"})
    r.ok("open", {"account": 7})
    return r


def requested(r: LaneRun) -> ChildRunRequested:
    found = [e.data for e in r.events if isinstance(e.data, ChildRunRequested)]
    return found[-1]


def test_a_run_step_requests_one_child_with_a_derived_id_and_key_and_waits() -> None:
    """The request names the definition, the rendered input, the start key <parent>:<step> and depth
    1; the id is time-ordered and derived (the same decision gives the same id); no attempt is held."""
    r = parent()
    child = requested(r)
    assert (child.definition, child.version, child.input) == ("kyc-check", None, {"customer": "c-1"})
    assert child.start_key == "r1:kyc"
    assert child.depth == 1
    assert len(child.child_run_id) == 32
    assert r.s.status == "waiting"
    assert r.open_steps() == []
    assert r.s.children["kyc"]["child_run_id"] == child.child_run_id
    why = explain(r.s, r.now)
    assert why["wait_kind"] == "child"
    assert f"waits for child run {child.child_run_id} of kyc-check" in (why["wait_reason"] or "")
    start = next(e for e in effects_of(r.events) if isinstance(e, StartChild))
    assert start.start_key == "r1:kyc"


def test_the_childs_output_is_the_steps_output() -> None:
    """A completed child: the step succeeds with its output, the next step reads it."""
    r = parent()
    child = requested(r)
    r.send(ChildEnded(child.child_run_id, "kyc", "completed", {"score": 91}))
    assert r.s.steps["kyc"].output == {"score": 91}
    assert not r.s.children
    scheduled = [e.data for e in r.events if e.type == "ActivityScheduled" and e.data.step == "welcome"]
    assert scheduled[0].input == {"score": 91}


def test_a_failed_child_fails_the_step_and_compensates_the_parent() -> None:
    """The child's error is kept on the step; the parent compensates what it completed."""
    r = parent()
    child = requested(r)
    r.send(ChildEnded(child.child_run_id, "kyc", "failed", None, {"code": "Sanctioned", "message": "no"}))
    assert r.s.steps["kyc"].status == "failed"
    assert r.s.error is not None
    assert r.s.error["code"] == "ChildRunFailed"
    assert "Sanctioned: no" in r.s.error["message"]
    assert r.s.status == "compensating"


def test_a_stale_or_repeated_end_is_refused() -> None:
    """An end for another child id, or after the step moved on, changes nothing."""
    r = parent()
    child = requested(r)
    with pytest.raises(Rejected, match="no longer waits"):
        r.decide(ChildEnded("someone-else", "kyc", "completed", {}))
    r.send(ChildEnded(child.child_run_id, "kyc", "completed", {"score": 1}))
    with pytest.raises(Rejected, match="no longer waits"):
        r.decide(ChildEnded(child.child_run_id, "kyc", "completed", {"score": 2}))


def test_cancelling_the_parent_cancels_the_child_and_waits_for_its_end() -> None:
    """The cancel is handed to the child (an effect); the parent compensates only after the child
    reported its end, as it would wait for an attempt in flight."""
    r = parent()
    child = requested(r)
    events = r.cancel()
    assert "ChildRunCancelRequested" in types(events)
    assert any(isinstance(e, CancelChild) for e in effects_of(events))
    assert r.s.status == "cancelling"
    r.send(ChildEnded(child.child_run_id, "kyc", "cancelled", None, {"code": "Cancelled", "message": "stop"}))
    assert r.s.status == "compensating"
    r.ok("open")
    assert r.s.status == "cancelled"


def test_a_skip_of_a_step_waiting_for_its_child_is_refused() -> None:
    """The child is running: a skip would leave it behind; cancel instead."""
    r = parent()
    with pytest.raises(Rejected, match="waits for child run"):
        r.decide(SkipStep("kyc", "skip it", None, "ops", ("operator",)))


def test_a_child_run_records_its_parent_and_hands_its_end_over() -> None:
    """StartRun with a parent: RunStarted.parent and the state keep it; the child's terminal event is an
    EndChild effect for its row (a run without a parent has none)."""
    d = load("name: kyc-check\nsteps:\n  - {id: look, activity: kyc.look, timeout: 5s}\n")
    parent_ref = {"run_id": "r1", "step": "kyc", "depth": 1}
    r = LaneRun(d, None)
    assert r.s.parent is None
    events = decide(None, StartRun("c1", "t1", 1, {}, "r1:kyc", parent=parent_ref), r.now, d)
    state = fold(events)
    assert state is not None
    assert state.parent == parent_ref
    assert events[0].to_json()["data"]["parent"] == parent_ref
    child = LaneRun(d, {})
    child.state, child.events = state, list(events)
    done = child.ok("look", {"score": 5})
    assert [e for e in effects_of(done, child=True) if isinstance(e, EndChild)] == [
        EndChild("completed", {"score": 5}, None)
    ]
    assert not [e for e in effects_of(done) if isinstance(e, EndChild)]


def test_a_run_step_in_a_branch_waits_in_its_lane() -> None:
    """Children are per step key: a branch's child run is that branch's wait."""
    d = load(
        """
name: fan
steps:
  - id: both
    parallel:
      branches:
        a: [{id: sub, run: {definition: other}}]
        b: [{id: act, activity: x.act, timeout: 5s}]
"""
    )
    r = LaneRun(d, {})
    child = requested(r)
    assert child.step == "both.a.sub"
    r.ok("both.b.act", 1)
    assert "branch a: child run" in (explain(r.s, r.now)["wait_reason"] or "")
    r.send(ChildEnded(child.child_run_id, "both.a.sub", "completed", {"v": 2}))
    assert r.s.output == {"a": {"v": 2}, "b": 1}
