"""The invariants of one run that every stateful machine over the pure core checks (the core machine in
tests/core/test_stateful.py, the repair machine in tests/repair/test_stateful_repair.py).

`RunMachine` is the machines' common base: it keeps the run's state and history, offers the one way a
command reaches the run (`decide_checked`, then `append`) with the checks every command must pass, and
the invariants hypothesis checks after every step. A machine adds its rules, its own per-command checks
and the invariants only it needs, calling `check_finished`, `check_not_stuck` and `check_explained`
for the parts of its status and explanation checks that all machines share.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from hypothesis.stateful import RuleBasedStateMachine, invariant

from lockstep.core.commands import Command, Rejected, ReportFailure, ReportSuccess
from lockstep.core.decide import decide
from lockstep.core.definition import Definition
from lockstep.core.effects import CloseTask, CloseTimer, CreateTask, CreateTimer, effects_of
from lockstep.core.events import Event
from lockstep.core.evolve import evolve, fold
from lockstep.core.explain import explain
from lockstep.core.lanes import approvals, attempt_of_task, attempts, attentions
from lockstep.core.limits import DEFAULT_SERVER_LIMITS
from lockstep.core.state import RunState

__all__ = [
    "RunMachine",
    "check_explained",
    "check_finished",
    "check_not_stuck",
    "evidence_full",
    "jsonish",
]


def jsonish(s: RunState) -> dict[str, Any]:
    """to_json through real JSON text, so tuples, lists and non-JSON values would show."""
    return dict(json.loads(json.dumps(s.to_json())))


def evidence_full(s: RunState, task: str) -> bool:
    """The run already records as many stale reports as HISTORY_LIMITS allow (for this task or in all)."""
    limits = DEFAULT_SERVER_LIMITS
    return (
        s.ignored_by_task.get(task, 0) >= limits["max_ignored_results_per_attempt"]
        or s.ignored_results >= limits["max_ignored_results_per_run"]
    )


def check_finished(s: RunState) -> None:
    """A terminal run holds nothing open: no attempt, no timer, no pause, no current step, no lane of a
    parallel or for-each step still running, no approval pending; it has ended."""
    assert s.active is None
    assert not list(attempts(s))
    assert not s.timers
    assert s.paused is None, "a run cannot end while paused"
    assert s.finished_at is not None
    assert s.current_step is None
    assert not approvals(s)
    assert not s.children, "a run ends only after the child runs it waited for"
    assert all(not ln.open for ln in s.lanes.values()), {k: v.status for k, v in s.lanes.items()}


def check_not_stuck(s: RunState) -> None:
    """A live run is never stuck silently: something is in flight (in any lane, a child run too), a timer
    is armed, a human is asked (attention) or an operator paused it; a waiting run waits on a timer or
    a child run, with no attempt."""
    busy = bool(list(attempts(s)))
    waits = bool(s.timers or s.children)
    assert busy or waits or attentions(s) or s.paused is not None, ("never stuck silently", s.to_json())
    if s.status == "waiting":
        assert waits
        assert not busy


def check_explained(s: RunState, now: datetime) -> dict[str, Any]:
    """explain() says nothing about a finished run, and why it waits and what comes next for a live one;
    returns the explanation for the machine's own checks."""
    info = explain(s, now)
    if s.terminal:
        assert set(info.values()) == {None}
    else:
        assert info["wait_reason"]
        assert info["next_action"]
    return dict(info)


class RunMachine(RuleBasedStateMachine):
    """One run driven by commands; subclasses set `now` and send every command through `decide_checked`
    and `append`."""

    def __init__(self) -> None:
        super().__init__()
        self.state: RunState | None = None
        self.events: list[Event] = []
        self.leases: list[tuple[str, int, int]] = []  # every (task, attempt, fencing) ever leased
        self.spent_timers: list[tuple[str, int]] = []  # fired or cancelled (key, generation)
        self.task_ids: set[str] = set()  # every task id an effect created
        self.last_report: ReportSuccess | ReportFailure | None = None

    @property
    def s(self) -> RunState:
        assert self.state is not None
        return self.state

    def decide_checked(self, command: Command, now: datetime, d: Definition) -> list[Event] | Rejected:
        """decide() on the current state, twice: the same events or the same refusal (decide is
        deterministic), and the state as it was (decide never mutates it)."""
        before = self.state
        before_json = before.to_json() if before is not None else None
        refusal: Rejected | None = None
        try:
            events = decide(before, command, now, d)
        except Rejected as exc:
            refusal = exc
        if refusal is not None:
            with pytest.raises(Rejected) as again:  # deterministic also when refusing
                decide(before, command, now, d)
            assert again.value.code == refusal.code
            assert (before.to_json() if before is not None else None) == before_json
            return refusal
        again_events = decide(before, command, now, d)
        assert [e.to_json() for e in again_events] == [e.to_json() for e in events], (
            "decide is not deterministic"
        )
        assert (before.to_json() if before is not None else None) == before_json, "decide mutated state"
        return events

    def append(self, events: list[Event]) -> list[str]:
        """Fold `events` into the run and its history, checking what holds for every command: each event
        takes the next seq; a finished run only records late results, and stays as it ended; no task id
        is created twice. Returns the task ids the events created."""
        before = self.state
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

        created: list[str] = []
        for eff in effects_of(events):
            if isinstance(eff, CreateTask):
                assert eff.task_id not in self.task_ids, f"task id {eff.task_id} created twice"
                self.task_ids.add(eff.task_id)
                created.append(eff.task_id)
        for e in events:
            if e.type == "ActivityStarted":
                self.leases.append((e.data.task_id, e.data.attempt, e.data.fencing))
            elif e.type in ("TimerFired", "TimerCancelled"):
                self.spent_timers.append((e.data.key, e.data.generation))
        return created

    def is_current(self, task: str, attempt: int, fencing: int) -> bool:
        """(task, attempt, fencing) is a leased attempt of the live run: a report that is applied."""
        a = attempt_of_task(self.s, task)
        return (
            not self.s.terminal
            and a is not None
            and a.fencing is not None
            and (a.task_id, a.attempt, a.fencing) == (task, attempt, fencing)
        )

    # --- invariants, after every step -----------------------------------------------------------------

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
        data = jsonish(self.s)
        back = RunState.from_json(data)
        assert back == self.s
        assert jsonish(back) == data

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
        if not self.s.lanes:  # without parallel or for-each steps, one attempt at a time
            assert len(open_tasks) <= 1, f"more than one attempt in flight: {open_tasks}"
        assert open_tasks == {a.task_id for a in attempts(self.s)}
        assert open_timers == {(t.key, t.generation) for t in self.s.timers.values()}
