"""This process's counters and histograms, fed by the transitions it commits (the kernel's observers see
the state before, the state after and the events of each one, after its commit).

A duration is measured once, by the process that commits the event ending it: its start is read from
the state before (a step visit's `entered_at`, an attempt's lease, an approval's request, the run's
start) and its end is the event's `at`. So a step that began in one process and ended in another, days
later, is one observation, and processes that only read never count anything. Counters are per process:
Prometheus scrapes every process (`serve`'s /metrics; `worker` and `scheduler --metrics-port`) and
`sum by (...)` adds them up (docs/operations.md, "Metrics").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

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
    NeedsAttention,
    ResultIgnored,
    RunCancelled,
    RunCompleted,
    RunFailed,
    TimerFired,
)
from ...core.state import STEP_OPEN, Attempt, RunState
from ...core.timeutil import parse_iso
from ...store import ObserveTx
from ..port import KernelPort
from ..tracing.operator import OPERATOR_SPANS
from .gauges import DatabaseCollector
from .labels import ATTENTION_REASONS, ENGINE_ERROR_CODES, OTHER, DeclaredCodes, FirstSeen
from .steps import StepSeries

__all__ = ["FAST_BUCKETS", "LONG_BUCKETS", "OPERATOR_COMMANDS", "Metrics"]

# Queue delays and attempts: milliseconds to half an hour.
FAST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)
# Approvals and whole runs: a second to a month.
LONG_BUCKETS = (1, 10, 60, 300, 900, 3600, 14400, 43200, 86400, 259200, 604800, 2592000)
# An operator's command, by the event it records: the `command` label (the CLI's command names).
OPERATOR_COMMANDS = {kind: name.removeprefix("operator ") for kind, name in OPERATOR_SPANS.items()}
_APPROVAL_OUTCOMES = {
    ApprovalGranted: "granted",
    ApprovalRejected: "rejected",
    ApprovalTimedOut: "timed_out",
    ApprovalCancelled: "cancelled",
}
_ATTEMPT_OUTCOMES = {
    ActivitySucceeded: "succeeded",
    ActivityFailed: "failed",
    ActivityTimedOut: "timed_out",
    ActivityCancelled: "cancelled",
}
REFUSAL_CODES = 200  # distinct problem codes counted by name (the package has fewer)
_ENDS = {RunCompleted: "completed", RunFailed: "failed", RunCancelled: "cancelled"}


def _seconds(start: str, end: str) -> float:
    return max(0.0, (parse_iso(end) - parse_iso(start)).total_seconds())


class _Exposition(Collector):
    """What a /metrics answer shows: this process's series, and the database's gauges if asked."""

    def __init__(self, parts: tuple[Collector, ...]) -> None:
        self.parts = parts

    def collect(self) -> Iterable[Metric]:
        return self._all()

    def _all(self) -> Iterator[Metric]:
        for part in self.parts:
            yield from part.collect()


class Metrics:
    """A registry per Service (tests create many; the global registry would collide)."""

    def __init__(self, kernel: KernelPort[ObserveTx]) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # `_created` series only add noise
        limits = kernel.server_limits
        self.registry = CollectorRegistry()
        self.activity_label = FirstSeen(limits["max_metric_activities"])
        self.code_label = FirstSeen(limits["max_metric_error_codes"])
        self.definition_label = FirstSeen(limits["max_metric_definitions"])
        self.declared_codes = DeclaredCodes(kernel)
        self.refusal_code = FirstSeen(REFUSAL_CODES)
        self.steps = StepSeries(self.registry, limits, self.definition_label)
        self.database = DatabaseCollector(
            kernel, self.activity_label, self.definition_label, self.steps.steps
        )
        r = self.registry
        activity = ["tenant", "activity"]
        per_definition = ["tenant", "definition"]
        self.attempts = Counter(
            "lockstep_activity_attempts", "Activity attempts started", activity, registry=r
        )
        self.completions = Counter(
            "lockstep_activity_completions",
            "Activity attempts that succeeded (each completes its step, or its step's compensation)",
            activity,
            registry=r,
        )
        self.failures = Counter(
            "lockstep_activity_failures",
            "Activity attempts failed or timed out",
            [*activity, "code"],
            registry=r,
        )
        self.lease_expiries = Counter(
            "lockstep_lease_expiries", "Leases that expired (worker lost or too slow)", activity, registry=r
        )
        self.dead_letters = Counter(
            "lockstep_dead_letters",
            "Steps that went to the dead-letter state (no worker took the task in time, or retries "
            "exhausted under on_exhausted: dead_letter)",
            activity,
            registry=r,
        )
        self.ignored = Counter(
            "lockstep_results_ignored",
            "Late or duplicate results recorded as evidence",
            ["tenant"],
            registry=r,
        )
        self.runs_finished = Counter(
            "lockstep_runs_finished", "Runs that reached a terminal status", ["tenant", "status"], registry=r
        )
        self.compensations = Counter(
            "lockstep_compensations",
            "Compensations that ended: succeeded, or failed for good (the run waits for an operator)",
            [*per_definition, "outcome"],
            registry=r,
        )
        self.attention = Counter(
            "lockstep_needs_attention",
            "Runs that began waiting for a person, by reason (dead_letter, outcome_unknown, "
            "compensation_failed, compensation_input_error)",
            [*per_definition, "reason"],
            registry=r,
        )
        self.operator_commands = Counter(
            "lockstep_operator_commands",
            "Operators' commands recorded in runs' histories (retry, pause, skip, cancel, ...)",
            ["tenant", "command"],
            registry=r,
        )
        self.decisions = Counter(
            "lockstep_approval_decisions",
            "Approvers' decisions (approve or reject) recorded",
            [*per_definition, "decision"],
            registry=r,
        )
        self.refusals = Counter(
            "lockstep_refusals",
            "Requests refused by the API with 403 or 429, by problem code",
            ["tenant", "status", "code"],
            registry=r,
        )
        self.timer_lag = Histogram(
            "lockstep_timer_fire_lag_seconds",
            "Delay between fire_at and firing",
            ["tenant"],
            registry=r,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
        )
        self.queue_delay = Histogram(
            "lockstep_queue_delay_seconds",
            "From an attempt's task becoming ready to a worker leasing it",
            activity,
            registry=r,
            buckets=FAST_BUCKETS,
        )
        self.attempt_duration = Histogram(
            "lockstep_attempt_duration_seconds",
            "From an attempt's lease to its outcome (succeeded, failed, timed_out, cancelled)",
            [*activity, "outcome"],
            registry=r,
            buckets=FAST_BUCKETS,
        )
        self.approval_duration = Histogram(
            "lockstep_approval_duration_seconds",
            "Time in approval: from the request to its outcome (granted, rejected, timed_out, cancelled)",
            [*per_definition, "outcome"],
            registry=r,
            buckets=LONG_BUCKETS,
        )
        self.run_duration = Histogram(
            "lockstep_run_duration_seconds",
            "From a run's start to its end, by terminal status",
            [*per_definition, "status"],
            registry=r,
            buckets=LONG_BUCKETS,
        )
        kernel.observers.append(self.observe)

    def exposition(self, *, database: bool = True) -> Collector:
        """This process's series, with the database's gauges unless `database` is False."""
        return _Exposition((self.registry, self.database) if database else (self.registry,))

    def refused(self, tenant: str | None, status: int, code: str) -> None:
        """A request the API refused with 403 or 429. Codes are the package's own literals (about a
        hundred, api/codes.py); the bound only guards against a code built from input by mistake."""
        self.refusals.labels(tenant or "", str(status), self.refusal_code("", code)).inc()

    # --- the transitions ---------------------------------------------------------------------------
    def observe(self, before: RunState | None, after: RunState, events: list[Event]) -> None:
        if not events:
            return
        t = after.tenant
        defn = self.definition_label(t, str(after.definition.get("name")))
        activity = ""  # of the last attempt event seen (what a dead letter that follows it is about)
        for e in events:
            d = e.data
            if isinstance(d, ActivityStarted):
                a = _attempt(before, d.task_id)
                if a is None and after.active is not None and after.active.task_id == d.task_id:
                    name = after.active.activity  # scheduled in this same command (an eager lease)
                else:
                    name = a.activity if a is not None else d.step
                activity = self.activity_label(t, name)
                self.attempts.labels(t, activity).inc()
                ready = a.scheduled_at if a is not None else e.at
                self.queue_delay.labels(t, activity).observe(_seconds(ready, e.at))
            elif isinstance(d, ActivitySucceeded | ActivityFailed | ActivityTimedOut | ActivityCancelled):
                a = _attempt(before, d.task_id)
                activity = self._activity(t, a, d)
                if a is not None and a.started_at is not None:
                    outcome = _ATTEMPT_OUTCOMES[type(d)]
                    self.attempt_duration.labels(t, activity, outcome).observe(_seconds(a.started_at, e.at))
                if isinstance(d, ActivitySucceeded):
                    self.completions.labels(t, activity).inc()
                    if d.compensation:
                        self.compensations.labels(t, defn, "succeeded").inc()
                elif isinstance(d, ActivityFailed | ActivityTimedOut):
                    self.failures.labels(t, activity, self._code(after, d)).inc()
                    if isinstance(d, ActivityTimedOut):
                        self.lease_expiries.labels(t, activity).inc()
                    if d.will_retry:
                        self.steps.retried(before or after, d.step)
            elif isinstance(d, ActivityDeadLettered):
                activity = self.activity_label(t, d.activity)
            elif isinstance(d, NeedsAttention):
                reason = d.code if d.code in ATTENTION_REASONS else OTHER
                self.attention.labels(t, defn, reason).inc()
                if d.code == "dead_letter":
                    self.dead_letters.labels(t, activity or self.activity_label(t, d.step)).inc()
                elif d.code in ("compensation_failed", "compensation_input_error"):
                    self.compensations.labels(t, defn, "failed").inc()
            elif isinstance(d, TimerFired):
                if isinstance(d.fire_at, str):  # not recorded by the first builds
                    self.timer_lag.labels(t).observe(_seconds(d.fire_at, e.at))
            elif isinstance(d, ApprovalDecisionRecorded):
                decision = d.decision if d.decision in ("approve", "reject") else OTHER
                self.decisions.labels(t, defn, decision).inc()
            elif isinstance(d, ApprovalGranted | ApprovalRejected | ApprovalTimedOut | ApprovalCancelled):
                pending = before.approval if before is not None else None
                if pending is not None and pending.get("request_id") == d.request_id:
                    waited = _seconds(str(pending["requested_at"]), e.at)
                    self.approval_duration.labels(t, defn, _APPROVAL_OUTCOMES[type(d)]).observe(waited)
            elif isinstance(d, ResultIgnored):
                self.ignored.labels(t).inc()
            elif isinstance(d, RunCompleted | RunFailed | RunCancelled):
                status = _ENDS[type(d)]
                self.runs_finished.labels(t, status).inc()
                self.run_duration.labels(t, defn, status).observe(_seconds(after.started_at, e.at))
            command = OPERATOR_COMMANDS.get(d.type)
            if command is not None:
                self.operator_commands.labels(t, command).inc()
        if before is not None:
            self._visits(before, after, events)

    def _visits(self, before: RunState, after: RunState, events: list[Event]) -> None:
        """The step visits this transition ended: a step that was open (entered at `entered_at`) and is
        now closed, gone (a migration), entered again, or cut short by the run's end. A command's events
        share their time, so the visit ends at the last event's."""
        ending = after.terminal and not before.terminal
        touched: set[str] = set(before.steps) if ending else set()
        if not ending:
            for e in events:
                step = getattr(e.data, "step", None)
                if isinstance(step, str):
                    touched.add(step)
        at = events[-1].at
        for sid in touched:
            b = before.steps.get(sid)
            if b is None or b.status not in STEP_OPEN or b.entered_at is None:
                continue
            a = after.steps.get(sid)
            if not ending and a is not None and a.status in STEP_OPEN and a.entered_seq == b.entered_seq:
                continue  # still the same visit
            self.steps.visit_ended(before, sid, _seconds(b.entered_at, at))

    def _activity(
        self,
        tenant: str,
        a: Attempt | None,
        d: ActivitySucceeded | ActivityFailed | ActivityTimedOut | ActivityCancelled,
    ) -> str:
        if a is not None:
            name = a.activity
        else:
            recorded = getattr(d, "activity", None)
            name = recorded if isinstance(recorded, str) else d.step  # not written by the first builds
        return self.activity_label(tenant, name)

    def _code(self, state: RunState, d: ActivityFailed | ActivityTimedOut) -> str:
        code = str(d.error.get("code"))  # a stored error may be sealed whole: then it has no code
        if code in ENGINE_ERROR_CODES:
            return code
        if code in self.declared_codes(state):
            return self.code_label(state.tenant, code)
        return OTHER


def _attempt(before: RunState | None, task_id: str) -> Attempt | None:
    """The attempt `task_id` as it was before this transition (None if it began in it)."""
    if before is None or before.active is None or before.active.task_id != task_id:
        return None
    return before.active
