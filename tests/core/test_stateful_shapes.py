"""Stateful property tests of parallel and for-each runs: random interleavings of results from several
lanes, duplicates, stale reports, lease expiries, approvals, timer races, pauses and cancellation in the
middle keep every core invariant (tests/invariants.py), and the shape's own: a shape step joins at most
once per visit, its lanes stay within its concurrency, an attempt belongs to its lane, and a step is
compensated only after every step completed after it in a related lane was."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule
from invariants import RunMachine, check_explained, check_finished, check_not_stuck, evidence_full

from lockstep.core.commands import (
    CancelRun,
    ChildEnded,
    ClaimTask,
    Command,
    DecideApproval,
    ExpireLease,
    FireTimer,
    PauseRun,
    Rejected,
    ReportFailure,
    ReportSuccess,
    ResumeRun,
    StartRun,
)
from lockstep.core.definition import Definition, parse_definition
from lockstep.core.events import Event
from lockstep.core.lanes import approvals, attempts
from lockstep.core.paths import lane_of, related
from lockstep.core.timeutil import iso, parse_iso

T0 = datetime(2024, 6, 1, 8, 0, 0, tzinfo=UTC)

DEFINITIONS: dict[str, Definition] = {
    name: parse_definition(yaml.safe_load(text))
    for name, text in {
        # three branches: an activity, a wait and an at-most-once call; an approval with a timeout that
        # fails; a branch whose failure is tolerated. Compensations everywhere.
        "fan": """
name: st-fan
steps:
  - id: first
    activity: svc.first
    timeout: 5s
    retry: {max_attempts: 2, initial_interval: 1s}
    compensate: {activity: svc.undo-first}
  - id: fan
    parallel:
      branches:
        left:
          - id: l1
            activity: svc.l1
            timeout: 5s
            retry: {max_attempts: 2, initial_interval: 1s}
            compensate: {activity: svc.undo-l1, retry: {max_attempts: 2, initial_interval: 1s}}
          - {id: lwait, wait: 3s}
          - id: l2
            activity: svc.l2
            delivery: at_most_once
            timeout: 5s
            compensate: {activity: svc.undo-l2}
        right:
          - id: ok
            approval: {approvers: {users: [alice, bob]}, timeout: 1h, on_timeout: fail}
          - id: r1
            activity: svc.r1
            timeout: 5s
            compensate: {activity: svc.undo-r1}
        extra:
          on_failure: continue
          steps:
            - {id: x1, activity: svc.x1, timeout: 5s, retry: {max_attempts: 1}}
  - id: last
    activity: svc.last
    timeout: 5s
    retry: {max_attempts: 1}
""",
        # join any over three quotes, each compensable
        "any": """
name: st-any
steps:
  - id: quotes
    parallel:
      join: any
      branches:
        a: [{id: qa, activity: q.a, timeout: 5s, retry: {max_attempts: 2}, compensate: {activity: q.undo}}]
        b: [{id: qb, activity: q.b, timeout: 5s, compensate: {activity: q.undo}}]
        c: [{id: qc, activity: q.c, timeout: 5s, retry: {max_attempts: 1}}]
  - id: buy
    activity: q.buy
    timeout: 5s
    retry: {max_attempts: 1}
""",
        # a for-each, two at a time, whose body holds a parallel step (two levels of lanes)
        "lines": """
name: st-lines
steps:
  - id: lines
    for_each:
      items: "${input.lines}"
      concurrency: 2
      max_items: 4
      body:
        - id: pack
          activity: wh.pack
          timeout: 5s
          input: {sku: "${item}", i: "${index}"}
          retry: {max_attempts: 2, initial_interval: 1s}
          compensate: {activity: wh.unpack, input: {sku: "${item}"}}
        - id: both
          parallel:
            branches:
              ship: [{id: ship, activity: wh.ship, timeout: 5s, retry: {max_attempts: 1}}]
              label:
                - id: label
                  activity: wh.label
                  timeout: 5s
                  retry: {max_attempts: 1}
                  compensate: {activity: wh.unlabel}
  - id: done
    activity: wh.done
    timeout: 5s
    retry: {max_attempts: 1}
