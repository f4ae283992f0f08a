"""The counters and histograms of one process, and the label bounds they share. Each family is held as
its children by label values (Children), so a transition's observation costs dictionary lookups; the
names, help texts and buckets are here and in docs/operations.md ("Metrics")."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from ...core.limits import ServerLimits
from ...store import DefinitionsTx
from ..port import KernelPort
from .labels import Children, DeclaredCodes, FirstSeen
from .steps import StepSeries

__all__ = ["FAST_BUCKETS", "LONG_BUCKETS", "REFUSAL_CODES", "TIMER_BUCKETS", "Families"]

# Queue delays and attempts: milliseconds to half an hour.
FAST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)
# Approvals and whole runs: a second to a month.
LONG_BUCKETS = (1, 10, 60, 300, 900, 3600, 14400, 43200, 86400, 259200, 604800, 2592000)
TIMER_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)
REFUSAL_CODES = 200  # distinct problem codes counted by name (the package has fewer)
ACTIVITY = ("tenant", "activity")
DEFINITION = ("tenant", "definition")

# name, help, labels (counters: prometheus_client adds _total).
_COUNTERS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "attempts": ("lockstep_activity_attempts", "Activity attempts started", ACTIVITY),
    "completions": (
        "lockstep_activity_completions",
        "Activity attempts that succeeded (each completes its step, or its step's compensation)",
        ACTIVITY,
    ),
    "failures": ("lockstep_activity_failures", "Activity attempts failed or timed out", (*ACTIVITY, "code")),
    "lease_expiries": ("lockstep_lease_expiries", "Leases that expired (worker lost or too slow)", ACTIVITY),
    "dead_letters": (
        "lockstep_dead_letters",
        "Steps that went to the dead-letter state (no worker took the task in time, or retries "
        "exhausted under on_exhausted: dead_letter)",
        ACTIVITY,
    ),
    "ignored": ("lockstep_results_ignored", "Late or duplicate results recorded as evidence", ("tenant",)),
    "runs_finished": ("lockstep_runs_finished", "Runs that reached a terminal status", ("tenant", "status")),
    "compensations": (
        "lockstep_compensations",
        "Compensations that ended: succeeded, or failed for good (the run waits for an operator)",
        (*DEFINITION, "outcome"),
    ),
    "attention": (
        "lockstep_needs_attention",
        "Runs that began waiting for a person, by reason (dead_letter, outcome_unknown, "
        "compensation_failed, compensation_input_error)",
        (*DEFINITION, "reason"),
    ),
    "operator_commands": (
        "lockstep_operator_commands",
        "Operators' commands recorded in runs' histories (retry, pause, skip, cancel, ...)",
        ("tenant", "command"),
    ),
    "decisions": (
        "lockstep_approval_decisions",
        "Approvers' decisions (approve or reject) recorded",
        (*DEFINITION, "decision"),
    ),
    "damaged_runs": (
        "lockstep_runs_damaged",
        "Runs the background scrub found damaged and marked (every command on one is refused until "
        "its rows are restored); counted once, by the process that marked it",
        ("tenant",),
    ),
    "refusals": (
        "lockstep_refusals",
        "Requests refused by the API with 403 or 429, by problem code",
        ("tenant", "status", "code"),
    ),
}
_HISTOGRAMS: dict[str, tuple[str, str, tuple[str, ...], tuple[float, ...]]] = {
    "timer_lag": (
        "lockstep_timer_fire_lag_seconds",
        "Delay between fire_at and firing",
        ("tenant",),
        TIMER_BUCKETS,
    ),
    "queue_delay": (
        "lockstep_queue_delay_seconds",
        "From an attempt's task becoming ready to a worker leasing it",
        ACTIVITY,
        FAST_BUCKETS,
    ),
    "attempt_duration": (
        "lockstep_attempt_duration_seconds",
        "From an attempt's lease to its outcome (succeeded, failed, timed_out, cancelled)",
        (*ACTIVITY, "outcome"),
        FAST_BUCKETS,
    ),
    "approval_duration": (
        "lockstep_approval_duration_seconds",
        "Time in approval: from the request to its outcome (granted, rejected, timed_out, cancelled)",
        (*DEFINITION, "outcome"),
        LONG_BUCKETS,
    ),
    "run_duration": (
        "lockstep_run_duration_seconds",
        "From a run's start to its end, by terminal status",
        (*DEFINITION, "status"),
        LONG_BUCKETS,
    ),
}


class Families:
    """Every family of this process's registry, as children by label values, and the label bounds."""

    def __init__(
        self, registry: CollectorRegistry, limits: ServerLimits, kernel: KernelPort[DefinitionsTx]
    ) -> None:
        self.activity_label = FirstSeen(limits["max_metric_activities"])
        self.code_label = FirstSeen(limits["max_metric_error_codes"])
        self.definition_label = FirstSeen(limits["max_metric_definitions"])
        self.refusal_code = FirstSeen(REFUSAL_CODES)
        self.declared_codes = DeclaredCodes(kernel)
        self.steps = StepSeries(registry, limits, self.definition_label)
        counters = {
            key: Children(Counter(name, doc, labels, registry=registry))
            for key, (name, doc, labels) in _COUNTERS.items()
        }
        histograms = {
            key: Children(Histogram(name, doc, labels, registry=registry, buckets=buckets))
            for key, (name, doc, labels, buckets) in _HISTOGRAMS.items()
        }
        self.attempts = counters["attempts"]
        self.completions = counters["completions"]
        self.failures = counters["failures"]
        self.lease_expiries = counters["lease_expiries"]
        self.dead_letters = counters["dead_letters"]
        self.ignored = counters["ignored"]
        self.runs_finished = counters["runs_finished"]
        self.compensations = counters["compensations"]
        self.attention = counters["attention"]
        self.operator_commands = counters["operator_commands"]
        self.decisions = counters["decisions"]
        self.refusals = counters["refusals"]
        self.damaged_runs = counters["damaged_runs"]
        self.timer_lag = histograms["timer_lag"]
        self.queue_delay = histograms["queue_delay"]
        self.attempt_duration = histograms["attempt_duration"]
        self.approval_duration = histograms["approval_duration"]
        self.run_duration = histograms["run_duration"]
