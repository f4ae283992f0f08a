"""Shared definitions and helpers for the operator-repair tests (pure core, service and CLI/API)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from lockstep.core.commands import (
    ClaimTask,
    Command,
    DecideApproval,
    ExpireLease,
    FireTimer,
    ReportFailure,
    ReportSuccess,
    StartRun,
)
from lockstep.core.decide import decide
from lockstep.core.definition import Definition, parse_definition
from lockstep.core.effects import CloseTask, CreateTask, effects_of
from lockstep.core.events import Event
from lockstep.core.evolve import evolve, fold
from lockstep.core.state import RunState
from lockstep.core.timeutil import iso, parse_iso

T0 = datetime(2025, 2, 1, 9, 0, 0, tzinfo=UTC)

# Version 1 of the process the property tests drive: every kind of step an operator may have to repair.
# reserve: compensable, only admins may skip it; charge: at most once (unknown outcomes), not skippable;
# cool: a skippable wait; approve: a skippable approval; ship: dead-letters when exhausted, skippable.
V1: dict[str, Any] = yaml.safe_load(
    """
name: rep
input_schema:
  type: object
  required: [sku]
  properties:
    sku: {type: string}
    qty: {type: integer, minimum: 1}
    customer: {type: string}
steps:
  - id: reserve
    activity: inventory.reserve
    input: {sku: "${input.sku}"}
    timeout: 30s
    retry: {max_attempts: 2, initial_interval: 1s}
    compensate: {activity: inventory.release, input: {sku: "${input.sku}"}, retry: {max_attempts: 2}}
    skip_policy: {roles: [admin]}
  - id: charge
    activity: payments.charge
    delivery: at_most_once
    timeout: 30s
    retry: {max_attempts: 2}
    compensate: {activity: payments.refund}
  - id: cool
    wait: 5s
    skippable: true
  - id: approve
    approval:
      approvers: {users: [alice]}
      timeout: 1h
      on_timeout: reject
      on_reject: fail
    skippable: true
  - id: ship
    activity: shipping.create
    input: {sku: "${input.sku}"}
    timeout: 10s
    retry: {max_attempts: 2, initial_interval: 2s, on_exhausted: dead_letter}
    skippable: true
"""
)


def _v2() -> dict[str, Any]:
    """Compatible: a `notify` activity is added between the approval and shipping."""
    doc = copy.deepcopy(V1)
    steps = doc["steps"]
    at = [s["id"] for s in steps].index("ship")
    steps.insert(
        at, {"id": "notify", "activity": "email.send", "timeout": "10s", "retry": {"max_attempts": 1}}
    )
    return doc


def _v3() -> dict[str, Any]:
    """Incompatible for most runs: input must name a customer, and reserve can no longer be undone."""
    doc = copy.deepcopy(V1)
    doc["input_schema"]["required"] = ["sku", "customer"]
    del doc["steps"][0]["compensate"]
    return doc


def _v4() -> dict[str, Any]:
    """A rename: ship is called dispatch (a migration needs --map ship=dispatch)."""
    doc = copy.deepcopy(V1)
    doc["steps"][-1]["id"] = "dispatch"
    return doc


DOCS: dict[int, dict[str, Any]] = {1: V1, 2: _v2(), 3: _v3(), 4: _v4()}
VERSIONS: dict[int, Definition] = {v: parse_definition(doc) for v, doc in DOCS.items()}


class Drive:
    """One run driven by hand through the pure core, on whichever version the run is on now."""

    def __init__(self, input: Any = None, version: int = 1) -> None:
        self.now = T0
        self.events: list[Event] = []
        self.state: RunState | None = None
        self.send(StartRun("r1", "acme", version, {"sku": "S-1"} if input is None else input))

    @property
    def s(self) -> RunState:
        assert self.state is not None
        return self.state

    def send(self, command: Command) -> list[Event]:
        """decide + evolve (raises Rejected like decide); checks fold == state after every command."""
        version = command.version if isinstance(command, StartRun) else self.s.definition["version"]
        new = decide(self.state, command, self.now, VERSIONS[version])
        for e in new:
            self.state = evolve(self.state, e)
            self.events.append(e)
        folded = fold(self.events)
        assert folded is not None
        assert folded.to_json() == self.s.to_json()
        return new

    def types(self, last: int | None = None) -> list[str]:
        kinds = [e.type for e in self.events]
        return kinds[-last:] if last else kinds

    def open_tasks(self) -> set[str]:
        """Tasks created and not closed, according to the outbox effects of the whole history."""
        out: set[str] = set()
        for eff in effects_of(self.events):
            if isinstance(eff, CreateTask):
                out.add(eff.task_id)
            elif isinstance(eff, CloseTask):
                out.discard(eff.task_id)
        return out

    def claim(self) -> None:
        a = self.s.active
        assert a is not None
        self.send(ClaimTask(a.task_id, "w1", iso(self.now + timedelta(milliseconds=a.timeout_ms))))

    def succeed(self, output: Any = None) -> None:
        a = self.s.active
        assert a is not None
        assert a.fencing is not None
        self.send(ReportSuccess(a.task_id, a.attempt, a.fencing, {} if output is None else output))

    def run_activity(self, output: Any = None) -> None:
        self.claim()
        self.succeed(output)

    def fail(self, *, retryable: bool = True, unexpected: bool = False) -> None:
        a = self.s.active
        assert a is not None
        assert a.fencing is not None
        self.send(ReportFailure(a.task_id, a.attempt, a.fencing, "Boom", "it broke", retryable, unexpected))

    def expire(self) -> None:
        a = self.s.active
        assert a is not None
        assert a.fencing is not None
        self.send(ExpireLease(a.task_id, a.attempt, a.fencing, "lease expired"))

    def fire(self, key: str) -> None:
        t = self.s.timers[key]
        self.now = max(self.now, parse_iso(t.fire_at))
        self.send(FireTimer(key, t.generation))

    def approve(self) -> None:
        a = self.s.approval
        assert a is not None
        self.send(DecideApproval(a["request_id"], "alice", "approve", None, ("approver",), ()))

    def to_approval(self) -> None:
        """reserve and charge succeed, the cool-off wait fires: the run waits for approval."""
        self.run_activity()
        self.run_activity({"charged": 1})
        self.fire("wait:cool")
        assert self.s.approval is not None
