"""Metrics of real processes on both backends (the scenario is in conftest.py): promtool accepts every
process's /metrics, and the per-process counters summed over every process equal what the histories
say, each transition counted once, by the process that committed it."""

from __future__ import annotations

import subprocess
from collections import Counter

import pytest
from metricsworld import Served, promtool
from service.metrickit import Samples

from lockstep.core.events import (
    ActivityFailed,
    ActivityStarted,
    ActivitySucceeded,
    ActivityTimedOut,
    ApprovalGranted,
    ApprovalRequested,
)
from lockstep.core.timeutil import parse_iso

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("process", ["serve", "worker", "scheduler", "driver"])
def test_promtool_accepts_the_metrics_of_every_process(served: Served, process: str) -> None:
    """`promtool check metrics` (format and naming lint) passes on each process's real /metrics."""
    text = served.texts[process]
    assert "# TYPE lockstep_activity_attempts_total counter" in text  # a real exposition, not an error
    done = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (done.stdout + done.stderr).strip()


def test_counters_summed_over_processes_equal_the_histories(served: Served) -> None:
    """Attempts, completions, retries, finished runs, compensations and the cancel: the sum over serve,
    worker, scheduler and this driver equals the count in the runs' events."""
    per = {name: Samples(text) for name, text in served.texts.items()}

    def total(name: str, **labels: str) -> float:
        return sum(s.value(name, tenant="acme", **labels) for s in per.values())

    events = [e for history in served.histories.values() for e in history]
    kinds = Counter(type(e.data) for e in events)
    retries = sum(
        1 for e in events if isinstance(e.data, ActivityFailed | ActivityTimedOut) and e.data.will_retry
    )
    assert total("lockstep_activity_attempts_total") == kinds[ActivityStarted] > 0
    assert total("lockstep_activity_completions_total") == kinds[ActivitySucceeded]
    assert total("lockstep_step_retries_total") == retries == 3  # charge's first attempt, each run
    assert total("lockstep_runs_finished_total", status="completed") == 1
    assert total("lockstep_runs_finished_total", status="failed") == 1
    assert total("lockstep_runs_finished_total", status="cancelled") == 1
    assert total("lockstep_compensations_total", outcome="succeeded") == 2
    assert total("lockstep_operator_commands_total", command="cancel") == 1
    assert total("lockstep_approval_duration_seconds_count") == 3
    assert total("lockstep_approval_duration_seconds_count", outcome="timed_out") == 1
    # The worker committed the attempts' outcomes; the driver none (it only decided the approval).
    assert (
        per["worker"].value("lockstep_activity_completions_total", tenant="acme") == kinds[ActivitySucceeded]
    )
    assert per["driver"].value("lockstep_activity_attempts_total") == 0
    # The API's refusals are serve's.
    assert (
        per["serve"].value("lockstep_refusals_total", tenant="slow", status="429", code="start_rate_exceeded")
        == 1
    )
    assert per["serve"].value("lockstep_refusals_total", tenant="acme", status="403", code="forbidden") == 1


def test_time_in_approval_is_the_decision_time_minus_the_request_time(served: Served) -> None:
    """The approval alice granted (committed by this driver's process) was observed once, exactly
    ApprovalGranted.at - ApprovalRequested.at (milliseconds), under outcome granted."""
    history = served.histories[served.approved]
    requested = next(e.at for e in history if isinstance(e.data, ApprovalRequested))
    granted = next(e.at for e in history if isinstance(e.data, ApprovalGranted))
    waited = (parse_iso(granted) - parse_iso(requested)).total_seconds()
    driver = Samples(served.texts["driver"])
    labels = {"tenant": "acme", "definition": "m-pay", "outcome": "granted"}
    assert driver.value("lockstep_approval_duration_seconds_count", **labels) == 1
    assert driver.value("lockstep_approval_duration_seconds_sum", **labels) == pytest.approx(waited, abs=1e-9)
    assert driver.value("lockstep_approval_decisions_total", tenant="acme", decision="approve") == 1
