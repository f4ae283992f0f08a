"""What the checker adds for metrics (scenarios `lease_expiry` and `crash_after_commit`): every lockstep
process of the scenario serves its counters (`--metrics-port`), the driver scrapes them all once the
runs settled, adds them up with its own in-process engine's, and compares each sum with the count of
the events it stands for in the tenant's histories.

What is guaranteed, and so checked: a committed transition is counted at most once, by the process that
committed it. With no process killed (`lease_expiry`: workers are frozen and continued, never killed)
every sum equals its count. A SIGKILLed process loses what it counted (`crash_after_commit`), so there
each sum may fall short of its count (the shortfall is reported, not flagged) but never exceed it.

Violation (must be 0):
- metrics_mismatch: a counter summed over every process differs from the histories (exact), or exceeds
  them (with processes killed).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping

import httpx
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lockstep.core.events import (
    ActivityFailed,
    ActivityStarted,
    ActivitySucceeded,
    ActivityTimedOut,
    Event,
    ResultIgnored,
    RunCancelled,
    RunCompleted,
    RunFailed,
)

from ..fleet import free_port
from .checker import Verdict
from .faultfleet import FaultFleet

__all__ = ["COUNTERS", "MetricPorts", "compare", "history_counts"]

# Each counter and what it counts in a history.
COUNTERS = {
    "lockstep_activity_attempts_total": "ActivityStarted",
    "lockstep_activity_completions_total": "ActivitySucceeded",
    "lockstep_step_retries_total": "ActivityFailed/ActivityTimedOut with will_retry",
    "lockstep_lease_expiries_total": "ActivityTimedOut",
    "lockstep_results_ignored_total": "ResultIgnored",
    "lockstep_runs_finished_total": "RunCompleted/RunFailed/RunCancelled",
}


def history_counts(histories: Mapping[str, list[Event]]) -> dict[str, int]:
    n: Counter[str] = Counter()
    for events in histories.values():
        for e in events:
            d = e.data
            if isinstance(d, ActivityStarted):
                n["lockstep_activity_attempts_total"] += 1
            elif isinstance(d, ActivitySucceeded):
                n["lockstep_activity_completions_total"] += 1
            elif isinstance(d, ActivityFailed | ActivityTimedOut):
                n["lockstep_step_retries_total"] += int(d.will_retry)
                n["lockstep_lease_expiries_total"] += int(isinstance(d, ActivityTimedOut))
            elif isinstance(d, ResultIgnored):
                n["lockstep_results_ignored_total"] += 1
            elif isinstance(d, RunCompleted | RunFailed | RunCancelled):
                n["lockstep_runs_finished_total"] += 1
    return {name: n[name] for name in COUNTERS}


def sums(texts: Mapping[str, str], tenant: str) -> dict[str, float]:
    """Each counter of COUNTERS summed over every process's exposition (the tenant's samples)."""
    out = dict.fromkeys(COUNTERS, 0.0)
    for text in texts.values():
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name in out and s.labels.get("tenant") == tenant:
                    out[s.name] += s.value
    return out


def compare(summed: Mapping[str, float], counted: Mapping[str, int], *, exact: bool) -> list[str]:
    """The mismatches: a sum that differs from its count (exact), or exceeds it."""
    problems = []
    for name, what in COUNTERS.items():
        got, want = summed[name], counted[name]
        if got > want or (exact and got != want):
            problems.append(f"{name}: the processes counted {got:g}, the histories hold {want} ({what})")
    return problems


class MetricPorts:
    """The `--metrics-port` of each process a scenario starts, and the scrape of those still alive."""

    def __init__(self, fleet: FaultFleet) -> None:
        self.fleet = fleet
        self.ports: dict[str, int] = {}

    def args(self, name: str) -> list[str]:
        port = self.ports[name] = free_port()
        return ["--metrics-port", str(port)]

    def scrape(self) -> tuple[dict[str, str], list[str]]:
        """(name -> exposition, for every process that answered; names of those that did not)."""
        own = self.fleet.engine.service.metrics.exposition(database=False)  # the driver's commits
        texts = {"driver": generate_latest(own).decode()}
        gone = []
        token = self.fleet.env.get("LOCKSTEP_METRICS_TOKEN")
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        server = self.fleet.server
        if server is not None and server.url is not None:  # HTTP workers: serve commits their reports
            texts["serve"] = httpx.get(f"{server.url}/metrics", headers=auth, timeout=10).text
        for name, port in self.ports.items():
            if name in self.fleet.remote:
                continue  # a remote worker commits nothing: its counts are the server's
            try:
                texts[name] = httpx.get(f"http://127.0.0.1:{port}/metrics", headers=auth, timeout=10).text
            except httpx.HTTPError:
                gone.append(name)  # killed (its counts went with it)
        return texts, gone

    def check(self, verdict: Verdict, tenant: str, *, exact: bool, settle_s: float = 10.0) -> dict[str, int]:
        """Flag metrics_mismatch on `verdict`; return what the injected counts report (processes scraped,
        processes gone, what the killed ones took with them). Sums only grow toward the counts (a late
        report may still be landing): compared again until they match or `settle_s` passes."""
        deadline = time.monotonic() + settle_s
        while True:
            texts, gone = self.scrape()
            with self.fleet.engine.service.read() as tx:
                histories = {rid: [e for e, _ in tx.events(rid)] for rid in tx.run_ids(tenant)}
            summed, counted = sums(texts, tenant), history_counts(histories)
            problems = compare(summed, counted, exact=exact)
            if not problems or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        for p in problems:
            verdict.flag("metrics_mismatch", p)
        report = {"metrics: processes scraped": len(texts), "metrics: processes gone (killed)": len(gone)}
        if not exact:
            lost = sum(counted[n] - summed[n] for n in ("lockstep_activity_attempts_total",))
            report["metrics: attempts counted by killed processes (lost)"] = int(max(0, lost))
        return report
