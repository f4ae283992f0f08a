"""What the approval page says a decision leads to (core/outcomes.py), at the top level, in a parallel
branch and in a for-each body, checked against what the engine then does."""

from __future__ import annotations

from corekit import load
from shapekit import LaneRun

from lockstep.core.lanes import approvals
from lockstep.core.outcomes import approval_outcomes

DOC = """
name: outcomes
steps:
  - id: reserve-stock
    activity: inventory.reserve
    timeout: 30s
    compensate: {activity: inventory.release, timeout: 30s}
  - id: checks
    parallel:
      join: all
      branches:
        legal:
          - id: legal-ok
            approval: {approvers: {users: [alice]}, timeout: 1d, details: "legal"}
        soft:
          on_failure: continue
          steps:
            - id: soft-ok
              approval: {approvers: {users: [alice]}, timeout: 1d, details: "soft", on_timeout: fail}
  - id: lines
    for_each:
      items: "${[1]}"
      body:
        - id: line-ok
          approval: {approvers: {users: [alice]}, timeout: 1d, details: "line", on_reject: redo}
        - id: redo
          activity: inventory.reserve
          timeout: 30s
  - id: sign-off
    approval: {approvers: {users: [alice, bob]}, quorum: 2, timeout: 1d, details: "sign"}
  - id: charge-card
    activity: payments.charge
    timeout: 30s
"""


def _pending(r: LaneRun) -> dict[str, dict]:  # type: ignore[type-arg]
    return {str(a["step"]): a for a in approvals(r.s)}


def _say(r: LaneRun, key: str) -> dict[str, str]:
    a = _pending(r)[key]
    return dict(approval_outcomes(r.d, r.s, key, a["policy"]))


def test_outcomes_follow_the_lane_and_the_compensations() -> None:
    """A branch's approval ends the branch or fails the parallel step (then the run fails and compensates
    what completed); a tolerant branch fails alone; a body's on_reject goes to its step; the top-level
    approval continues with the next step once its quorum approves."""
    r = LaneRun(load(DOC), {})
    r.ok("reserve-stock", {"reservation_id": "r1"})
    legal = _say(r, "checks.legal.legal-ok")
    assert legal["approve"] == (
        "once approved, branch `legal` of parallel step `checks` ends successfully (its step's join "
        "decides what follows)"
    )
    assert legal["reject"] == (
        "once rejected, branch `legal` of parallel step `checks` fails, which fails `checks`: the run "
        "fails and compensates `reserve-stock`"
    )
    assert legal["timeout"] == "if nobody decides in time, " + legal["reject"].removeprefix("once rejected, ")
    soft = _say(r, "checks.soft.soft-ok")
    assert soft["timeout"].endswith("`checks` goes on without it (on_failure: continue)")
    r.decide_as("checks.legal.legal-ok", "alice")
    r.decide_as("checks.soft.soft-ok", "alice")
    line = _say(r, "lines[0].line-ok")
    assert line["approve"] == "once approved, item 0 of for-each step `lines` continues with `redo`"
    assert line["reject"] == "once rejected, item 0 of for-each step `lines` continues with `redo`"
    r.decide_as("lines[0].line-ok", "alice")
    r.ok("lines[0].redo", {})
    sign = _say(r, "sign-off")
    assert sign["approve"] == "once 2 approve, the run continues with `charge-card`"
    assert sign["reject"] == "once rejected, the run fails and compensates `reserve-stock`"


def test_what_the_page_says_is_what_the_engine_does() -> None:
    """Rejecting the branch's approval fails the run through the compensation the page named."""
    r = LaneRun(load(DOC), {})
    r.ok("reserve-stock", {"reservation_id": "r1"})
    said = _say(r, "checks.legal.legal-ok")["reject"]
    r.decide_as("checks.legal.legal-ok", "alice", "reject")
    assert r.s.status == "compensating"
    assert list(r.s.compensating or ()) == ["reserve-stock"]
    assert said.endswith("compensates `reserve-stock`")


def test_without_completed_steps_nothing_is_compensated() -> None:
    """An approval that is the first step says the run fails with nothing to compensate."""
    first = "name: x\nsteps:\n  - id: ok\n    approval: {approvers: {users: [a]}, timeout: 1h, details: d}\n"
    r = LaneRun(load(first), {})
    assert _say(r, "ok") == {
        "approve": "once approved, the run completes",
        "reject": "once rejected, the run fails (nothing to compensate)",
        "timeout": "if nobody decides in time, the run fails (nothing to compensate)",
    }


BODY = """
name: body
steps:
  - id: lines
    for_each:
      items: "${[1]}"
      body:
        - id: reserve
          activity: inventory.reserve
          timeout: 30s
          compensate: {activity: inventory.release, timeout: 30s}
        - id: line-ok
          approval: {approvers: {users: [alice]}, timeout: 1d, details: "line"}
"""


def test_a_for_each_items_rejection_names_the_items_compensation() -> None:
    """Rejecting in a for-each item fails the item, then its step, then the run, which compensates the
    item's completed step by its key (the item index included)."""
    r = LaneRun(load(BODY), {})
    r.ok("lines[0].reserve", {})
    said = _say(r, "lines[0].line-ok")
    assert said["approve"] == (
        "once approved, item 0 of for-each step `lines` ends successfully (its step's join decides what "
        "follows)"
    )
    assert said["reject"] == (
        "once rejected, item 0 of for-each step `lines` fails, which fails `lines`: the run fails and "
        "compensates `lines[0].reserve`"
    )
    r.decide_as("lines[0].line-ok", "alice", "reject")
    assert list(r.s.compensating or ()) == ["lines[0].reserve"]