""",
        # child runs: one per item of a for-each, one in a branch, besides an activity
        "kids": """
name: st-kids
steps:
  - id: first
    activity: k.first
    timeout: 5s
    compensate: {activity: k.undo}
  - id: both
    parallel:
      branches:
        sub: [{id: sub, run: {definition: other, input: {n: 1}}}]
        items:
          - id: each
            for_each:
              items: "${input.lines}"
              concurrency: 2
              max_items: 4
              body: [{id: kid, run: {definition: other, input: {sku: "${item}"}}}]
        act: [{id: act, activity: k.act, timeout: 5s, retry: {max_attempts: 1}}]
""",
        # n_of 2 items, failures tolerated
        "nof": """
name: st-nof
steps:
  - id: tries
    for_each:
      items: "${input.lines}"
      concurrency: 3
      max_items: 4
      join: {n_of: 2}
      on_failure: continue
      body:
        - id: try
          activity: t.try
          timeout: 5s
          retry: {max_attempts: 1}
          compensate: {activity: t.undo}
""",
    }.items()
}

OUTPUTS = st.sampled_from([None, {"ok": True}, {"v": 1}, "text"])
CODES = st.sampled_from(["Boom", "Fatal"])


class ShapeMachine(RunMachine):
    def __init__(self) -> None:
        super().__init__()
        self.d: Definition = DEFINITIONS["fan"]
        self.now = T0
        self.completed_order: list[str] = []  # compensable steps as they completed (key)
        self.compensated: list[str] = []

    def send(self, command: Command) -> list[Event] | None:
        events = self.decide_checked(command, self.now, self.d)
        if isinstance(events, Rejected):
            return None
        self.append(events)
        for e in events:
            if e.type == "ActivitySucceeded":
                if e.data.compensation:
                    self.compensated.append(e.data.step)
                elif e.data.compensable:
                    self.completed_order.append(e.data.step)
            elif e.type == "CompensationScheduled":
                self._check_compensation_order(e.data.step)
        return events

    def _check_compensation_order(self, key: str) -> None:
        """Every step completed after `key` in a related lane was compensated first."""
        if key not in self.completed_order:
            return
        i = len(self.completed_order) - 1 - self.completed_order[::-1].index(key)
        for later in self.completed_order[i + 1 :]:
            if related(lane_of(later), lane_of(key)):
                assert self.compensated.count(later) >= 1, (key, later, self.compensated)

    # --- rules --------------------------------------------------------------------------------------

    @initialize(which=st.sampled_from(sorted(DEFINITIONS)), n=st.integers(min_value=0, max_value=4))
    def start(self, which: str, n: int) -> None:
        self.d = DEFINITIONS[which]
        lines = [f"s{i}" for i in range(n)]
        events = self.send(StartRun("run-1", "acme", 1, {"lines": lines}, actor="carol"))
        assert events is not None

    def _queued(self) -> list[Any]:
        return [a for a in attempts(self.s) if a.fencing is None]

    def _leased(self) -> list[Any]:
        return [a for a in attempts(self.s) if a.fencing is not None]

    @precondition(lambda self: self.state is not None and not self.s.terminal)
    @rule(data=st.data())
    def claim(self, data: st.DataObject) -> None:
        queued = self._queued()
        if not queued:
            return
        a = data.draw(st.sampled_from(queued))
        events = self.send(ClaimTask(a.task_id, data.draw(st.sampled_from(["w1", "w2"])), iso(self.now)))
        assert events is not None
        assert [e.type for e in events] == ["ActivityStarted"]

    @rule(data=st.data())
    def claim_stale(self, data: st.DataObject) -> None:
        task = data.draw(st.sampled_from([t for t, _, _ in self.leases] + ["run-1/nope/a1-1"]))
        wanted = any(a.task_id == task for a in self._queued()) and not self.s.terminal
        assert (self.send(ClaimTask(task, "w9", iso(self.now))) is not None) == wanted

    @precondition(lambda self: self.state is not None and not self.s.terminal)
    @rule(data=st.data(), success=st.booleans(), output=OUTPUTS, code=CODES)
    def report(self, data: st.DataObject, success: bool, output: Any, code: str) -> None:
        candidates = [(a.task_id, a.attempt, a.fencing) for a in self._leased()] * 3 + list(self.leases)
        if not candidates:
            return
        task, attempt, fencing = data.draw(st.sampled_from(candidates))
        cmd: ReportSuccess | ReportFailure
        if success:
            cmd = ReportSuccess(task, attempt, fencing, output)
        else:
            retryable, unexpected = data.draw(st.booleans()), data.draw(st.booleans())
            cmd = ReportFailure(task, attempt, fencing, code, "m", retryable, unexpected)
        current = self.is_current(task, attempt, fencing)
        bounded = evidence_full(self.s, task)
        events = self.send(cmd)
        if bounded and not current:
            assert events is None
            return
        assert events is not None
        if current:
            assert events[0].type in ("ActivitySucceeded", "ActivityFailed")
            self.last_report = cmd
        else:
            assert [e.type for e in events] == ["ResultIgnored"]

    @precondition(lambda self: self.last_report is not None)
    @rule()
    def duplicate_report(self) -> None:
        assert self.last_report is not None
        bounded = evidence_full(self.s, self.last_report.task_id)
        before = self.s
        events = self.send(self.last_report)
        if bounded:
            assert events is None
            return
        assert events is not None
        assert [e.type for e in events] == ["ResultIgnored"]
        assert self.s.steps == before.steps
        assert self.s.lanes == before.lanes

    @precondition(lambda self: self.state is not None and not self.s.terminal)
    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        leased = self._leased()
        if not leased:
            return
        a = data.draw(st.sampled_from(leased))
        events = self.send(ExpireLease(a.task_id, a.attempt, a.fencing, "lease expired"))
        assert events is not None
        assert events[0].type == "ActivityTimedOut"

    @precondition(lambda self: self.state is not None and bool(self.s.timers))
    @rule(data=st.data(), early=st.booleans())
    def fire(self, data: st.DataObject, early: bool) -> None:
        key = data.draw(st.sampled_from(sorted(self.s.timers)))
        t = self.s.timers[key]
        due = parse_iso(t.fire_at) <= self.now
        if not early:
            self.now = max(self.now, parse_iso(t.fire_at))
        events = self.send(FireTimer(key, t.generation))
        assert (events is not None) == (due or not early)
        if events is not None:
            assert events[0].type == "TimerFired"
            again = self.send(FireTimer(key, t.generation))  # a duplicate firing, right after
            assert again is None

    @precondition(lambda self: self.state is not None and bool(approvals(self.s)))
    @rule(data=st.data(), who=st.sampled_from(["alice", "bob", "carol", "mallory"]), yes=st.booleans())
    def decide(self, data: st.DataObject, who: str, yes: bool) -> None:
        req = data.draw(st.sampled_from(approvals(self.s)))
        decision = "approve" if yes else "reject"
        events = self.send(DecideApproval(req["request_id"], who, decision, None, ("approver",), ()))
        if who in ("carol", "mallory"):  # the initiator, and someone the policy does not name
            assert events is None
        if events is not None:
            assert events[0].type == "ApprovalDecisionRecorded"

    def _progress(self, data: st.DataObject) -> None:
        """What a healthy world does next, in one lane picked at random: claim, report success, approve,
        or fire a due timer."""
        moves: list[tuple[str, Any]] = [("claim", a) for a in self._queued()]
        moves += [("ok", a) for a in self._leased()]
        moves += [("approve", r) for r in approvals(self.s)]
        moves += [("fire", t) for t in self.s.timers.values() if t.kind != "deadline"]
        moves += [("child", k) for k in sorted(self.s.children)]
        if not moves:
            return
        kind, what = data.draw(st.sampled_from(moves))
        if kind == "claim":
            events = self.send(ClaimTask(what.task_id, "w1", iso(self.now)))
        elif kind == "ok":
            events = self.send(ReportSuccess(what.task_id, what.attempt, what.fencing, data.draw(OUTPUTS)))
        elif kind == "child":
            child = self.s.children[what]["child_run_id"]
            events = self.send(ChildEnded(child, what, "completed", {"ok": 1}))
        elif kind == "approve":
            approve = DecideApproval(what["request_id"], "alice", "approve", None, ("approver",), ())
            events = self.send(approve)
        else:
            self.now = max(self.now, parse_iso(what.fire_at))
            events = self.send(FireTimer(what.key, what.generation))
        assert events is not None, (kind, what)

    @precondition(lambda self: self.state is not None and not self.s.terminal)
    @rule(data=st.data())
    def progress_a(self, data: st.DataObject) -> None:
        self._progress(data)

    @precondition(lambda self: self.state is not None and not self.s.terminal)
    @rule(data=st.data())
    def progress_b(self, data: st.DataObject) -> None:
        self._progress(data)

    @precondition(lambda self: self.state is not None and not self.s.terminal)
    @rule(data=st.data())
    def progress_c(self, data: st.DataObject) -> None:
        self._progress(data)

    @precondition(lambda self: self.state is not None and bool(self.s.children))
    @rule(data=st.data(), status=st.sampled_from(["completed", "completed", "failed", "cancelled"]))
    def child_ends(self, data: st.DataObject, status: str) -> None:
        """The outbox reports a child's end; then the same end again (a redelivered row): refused."""
        key = data.draw(st.sampled_from(sorted(self.s.children)))
        child = self.s.children[key]["child_run_id"]
        error = None if status == "completed" else {"code": "Nope", "message": "child said no"}
        end = ChildEnded(child, key, status, {"ok": True} if status == "completed" else None, error)
        events = self.send(end)
        assert events is not None
        assert events[0].type == "ChildRunEnded"
        assert self.send(end) is None

    @rule(go=st.integers(min_value=0, max_value=7))
    def cancel(self, go: int) -> None:
        if go != 0:
            return
        before = self.s
        events = self.send(CancelRun("stop", "ops"))
        if before.terminal:
            assert events is None
        elif before.cancel is not None:
            assert events == []
        elif before.compensating is not None:
            assert events is None
        else:
            assert events is not None
            assert events[0].type == "CancelRequested"

    @precondition(lambda self: self.state is not None and not self.s.terminal)
    @rule(go=st.integers(min_value=0, max_value=2))
    def pause_or_resume(self, go: int) -> None:
        if go != 0:
            return
        if self.s.paused is None:
            self.send(PauseRun("look", "ops"))
        else:
            events = self.send(ResumeRun("go on", "ops"))
            assert events is not None

    @rule(seconds=st.sampled_from([0.5, 2, 4, 3700]))
    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    # --- invariants ---------------------------------------------------------------------------------

    @invariant()
    def status_is_consistent(self) -> None:
        if self.state is None:
            return
        if self.s.terminal:
            check_finished(self.s)
        else:
            check_not_stuck(self.s)
        check_explained(self.s, self.now)

    @invariant()
    def joins_once_per_visit(self) -> None:
        """Per visit of a shape step (its ParallelStarted/ForEachStarted): one JoinDecided at most, and
        at most one end (StepJoined, or StepFailed of the step), only after the join was decided."""
        visits: dict[str, dict[str, int]] = {}
        for e in self.events:
            t = e.type
            if t in ("ParallelStarted", "ForEachStarted"):
                visits[e.data.step] = Counter()
            elif t in ("JoinDecided", "StepJoined") or (t == "StepFailed" and e.data.step in visits):
                v = visits[e.data.step]
                v[t] += 1
                if t != "JoinDecided":
                    assert v["JoinDecided"] == 1, (t, e.data.step)
                assert v["JoinDecided"] <= 1
                assert v["StepJoined"] + v["StepFailed"] <= 1

    @invariant()
    def lanes_hold_their_own_attempts(self) -> None:
        if self.state is None:
            return
        for lid, ln in self.s.lanes.items():
            if ln.active is not None:
                assert lane_of(ln.active.step) == lid
                assert ln.open or ln.active.kind == "compensation"
        for key, g in self.s.groups.items():
            running = [x for x in g.lanes if x in self.s.lanes and self.s.lanes[x].open]
            assert len(running) <= g.concurrency, (key, running)


ShapeMachine.TestCase.settings = settings(
    max_examples=250,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestShapeMachine = ShapeMachine.TestCase
TestShapeMachine.__doc__ = "Random interleavings in parallel and for-each runs keep every invariant."
