"""What one committed transition moves: a handler per kind of event, over the state before the
transition (where every duration's start is) and after it. Dispatched by the event's record type, so
an event no metric is about costs one dictionary lookup."""

from __future__ import annotations

from collections.abc import Callable

from ...core.events import (
    ActivityCancelled,
    ActivityDeadLettered,
    ActivityFailed,
    ActivityStarted,
    ActivitySucceeded,
    ActivityTimedOut,
    ApprovalCancelled,
    ApprovalDecisionRecorded,
    ApprovalGranted,
    ApprovalRejected,
    ApprovalTimedOut,
    Event,
    EventData,
    NeedsAttention,
    ResultIgnored,
    RunCancelled,
    RunCompleted,
    RunFailed,
    TimerFired,
)
from ...core.lanes import approval_at, attempt_of_task
from ...core.state import Attempt, RunState
from ...core.timeutil import parse_iso
from .families import Families
from .labels import ATTENTION_REASONS, ENGINE_ERROR_CODES, OTHER

__all__ = ["HANDLERS", "Transition", "seconds"]

_ATTEMPT_OUTCOMES: dict[type[EventData], str] = {
    ActivitySucceeded: "succeeded",
    ActivityFailed: "failed",
    ActivityTimedOut: "timed_out",
    ActivityCancelled: "cancelled",
}
_APPROVAL_OUTCOMES: dict[type[EventData], str] = {
    ApprovalGranted: "granted",
    ApprovalRejected: "rejected",
    ApprovalTimedOut: "timed_out",
    ApprovalCancelled: "cancelled",
}
_ENDS: dict[type[EventData], str] = {
    RunCompleted: "completed",
    RunFailed: "failed",
    RunCancelled: "cancelled",
}


def seconds(start: str, end: str) -> float:
    return max(0.0, (parse_iso(end) - parse_iso(start)).total_seconds())


