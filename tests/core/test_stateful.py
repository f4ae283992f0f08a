"""Stateful property tests: random command sequences against decide/evolve keep every core invariant.

The machine plays the outside world (workers, the timer scheduler, operators) with a mix of correct,
stale, duplicate and bogus commands, and checks after every step that the run is consistent.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule
from invariants import RunMachine, check_explained, check_finished, check_not_stuck, evidence_full

from lockstep.core.commands import (
    CancelRun,
    ClaimTask,
    Command,
    ExpireLease,
    FireTimer,
    Rejected,
    ReportFailure,
    ReportSuccess,
    StartRun,
)
from lockstep.core.decide import decide
from lockstep.core.definition import Definition, parse_definition
from lockstep.core.events import Event, chain_hash, chain_link
from lockstep.core.evolve import evolve
from lockstep.core.state import RunState
from lockstep.core.timeutil import iso, parse_iso

T0 = datetime(2024, 5, 1, 8, 0, 0, tzinfo=UTC)

DEFINITIONS: dict[str, Definition] = {
    name: parse_definition(yaml.safe_load(text))
    for name, text in {
        # retries with backoff, non_retryable, compensation with its own retry, choice, wait, at_most_once
        "saga": """
name: st-saga
steps:
  - id: reserve
    activity: inventory.reserve
    timeout: 30s
    retry: {max_attempts: 3, initial_interval: 1s, backoff: 2.0, max_interval: 3s, non_retryable: [Fatal]}
    compensate: {activity: inventory.release, input: {sku: "${input.sku}"}, retry: {max_attempts: 2}}
  - id: route
    choice:
      - {if: "input.qty > 10", next: cool}
      - {else: charge}
  - id: cool
    wait: 5s
  - id: charge
    activity: payments.charge
    delivery: at_most_once
    timeout: 30s
    retry: {max_attempts: 2}
    compensate: {activity: payments.refund, input: {order: "${input.order}"}}
  - id: ship
    activity: shipping.create
    timeout: 10s
    retry: {max_attempts: 2, non_retryable: [Fatal]}
    next: end
""",
        # wait until an input time, an at_most_once call, a choice without else reading its output
        "until": """
name: st-until
steps:
  - id: hold
    wait: {until: "${input.deadline}"}
  - id: notify
    activity: email.send
    delivery: at_most_once
    timeout: 10s
  - id: check
    choice:
      - {if: "steps.notify.output.ok == true", next: done}
  - id: done
    succeed: {output: {notified: true}}
""",
        # two compensable steps, a compensation input that may not render, a fail step behind a choice
        "chain": """
name: st-chain
steps:
  - id: a
    activity: svc.a
    timeout: 5s
    retry: {max_attempts: 1}
    compensate: {activity: svc.undo-a, retry: {max_attempts: 3, initial_interval: 2s}}
  - id: b
    activity: svc.b
    timeout: 5s
    retry: {max_attempts: 4, initial_interval: 1s, backoff: 3.0, max_interval: 5s}
    compensate: {activity: svc.undo-b, input: {v: "${steps.b.output.v}"}}
  - id: gate
    choice:
      - {if: "input.flag", next: reject}
      - {else: c}
  - id: c
    activity: svc.c
    timeout: 5s
    next: end
  - id: reject
    fail: {error: Rejected, message: "flag is ${input.flag}"}
