"""The gauges read from the database at scrape time: every process that serves them reports the same
truth (aggregate them with `max by (...)`, not `sum`). Each scrape is one read transaction of six
GROUP BY queries over partial indexes of what is in flight (store/port/metrics.py)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ...core.explain import WAIT_KINDS
from ...core.paths import step_id
from ...core.timeutil import parse_iso
from ...store import MetricsTx
from ..port import KernelPort
from .labels import OTHER, FirstSeen

__all__ = ["LEASE_SOON_S", "DatabaseCollector"]

# A healthy lease is renewed every third of its TTL (10 s by default): one ending within 5 s has missed
# a renewal (or is close to its step's timeout).
LEASE_SOON_S = 5.0
_WAITS = frozenset(WAIT_KINDS)


class DatabaseCollector(Collector):
    def __init__(
        self,
        kernel: KernelPort[MetricsTx],
        activities: FirstSeen,
        definitions: FirstSeen,
        steps: FirstSeen,
    ) -> None:
        self.kernel = kernel
        self.activities = activities
        self.definitions = definitions
        self.steps = steps

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = self.kernel.clock()
        now_ms = int(now.timestamp() * 1000)
        with self.kernel.read() as tx:
            stats = tx.stats(now_ms, now_ms + int(LEASE_SOON_S * 1000))
        runs = GaugeMetricFamily("lockstep_runs", "Runs by tenant and status", labels=["tenant", "status"])
        for tenant, status, n in stats["runs"]:
            runs.add_metric([tenant, status], n)
        yield runs
        yield from self._queues(stats["queues"], now_ms)
        lag = GaugeMetricFamily(
            "lockstep_timer_lag_seconds", "How late the most overdue unfired timer is", labels=["tenant"]
        )
        overdue = GaugeMetricFamily(
            "lockstep_timers_overdue", "Timers due but not yet fired", labels=["tenant"]
        )
        for tenant, oldest, n in stats["timers"]:
            lag.add_metric([tenant], max(0.0, (now_ms - oldest) / 1000))
            overdue.add_metric([tenant], n)
        yield lag
        yield overdue
        yield self._at_step(stats["steps"])
        waiting = GaugeMetricFamily(
            "lockstep_approvals_waiting", "Approval requests waiting for a decision", labels=["tenant"]
        )
        oldest_age = GaugeMetricFamily(
            "lockstep_approvals_waiting_oldest_age_seconds",
            "How long the oldest waiting approval request has waited",
            labels=["tenant"],
        )
        for tenant, n, first in stats["approvals"]:
            waiting.add_metric([tenant], n)
            oldest_age.add_metric([tenant], max(0.0, (now - parse_iso(str(first))).total_seconds()))
        yield waiting
        yield oldest_age
        yield from self._leases(stats["leases"])

    def _queues(self, rows: list[tuple[str, str, int, int]], now_ms: int) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily(
            "lockstep_tasks_ready", "Activity tasks waiting for a worker", labels=["tenant", "activity"]
        )
        age = GaugeMetricFamily(
            "lockstep_tasks_ready_oldest_age_seconds",
            "Queue delay of the oldest ready task",
            labels=["tenant", "activity"],
        )
        queues: dict[tuple[str, str], tuple[int, int]] = {}  # folded: (count, oldest available_at)
        for tenant, activity, n, oldest in rows:
            key = (tenant, self.activities(tenant, activity))
            count, first = queues.get(key, (0, oldest))
            queues[key] = (count + n, min(first, oldest))
        for (tenant, activity), (n, oldest) in queues.items():
            depth.add_metric([tenant, activity], n)
            age.add_metric([tenant, activity], max(0.0, (now_ms - oldest) / 1000))
        yield depth
        yield age

    def _at_step(self, rows: list[tuple[str, str, str | None, str | None, int]]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "lockstep_runs_at_step",
            "Unfinished runs by definition, current step and what they wait for (wait: a wait kind of "
            "lockstep show; step `none` before the first step, wait `unknown` for a run not moved since "
            "the upgrade that added it)",
            labels=["tenant", "definition", "step", "wait"],
        )
        folded: dict[tuple[str, str, str, str], int] = {}
        for tenant, definition, step, wait, n in rows:
            name = self.definitions(tenant, definition)
            sid = self.steps((tenant, name), step_id(step)) if step is not None else "none"
            kind = wait if wait in _WAITS else ("unknown" if wait is None else OTHER)
            key = (tenant, name, sid, kind)
            folded[key] = folded.get(key, 0) + n
        for labels, n in folded.items():
            family.add_metric(list(labels), n)
        return family

    def _leases(self, rows: list[tuple[str, int, int, int]]) -> Iterator[GaugeMetricFamily]:
        held = GaugeMetricFamily("lockstep_leases", "Attempts leased to a worker", labels=["tenant"])
        expiring = GaugeMetricFamily(
            "lockstep_leases_expiring",
            f"Leases that end within {LEASE_SOON_S:g} s or have ended (not renewed: a worker stalled, "
            "lost or close to its step's timeout)",
            labels=["tenant"],
        )
        overdue = GaugeMetricFamily(
            "lockstep_leases_overdue",
            "Leases that have ended but are not yet expired by a scheduler (their attempts wait)",
            labels=["tenant"],
        )
        for tenant, n, soon, past in rows:
            held.add_metric([tenant], n)
            expiring.add_metric([tenant], int(soon or 0))
            overdue.add_metric([tenant], int(past or 0))
        yield held
        yield expiring
        yield overdue
