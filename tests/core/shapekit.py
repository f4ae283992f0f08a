"""Helpers for the pure-core tests of parallel and for-each steps: a `Run` that claims and reports the
attempt of any lane by its step key (tests/core/corekit.py drives the single top-level attempt)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from corekit import Run

from lockstep.core.commands import ClaimTask, DecideApproval, ReportFailure, ReportSuccess
from lockstep.core.events import Event
from lockstep.core.lanes import active_of, approval_of, attempts
from lockstep.core.paths import lane_of
from lockstep.core.state import Attempt
from lockstep.core.timeutil import iso

__all__ = ["LaneRun"]


class LaneRun(Run):
    """A run whose attempts are addressed by their step key."""

    def attempt(self, key: str) -> Attempt:
        a = active_of(self.s, lane_of(key))
        open_now = [x.step for x in attempts(self.s)]
        assert a is not None, f"no attempt of {key}: {open_now}"
        assert a.step == key, f"no attempt of {key}: {open_now}"
        return a

    def open_steps(self) -> list[str]:
        return sorted(a.step for a in attempts(self.s))

    def claim_step(self, key: str, worker: str = "w1") -> Attempt:
        a = self.attempt(key)
        self.send(ClaimTask(a.task_id, worker, iso(self.now + timedelta(milliseconds=a.timeout_ms))))
        return self.attempt(key)

    def ok(self, key: str, output: Any = None) -> list[Event]:
        a = self.attempt(key)
        if a.fencing is None:
            a = self.claim_step(key)
        assert a.fencing is not None
        return self.send(ReportSuccess(a.task_id, a.attempt, a.fencing, output))

    def bad(
        self, key: str, code: str = "Boom", retryable: bool = False, unexpected: bool = False
    ) -> list[Event]:
        a = self.attempt(key)
        if a.fencing is None:
            a = self.claim_step(key)
        assert a.fencing is not None
        failure = ReportFailure(
            a.task_id, a.attempt, a.fencing, code, f"{code} happened", retryable, unexpected
        )
        return self.send(failure)

    def decide_as(self, key: str, approver: str, decision: str = "approve") -> list[Event]:
        pending = approval_of(self.s, lane_of(key))
        assert pending is not None
        assert pending["step"] == key
        return self.send(DecideApproval(pending["request_id"], approver, decision, None, ("approver",), ()))