""",
    }.items()
}

OUTPUTS = st.sampled_from([None, {"ok": True}, {"ok": False}, {"v": 1}, {"amount": 5}, "text", 7])
CODES = st.sampled_from(["Boom", "Fatal", "Timeout"])


class CoreMachine(RunMachine):
    def __init__(self) -> None:
        super().__init__()
        self.d: Definition = DEFINITIONS["saga"]
        self.now = T0
        self.successes: Counter[tuple[str, int, bool]] = Counter()

    # --- the one way commands reach the run ----------------------------------------------------------

    def send(self, command: Command) -> list[Event] | None:
        """decide + append; None if Rejected. Checks determinism, terminal stability and effects
        (RunMachine), and that no attempt succeeds twice."""
        events = self.decide_checked(command, self.now, self.d)
        if isinstance(events, Rejected):
            return None
        self.append(events)
        for e in events:
            if e.type == "ActivitySucceeded":
                k = (e.data.step, e.data.attempt, bool(e.data.compensation))
                self.successes[k] += 1
                assert self.successes[k] == 1, f"attempt {k} succeeded twice"
        return events

    # --- rules --------------------------------------------------------------------------------------

    @initialize(
        which=st.sampled_from(sorted(DEFINITIONS)),
        qty=st.sampled_from([1, 20]),
        flag=st.booleans(),
        deadline_s=st.sampled_from([-60, 0, 90, 86_400]),
    )
    def start(self, which: str, qty: int, flag: bool, deadline_s: int) -> None:
        self.d = DEFINITIONS[which]
        payload = {
            "sku": "S-1",
            "qty": qty,
            "order": "o-7",
            "flag": flag,
            "deadline": iso(T0 + timedelta(seconds=deadline_s)),
        }
        events = self.send(StartRun(run_id="run-1", tenant="acme", version=1, input=payload))
        assert events is not None
        assert events[0].type == "RunStarted"

    @precondition(
        lambda self: self.state is not None and self.s.active is not None and self.s.active.fencing is None
    )
    @rule(worker=st.sampled_from(["w1", "w2"]))
    def claim_active(self, worker: str) -> None:
        a = self.s.active
        assert a is not None
        deadline = iso(self.now + timedelta(milliseconds=a.timeout_ms))
        events = self.send(ClaimTask(task_id=a.task_id, worker=worker, deadline=deadline))
        assert events is not None
        assert [e.type for e in events] == ["ActivityStarted"]

    @rule(data=st.data())
    def claim_other(self, data: st.DataObject) -> None:
        known = [t for t, _, _ in self.leases] + ["run-1/nope/a1"]
        task = data.draw(st.sampled_from(known))
        a = self.s.active
        wanted = not self.s.terminal and a is not None and a.fencing is None and a.task_id == task
        events = self.send(ClaimTask(task_id=task, worker="w9", deadline=iso(self.now)))
        assert (events is not None) == wanted

    @rule(data=st.data(), success=st.booleans(), output=OUTPUTS, code=CODES)
    def report(self, data: st.DataObject, success: bool, output: Any, code: str) -> None:
        a = self.s.active
        candidates = list(self.leases)
        if a is not None and a.fencing is not None:
            candidates += [
                (a.task_id, a.attempt, a.fencing),
                (a.task_id, a.attempt, a.fencing),  # weight the current attempt
                (a.task_id, a.attempt, a.fencing - 1),
                (a.task_id, a.attempt + 1, a.fencing),
            ]
        if a is not None:
            candidates.append((a.task_id, a.attempt, 1))  # before any claim, or a bogus token
        if not candidates:
            return
        task, attempt, fencing = data.draw(st.sampled_from(candidates))
        cmd: ReportSuccess | ReportFailure
        if success:
            cmd = ReportSuccess(task_id=task, attempt=attempt, fencing=fencing, output=output)
        else:
            cmd = ReportFailure(
                task_id=task,
                attempt=attempt,
                fencing=fencing,
                code=code,
                message="m",
                retryable=data.draw(st.booleans()),
                unexpected=data.draw(st.booleans()),
            )
        current = self.is_current(task, attempt, fencing)
        bounded = evidence_full(self.s, task)
        events = self.send(cmd)
        if bounded and not current:
            assert events is None, "past the bound a stale report is answered as ignored, not appended"
            return
        assert events is not None, "results are never refused: they are applied or recorded as ignored"
        if current:
            first = "ActivitySucceeded" if success else "ActivityFailed"
            assert events[0].type == first
            assert all(e.type != "ResultIgnored" for e in events)
            self.last_report = cmd
        else:
            assert [e.type for e in events] == ["ResultIgnored"]

    def _progress(self, data: st.DataObject) -> None:
        """What a healthy world does next: claim, report the current attempt, or fire a due timer."""
        a = self.s.active
        if a is not None and a.fencing is None:
            self.claim_active(worker=data.draw(st.sampled_from(["w1", "w2"])))
        elif a is not None and a.fencing is not None:
            outcome = data.draw(st.sampled_from(["success", "success", "success", "failure", "expire"]))
            if outcome == "expire":
                events = self.send(ExpireLease(a.task_id, a.attempt, a.fencing, "lease expired"))
                assert events is not None
                assert events[0].type == "ActivityTimedOut"
                return
            report: ReportSuccess | ReportFailure
            if outcome == "success":
                report = ReportSuccess(a.task_id, a.attempt, a.fencing, data.draw(OUTPUTS))
            else:
                report = ReportFailure(
                    a.task_id,
                    a.attempt,
                    a.fencing,
                    data.draw(CODES),
                    "m",
                    retryable=data.draw(st.booleans()),
                    unexpected=data.draw(st.booleans()),
                )
            events = self.send(report)
            assert events is not None
            assert events[0].type in ("ActivitySucceeded", "ActivityFailed")
            self.last_report = report
        elif self.s.timers:
            self.fire_armed(data)

    # Three copies so the happy path stays likely under Hypothesis' swarm testing (rules are sampled).
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

    @precondition(lambda self: self.last_report is not None)
    @rule()
    def duplicate_report(self) -> None:
        assert self.last_report is not None
        before = self.s
        bounded = evidence_full(before, self.last_report.task_id)
        events = self.send(self.last_report)
        if bounded:
            assert events is None, "past the bound a stale report is answered as ignored, not appended"
            return
        assert events is not None
        assert [e.type for e in events] == ["ResultIgnored"]
        assert self.s.status == before.status
        assert self.s.steps == before.steps

    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        a = self.s.active
        candidates = list(self.leases)
        if a is not None and a.fencing is not None:
            candidates += [(a.task_id, a.attempt, a.fencing)] * 2
        if a is not None:
            candidates.append((a.task_id, a.attempt, 0))
        if not candidates:
            return
        task, attempt, fencing = data.draw(st.sampled_from(candidates))
        current = self.is_current(task, attempt, fencing)
        events = self.send(
            ExpireLease(task_id=task, attempt=attempt, fencing=fencing, reason="lease expired")
        )
        assert (events is not None) == current
        if events is not None:
            assert events[0].type == "ActivityTimedOut"

    @precondition(lambda self: self.state is not None and bool(self.s.timers))
    @rule(data=st.data())
    def fire_armed(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.s.timers)))
        t = self.s.timers[key]
        self.now = max(self.now, parse_iso(t.fire_at))  # the scheduler fires due timers only
        events = self.send(FireTimer(key=key, generation=t.generation))
        assert events is not None
        assert events[0].type == "TimerFired"

    @rule(data=st.data())
    def fire_stale(self, data: st.DataObject) -> None:
        candidates = [*list(self.spent_timers), ("wait:nope", 1), ("retry:nope", 2)]
        candidates += [(t.key, t.generation + 1) for t in self.s.timers.values()]
        candidates += [(t.key, t.generation - 1) for t in self.s.timers.values()]
        key, generation = data.draw(st.sampled_from(candidates))
        armed = self.s.timers.get(key)
        if armed is not None and armed.generation == generation:
            return  # by chance the armed one: covered by fire_armed
        assert self.send(FireTimer(key=key, generation=generation)) is None

    @rule(reason=st.sampled_from(["customer asked", "fraud"]), go=st.integers(min_value=0, max_value=3))
    def cancel(self, reason: str, go: int) -> None:
        if go != 0:  # cancel a quarter of the times it is picked, so runs also reach their other ends
            return
        before = self.s
        events = self.send(CancelRun(reason=reason, actor="ops"))
        if before.terminal:
            assert events is None
        elif before.cancel is not None:
            assert events == []
        elif before.compensating is not None:
            assert events is None
        else:
            assert events is not None
            assert events[0].type == "CancelRequested"

    @rule(seconds=st.sampled_from([0.5, 1, 7, 3600]))
    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    # --- invariants ---------------------------------------------------------------------------------

    @invariant()
    def status_is_consistent(self) -> None:
        if self.state is None:
            return
        s = self.s
        if s.terminal:
            check_finished(s)
        else:
            check_not_stuck(s)  # never stuck silently; waiting means a timer and no attempt
        if s.status == "failed":
            assert s.error is not None

    @invariant()
    def explain_matches_status(self) -> None:
        if self.state is None:
            return
        info = check_explained(self.s, self.now)
        if not self.s.terminal:
            assert "moving to the next step" not in info["wait_reason"]
            if self.s.status == "waiting":
                assert "run failed" not in info["wait_reason"]


CoreMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestCoreMachine = CoreMachine.TestCase
TestCoreMachine.__doc__ = (
    "Random command sequences keep fold == snapshot, seq, fencing and effect invariants."
)


# --- hash chain -------------------------------------------------------------------------------------


def _history() -> list[Event]:
    d = DEFINITIONS["chain"]
    state: RunState | None = None
    events: list[Event] = []

    def send(cmd: Command) -> None:
        nonlocal state
        for e in decide(state, cmd, T0, d):
            state = evolve(state, e)
            events.append(e)

    send(StartRun("run-1", "acme", 1, {"flag": False}))
    assert state is not None
    assert state.active is not None
    send(ClaimTask(state.active.task_id, "w1", iso(T0)))
    assert state.active is not None
    assert state.active.fencing is not None
    send(ReportSuccess(state.active.task_id, 1, state.active.fencing, {"v": 1}))
    send(CancelRun("stop"))
    return events


def _chain(run_id: str, events: list[Event]) -> str:
    h = ""
    for e in events:
        h = chain_hash(h, run_id, e)
    return h


def _chain_stored(run_id: str, docs: list[dict[str, Any]]) -> str:
    """The chain over events as stored (what a tampered database row holds)."""
    h = ""
    for doc in docs:
        h = chain_link(h, run_id, doc)
    return h


HISTORY = _history()
STORED = [e.to_json() for e in HISTORY]


def _mutations(e: dict[str, Any]) -> list[dict[str, Any]]:
    data = e["data"]
    out = [
        {**e, "type": e["type"] + "X"},
        {**e, "at": e["at"].replace("Z", "1Z")},
        {**e, "seq": e["seq"] + 1},
        {**e, "v": e["v"] + 1},
        {**e, "data": {**data, "extra": None}},
    ]
    for k, v in data.items():
        out.append({**e, "data": {**data, k: [v]}})
        out.append({**e, "data": {kk: vv for kk, vv in data.items() if kk != k}})
    return out


def _read_back(doc: dict[str, Any]) -> dict[str, Any] | None:
    """A stored event as this build reads it and would hash it (None: refused, with a message)."""
    try:
        return Event.from_json(doc).to_json()
    except ValueError:
        return None


def test_chain_hash_changes_when_any_event_field_changes() -> None:
    """Changing type, time, seq, schema version or any data field of any event changes the chain head;
    reading such an event back never hides the change (it is read exactly as stored, or refused)."""
    assert len(HISTORY) >= 5
    head = _chain("run-1", HISTORY)
    assert head == _chain("run-1", list(HISTORY))  # deterministic
    assert head == _chain_stored("run-1", STORED)  # the chain is over the stored form
    for i, e in enumerate(STORED):
        for m in _mutations(e):
            assert m != e
            tampered = [*STORED[:i], m, *STORED[i + 1 :]]
            assert _chain_stored("run-1", tampered) != head, (i, m)
            assert _read_back(m) in (m, None), (i, m)


def test_chain_hash_detects_removal_reordering_and_other_run() -> None:
    """Dropping or swapping events, or claiming them for another run, changes the chain head."""
    head = _chain("run-1", HISTORY)
    for i in range(len(HISTORY)):
        assert _chain("run-1", HISTORY[:i] + HISTORY[i + 1 :]) != head
    swapped = [HISTORY[1], HISTORY[0], *HISTORY[2:]]
    assert _chain("run-1", swapped) != head
    assert _chain("run-2", HISTORY) != head
    assert chain_hash("a", "run-1", HISTORY[0]) != chain_hash("b", "run-1", HISTORY[0])


@settings(max_examples=100, deadline=None)
@given(
    index=st.integers(min_value=0, max_value=len(HISTORY) - 1),
    key=st.text(min_size=1, max_size=8),
    value=st.none() | st.booleans() | st.integers() | st.text(max_size=10),
)
def test_chain_hash_detects_arbitrary_data_edits(index: int, key: str, value: Any) -> None:
    """Any edit to an event's data (set or replace a key) that changes the event changes the chain head;
    the edited event reads back exactly as stored."""
    e = STORED[index]
    m = {**e, "data": {**e["data"], key: value}}
    tampered = [*STORED[:index], m, *STORED[index + 1 :]]
    assert _read_back(m) == m
    if m == e:
        assert _chain_stored("run-1", tampered) == _chain("run-1", HISTORY)
    else:
        assert _chain_stored("run-1", tampered) != _chain("run-1", HISTORY)