class Transition:
    """One observer call: the metrics, the states around it, and the labels it resolves once."""

    __slots__ = ("_definition", "activity", "after", "before", "m", "t")

    def __init__(self, m: Families, before: RunState | None, after: RunState) -> None:
        self.m, self.before, self.after, self.t = m, before, after, after.tenant
        self.activity = ""  # of the last attempt event seen (what a dead letter that follows is about)
        self._definition: str | None = None

    @property
    def definition(self) -> str:
        if self._definition is None:
            self._definition = self.m.definition_label(self.t, str(self.after.definition.get("name")))
        return self._definition

    def attempt(self, task_id: str) -> Attempt | None:
        """The attempt `task_id` as it was before this transition (None if it began in it)."""
        return attempt_of_task(self.before, task_id) if self.before is not None else None

    # --- attempts ----------------------------------------------------------------------------------
    def started(self, e: Event) -> None:
        d = e.data
        if not isinstance(d, ActivityStarted):
            return
        a = self.attempt(d.task_id)
        known = a or attempt_of_task(self.after, d.task_id)  # else scheduled in this command (eager)
        name = known.activity if known is not None else d.step
        self.activity = activity = self.m.activity_label(self.t, name)
        self.m.attempts(self.t, activity).inc()
        ready = a.scheduled_at if a is not None else e.at  # scheduled now: no time in the queue
        self.m.queue_delay(self.t, activity).observe(seconds(ready, e.at))

    def ended(self, e: Event) -> None:
        """An attempt's outcome: succeeded, failed, timed out (lease expired) or withdrawn."""
        d = e.data
        if not isinstance(d, ActivitySucceeded | ActivityFailed | ActivityTimedOut | ActivityCancelled):
            return
        a = self.attempt(d.task_id)
        if a is not None:
            name = a.activity
        else:
            recorded = getattr(d, "activity", None)
            name = recorded if isinstance(recorded, str) else d.step  # not written by the first builds
        m, t = self.m, self.t
        self.activity = activity = m.activity_label(t, name)
        if a is not None and a.started_at is not None:
            m.attempt_duration(t, activity, _ATTEMPT_OUTCOMES[type(d)]).observe(seconds(a.started_at, e.at))
        if isinstance(d, ActivitySucceeded):
            m.completions(t, activity).inc()
            if d.compensation:
                m.compensations(t, self.definition, "succeeded").inc()
        elif isinstance(d, ActivityFailed | ActivityTimedOut):
            m.failures(t, activity, self._code(d)).inc()
            if isinstance(d, ActivityTimedOut):
                m.lease_expiries(t, activity).inc()
            if d.will_retry:
                m.steps.retried(self.before or self.after, d.step)

    def _code(self, d: ActivityFailed | ActivityTimedOut) -> str:
        code = str(d.error.get("code"))  # a stored error may be sealed whole: then it has no code
        if code in ENGINE_ERROR_CODES:
            return code
        if code in self.m.declared_codes(self.after):
            return self.m.code_label(self.t, code)
        return OTHER

    def dead_lettered(self, e: Event) -> None:
        d = e.data
        if not isinstance(d, ActivityDeadLettered):
            return
        self.activity = self.m.activity_label(self.t, d.activity)

    # --- the run -----------------------------------------------------------------------------------
    def attention(self, e: Event) -> None:
        d = e.data
        if not isinstance(d, NeedsAttention):
            return
        m, t = self.m, self.t
        m.attention(t, self.definition, d.code if d.code in ATTENTION_REASONS else OTHER).inc()
        if d.code == "dead_letter":
            m.dead_letters(t, self.activity or m.activity_label(t, d.step)).inc()
        elif d.code in ("compensation_failed", "compensation_input_error"):
            m.compensations(t, self.definition, "failed").inc()

    def timer_fired(self, e: Event) -> None:
        d = e.data
        if not isinstance(d, TimerFired):
            return
        if isinstance(d.fire_at, str):  # not recorded by the first builds
            self.m.timer_lag(self.t).observe(seconds(d.fire_at, e.at))

    def ignored(self, e: Event) -> None:
        self.m.ignored(self.t).inc()

    def run_ended(self, e: Event) -> None:
        status = _ENDS[type(e.data)]
        self.m.runs_finished(self.t, status).inc()
        self.m.run_duration(self.t, self.definition, status).observe(seconds(self.after.started_at, e.at))

    # --- approvals ---------------------------------------------------------------------------------
    def decision(self, e: Event) -> None:
        d = e.data
        if not isinstance(d, ApprovalDecisionRecorded):
            return
        decision = d.decision if d.decision in ("approve", "reject") else OTHER
        self.m.decisions(self.t, self.definition, decision).inc()

    def approval_settled(self, e: Event) -> None:
        d = e.data
        if not isinstance(d, ApprovalGranted | ApprovalRejected | ApprovalTimedOut | ApprovalCancelled):
            return
        pending = approval_at(self.before, d.step) if self.before is not None else None
        if pending is not None and pending.get("request_id") == d.request_id:
            waited = seconds(str(pending["requested_at"]), e.at)
            self.m.approval_duration(self.t, self.definition, _APPROVAL_OUTCOMES[type(d)]).observe(waited)


HANDLERS: dict[type[EventData], Callable[[Transition, Event], None]] = {
    ActivityStarted: Transition.started,
    ActivitySucceeded: Transition.ended,
    ActivityFailed: Transition.ended,
    ActivityTimedOut: Transition.ended,
    ActivityCancelled: Transition.ended,
    ActivityDeadLettered: Transition.dead_lettered,
    NeedsAttention: Transition.attention,
    TimerFired: Transition.timer_fired,
    ResultIgnored: Transition.ignored,
    RunCompleted: Transition.run_ended,
    RunFailed: Transition.run_ended,
    RunCancelled: Transition.run_ended,
    ApprovalDecisionRecorded: Transition.decision,
    ApprovalGranted: Transition.approval_settled,
    ApprovalRejected: Transition.approval_settled,
    ApprovalTimedOut: Transition.approval_settled,
    ApprovalCancelled: Transition.approval_settled,
}
