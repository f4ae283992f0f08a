"""Stateful property tests: random command sequences against decide/evolve keep every core invariant.

The machine plays the outside world (workers, the timer scheduler, operators) with a mix of correct,
stale, duplicate and bogus commands, and checks after every step that the run is consistent.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

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
from lockstep.core.effects import CloseTask, CloseTimer, CreateTask, CreateTimer, effects_of
from lockstep.core.events import Event, chain_hash, chain_link
from lockstep.core.evolve import evolve, fold
from lockstep.core.explain import explain
from lockstep.core.limits import DEFAULT_SERVER_LIMITS
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


def _jsonish(s: RunState) -> dict[str, Any]:
    """to_json through real JSON text, so tuples, lists and non-JSON values would show."""
    return json.loads(json.dumps(s.to_json()))


def _evidence_full(s: RunState, task: str) -> bool:
    """The run already records as many stale reports as HISTORY_LIMITS allow (for this task or in all)."""
    limits = DEFAULT_SERVER_LIMITS
    return (
        s.ignored_by_task.get(task, 0) >= limits["max_ignored_results_per_attempt"]
        or s.ignored_results >= limits["max_ignored_results_per_run"]
    )


class CoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.d: Definition = DEFINITIONS["saga"]
        self.now = T0
        self.state: RunState | None = None
        self.events: list[Event] = []
        self.leases: list[tuple[str, int, int]] = []  # every (task, attempt, fencing) ever leased
        self.spent_timers: list[tuple[str, int]] = []  # fired or cancelled (key, generation)
        self.last_report: ReportSuccess | ReportFailure | None = None
        self.task_ids: set[str] = set()
        self.successes: Counter[tuple[str, int, bool]] = Counter()

    @property
    def s(self) -> RunState:
        assert self.state is not None
        return self.state

    # --- the one way commands reach the run ----------------------------------------------------------

    def send(self, command: Command) -> list[Event] | None:
        """decide + append; None if Rejected. Checks determinism, terminal stability and effects."""
        before = self.state
        before_json = before.to_json() if before is not None else None
        try:
            events = decide(before, command, self.now, self.d)
        except Rejected as exc:
            code = exc.code
        else:
            code = None
        if code is not None:
            with pytest.raises(Rejected) as again:  # deterministic also when refusing
                decide(before, command, self.now, self.d)
            assert again.value.code == code
            assert (before.to_json() if before is not None else None) == before_json
            return None
        again = decide(before, command, self.now, self.d)
        assert [e.to_json() for e in again] == [e.to_json() for e in events], "decide is not deterministic"
        assert (before.to_json() if before is not None else None) == before_json, "decide mutated state"

        state = before
        for e in events:
            assert e.seq == len(self.events) + 1, "seq must grow by exactly one, without gaps"
            state = evolve(state, e)
            self.events.append(e)
        self.state = state

        if before is not None and before.terminal:
            assert all(e.type == "ResultIgnored" for e in events), [e.type for e in events]
            assert self.s.status == before.status
            assert self.s.steps == before.steps
            assert self.s.output == before.output
            assert self.s.finished_at == before.finished_at

        for eff in effects_of(events):
            if isinstance(eff, CreateTask):
                assert eff.task_id not in self.task_ids, f"task id {eff.task_id} created twice"
                self.task_ids.add(eff.task_id)
        for e in events:
            if e.type == "ActivitySucceeded":
                k = (e.data.step, e.data.attempt, bool(e.data.compensation))
                self.successes[k] += 1
                assert self.successes[k] == 1, f"attempt {k} succeeded twice"
            elif e.type == "ActivityStarted":
                self.leases.append((e.data.task_id, e.data.attempt, e.data.fencing))
            elif e.type in ("TimerFired", "TimerCancelled"):
                self.spent_timers.append((e.data.key, e.data.generation))
        return events

    def _is_current(self, task: str, attempt: int, fencing: int) -> bool:
        a = self.s.active
        return (
            not self.s.terminal
            and a is not None
            and a.fencing is not None
            and (a.task_id, a.attempt, a.fencing) == (task, attempt, fencing)
        )

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
        current = self._is_current(task, attempt, fencing)
        bounded = _evidence_full(self.s, task)
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
        bounded = _evidence_full(before, self.last_report.task_id)
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
        current = self._is_current(task, attempt, fencing)
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
    def seq_is_contiguous(self) -> None:
        if self.state is None:
            return
        assert [e.seq for e in self.events] == list(range(1, len(self.events) + 1))
        assert self.s.seq == len(self.events)

    @invariant()
    def snapshot_equals_fold_of_events(self) -> None:
        if self.state is None:
            return
        folded = fold(self.events)
        assert folded is not None
        assert folded.to_json() == self.s.to_json()
        # the stored form of the events replays to the same state too
        stored = [Event.from_json(json.loads(json.dumps(e.to_json()))) for e in self.events]
        replayed = fold(stored)
        assert replayed is not None
        assert replayed.to_json() == self.s.to_json()

    @invariant()
    def snapshot_round_trips(self) -> None:
        if self.state is None:
            return
        data = _jsonish(self.s)
        back = RunState.from_json(data)
        assert back == self.s
        assert _jsonish(back) == data

    @invariant()
    def effects_match_state(self) -> None:
        """Open tasks/timers by the outbox are exactly the state's active attempt and armed timers."""
        if self.state is None:
            return
        open_tasks: set[str] = set()
        open_timers: set[tuple[str, int]] = set()
        for eff in effects_of(self.events):
            if isinstance(eff, CreateTask):
                open_tasks.add(eff.task_id)
            elif isinstance(eff, CloseTask):
                assert eff.task_id in open_tasks
                open_tasks.discard(eff.task_id)
            elif isinstance(eff, CreateTimer):
                open_timers.add((eff.key, eff.generation))
            elif isinstance(eff, CloseTimer):
                assert (eff.key, eff.generation) in open_timers
                open_timers.discard((eff.key, eff.generation))
        assert len(open_tasks) <= 1, f"more than one attempt in flight: {open_tasks}"
        assert open_tasks == ({self.s.active.task_id} if self.s.active else set())
        assert open_timers == {(t.key, t.generation) for t in self.s.timers.values()}

    @invariant()
    def status_is_consistent(self) -> None:
        if self.state is None:
            return
        s = self.s
        if s.terminal:
            assert s.active is None
            assert not s.timers
            assert s.finished_at is not None
            assert s.current_step is None
        else:
            # never stuck silently: something is in flight, a timer is armed, or a human is asked
            assert s.active is not None or s.timers or s.attention is not None, s.to_json()
        if s.status == "waiting":
            assert s.timers
            assert s.active is None
        if s.status == "failed":
            assert s.error is not None

    @invariant()
    def explain_matches_status(self) -> None:
        if self.state is None:
            return
        info = explain(self.s, self.now)
        if self.s.terminal:
            assert set(info.values()) == {None}
        else:
            assert info["wait_reason"]
            assert info["next_action"]
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
