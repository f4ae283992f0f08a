"""Shared helpers for the pure-core tests: parse YAML definitions and drive one run through decide/evolve.

`Run` keeps the whole history and checks, after every accepted command, the invariants that must hold
for any history (fold == incremental state, contiguous seq). Tests read `run.state` and `run.events`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from lockstep.core.commands import (
    CancelRun,
    ClaimTask,
    Command,
    ExpireLease,
    FireTimer,
    ReportFailure,
    ReportSuccess,
    StartRun,
)
from lockstep.core.decide import decide
from lockstep.core.definition import Definition, parse_definition
from lockstep.core.events import Event
from lockstep.core.evolve import evolve, fold
from lockstep.core.state import RunState
from lockstep.core.timeutil import iso, parse_iso

T0 = datetime(2024, 3, 1, 12, 0, 0, tzinfo=UTC)

EXAMPLE_YAML = """
name: order-fulfilment
steps:
  - id: reserve
    activity: inventory.reserve
    input: {sku: "${input.sku}", qty: 2}
    timeout: 30s
    retry:
      max_attempts: 5
      initial_interval: 1s
      backoff: 2.0
      max_interval: 1m
      non_retryable: [OutOfStock]
    idempotency_key: "reserve-${input.order_id}"
    compensate: {activity: inventory.release, input: {sku: "${input.sku}"}}
  - id: route
    choice:
      - {if: "input.qty > 10", next: cooling-off}
      - {else: ship}
  - id: cooling-off
    wait: 2s
  - id: ship
    activity: shipping.create
    timeout: 10s
    next: end
  - id: rejected
    fail: {error: Rejected, message: "too many"}
"""


def load(text: str) -> Definition:
    """Parse a YAML definition document."""
    return parse_definition(yaml.safe_load(text))


def example() -> Definition:
    return load(EXAMPLE_YAML)


def types(events: list[Event]) -> list[str]:
    return [e.type for e in events]


class Run:
    """One run driven by hand: every accepted command's events are appended and folded."""

    def __init__(
        self,
        definition: Definition,
        input: Any = None,
        *,
        now: datetime = T0,
        run_id: str = "r1",
        tenant: str = "t1",
        version: int = 1,
        actor: str | None = None,
    ) -> None:
        self.d = definition
        self.now = now
        self.events: list[Event] = []
        self.state: RunState | None = None
        self.fencing: int | None = None
        self.send(StartRun(run_id=run_id, tenant=tenant, version=version, input=input, actor=actor))

    @property
    def s(self) -> RunState:
        assert self.state is not None
        return self.state

    def decide(self, command: Command) -> list[Event]:
        """decide() without appending (raises Rejected like decide)."""
        return decide(self.state, command, self.now, self.d)

    def send(self, command: Command) -> list[Event]:
        new = decide(self.state, command, self.now, self.d)
        for e in new:
            assert e.seq == len(self.events) + 1
            self.state = evolve(self.state, e)
            self.events.append(e)
        folded = fold(self.events)
        if self.state is not None:
            assert folded is not None
            assert folded.to_json() == self.state.to_json()
        return new

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    # --- worker-side shortcuts for the active attempt ------------------------------------------------

    def claim(self, worker: str = "w1") -> list[Event]:
        a = self.s.active
        assert a is not None, "no active attempt to claim"
        deadline = iso(self.now + timedelta(milliseconds=a.timeout_ms))
        events = self.send(ClaimTask(task_id=a.task_id, worker=worker, deadline=deadline))
        self.fencing = self.s.active.fencing if self.s.active else None
        return events

    def _current(self) -> tuple[str, int, int]:
        a = self.s.active
        assert a is not None, "no active attempt"
        assert a.fencing is not None, "the active attempt is not claimed"
        return a.task_id, a.attempt, a.fencing

    def succeed(self, output: Any = None) -> list[Event]:
        task, attempt, fencing = self._current()
        return self.send(ReportSuccess(task_id=task, attempt=attempt, fencing=fencing, output=output))

    def fail(
        self,
        code: str = "Boom",
        message: str = "it broke",
        *,
        retryable: bool = True,
        unexpected: bool = False,
    ) -> list[Event]:
        task, attempt, fencing = self._current()
        return self.send(
            ReportFailure(
                task_id=task,
                attempt=attempt,
                fencing=fencing,
                code=code,
                message=message,
                retryable=retryable,
                unexpected=unexpected,
            )
        )

    def expire(self, reason: str = "lease expired") -> list[Event]:
        task, attempt, fencing = self._current()
        return self.send(ExpireLease(task_id=task, attempt=attempt, fencing=fencing, reason=reason))

    def run_activity(self, output: Any = None) -> list[Event]:
        """Claim and succeed the active attempt."""
        return self.claim() + self.succeed(output)

    def fire(self, key: str | None = None) -> list[Event]:
        """Fire the given armed timer (or the only one), moving the clock to its fire_at if that is
        still ahead: like the scheduler, which fires due timers only (an early FireTimer is not_due)."""
        if key is None:
            assert len(self.s.timers) == 1, f"expected one timer, got {list(self.s.timers)}"
            key = next(iter(self.s.timers))
        t = self.s.timers[key]
        self.now = max(self.now, parse_iso(t.fire_at))
        return self.send(FireTimer(key=key, generation=t.generation))

    def cancel(self, reason: str = "customer asked", actor: str | None = "ops") -> list[Event]:
        return self.send(CancelRun(reason=reason, actor=actor))
