"""Metrics (Prometheus) and structured JSON logs, fed by the service's committed events.

Gauges are read from the database at scrape time, so every process reports the same truth; counters
count what this process committed (attempts, failures, lease expiries, timers).

Label values that tenants or workers choose are bounded (core/limits.py), so no tenant can grow the
output without end: activity names, the first `max_metric_activities` per tenant; error codes, the
engine's own and those the definition declares (`non_retryable`), at most `max_metric_error_codes` per
tenant. Everything past a bound is counted under `other`. Tenants (created by operators) and statuses
(the engine's) are bounded already.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import orjson
import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from structlog.typing import Processor

from ..core.canonical import JSONValue
from ..core.definition import ActivityStep
from ..core.events import (
    ActivityFailed,
    ActivityStarted,
    ActivityTimedOut,
    Event,
    ResultIgnored,
    TimerFired,
)
from ..core.lanes import attempt_of_task
from ..core.state import RunState
from ..core.timeutil import parse_iso
from ..store import DefinitionsTx, MetricsTx, ObserveTx
from .port import KernelPort

__all__ = ["ENGINE_ERROR_CODES", "OTHER", "Metrics", "configure_logging", "log_events"]

OTHER = "other"
# Codes the engine itself reports for an attempt (lease timeout, lost lease, output that is not JSON):
# a fixed set, so always their own label value.
ENGINE_ERROR_CODES = frozenset({"Timeout", "LeaseLost", "InvalidOutput"})


class _FirstSeen:
    """Per tenant, the first `limit` distinct values keep their name for the process's life; later ones
    are OTHER. Never evicts, so a series never changes meaning between scrapes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen: dict[str, set[str]] = {}
        self.lock = threading.Lock()

    def __call__(self, tenant: str, value: str) -> str:
        with self.lock:
            seen = self.seen.setdefault(tenant, set())
            if value in seen:
                return value
            if len(seen) < self.limit:
                seen.add(value)
                return value
            return OTHER


class _DeclaredCodes:
    """The error codes a definition version declares (its steps' `non_retryable` lists), cached."""

    SIZE = 256

    def __init__(self, kernel: KernelPort[DefinitionsTx]) -> None:
        self.kernel = kernel
        self.cache: OrderedDict[tuple[str, str, int], frozenset[str]] = OrderedDict()
        self.lock = threading.Lock()

    def __call__(self, state: RunState) -> frozenset[str]:
        key = (state.tenant, str(state.definition["name"]), int(state.definition["version"]))
        with self.lock:
            if key in self.cache:
                self.cache.move_to_end(key)
                return self.cache[key]
        try:
            with self.kernel.read() as tx:
                d = self.kernel.definition_for(tx, *key)
        except Exception:  # metrics never fail a committed transition: count as undeclared
            return frozenset()
        codes: set[str] = set()
        for step in d.steps:
            if isinstance(step, ActivityStep):
                codes.update(step.retry.non_retryable)
                if step.compensate is not None:
                    codes.update(step.compensate.retry.non_retryable)
        with self.lock:
            self.cache[key] = frozenset(codes)
            if len(self.cache) > self.SIZE:
                self.cache.popitem(last=False)
        return frozenset(codes)


class _DatabaseCollector(Collector):
    def __init__(self, kernel: KernelPort[MetricsTx], activity_label: _FirstSeen) -> None:
        self.kernel = kernel
        self.activity_label = activity_label

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = self.kernel.clock()
        now_ms = int(now.timestamp() * 1000)
        with self.kernel.read() as tx:
            stats = tx.stats(now_ms)
        runs = GaugeMetricFamily("lockstep_runs", "Runs by tenant and status", labels=["tenant", "status"])
        for tenant, status, n in stats["runs"]:
            runs.add_metric([tenant, status], n)
        yield runs
        depth = GaugeMetricFamily(
            "lockstep_tasks_ready", "Activity tasks waiting for a worker", labels=["tenant", "activity"]
        )
        age = GaugeMetricFamily(
            "lockstep_tasks_ready_oldest_age_seconds",
            "Queue delay of the oldest ready task",
            labels=["tenant", "activity"],
        )
        queues: dict[tuple[str, str], tuple[int, int]] = {}  # folded: (count, oldest available_at)
        for tenant, activity, n, oldest in stats["queues"]:
            key = (tenant, self.activity_label(tenant, activity))
            count, first = queues.get(key, (0, oldest))
            queues[key] = (count + n, min(first, oldest))
        for (tenant, activity), (n, oldest) in queues.items():
            depth.add_metric([tenant, activity], n)
            age.add_metric([tenant, activity], max(0.0, (now_ms - oldest) / 1000))
        yield depth
        yield age
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


class Metrics:
    """A registry per app (tests create many apps; the global registry would collide)."""

    def __init__(self, kernel: KernelPort[ObserveTx]) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # `_created` series only add noise
        self.registry = CollectorRegistry()
        self.activity_label = _FirstSeen(kernel.server_limits["max_metric_activities"])
        self.code_label = _FirstSeen(kernel.server_limits["max_metric_error_codes"])
        self.declared_codes = _DeclaredCodes(kernel)
        self.registry.register(_DatabaseCollector(kernel, self.activity_label))
        labels = ["tenant", "activity"]
        self.attempts = Counter(
            "lockstep_activity_attempts", "Activity attempts started", labels, registry=self.registry
        )
        self.failures = Counter(
            "lockstep_activity_failures",
            "Activity attempts failed or timed out",
            [*labels, "code"],
            registry=self.registry,
        )
        self.lease_expiries = Counter(
            "lockstep_lease_expiries",
            "Leases that expired (worker lost or too slow)",
            labels,
            registry=self.registry,
        )
        self.ignored = Counter(
            "lockstep_results_ignored",
            "Late or duplicate results recorded as evidence",
            ["tenant"],
            registry=self.registry,
        )
        self.timer_lag = Histogram(
            "lockstep_timer_fire_lag_seconds",
            "Delay between fire_at and firing",
            ["tenant"],
            registry=self.registry,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
        )
        self.runs_finished = Counter(
            "lockstep_runs_finished",
            "Runs that reached a terminal status",
            ["tenant", "status"],
            registry=self.registry,
        )
        kernel.listeners.append(self.observe)

    def observe(self, state: RunState, events: list[Event]) -> None:
        t = state.tenant
        for e in events:
            d = e.data
            if isinstance(d, ActivityStarted):
                self.attempts.labels(t, self._activity(state, d)).inc()
            elif isinstance(d, ActivityFailed | ActivityTimedOut):
                self.failures.labels(t, self._activity(state, d), self._code(state, d)).inc()
                if isinstance(d, ActivityTimedOut):
                    self.lease_expiries.labels(t, self._activity(state, d)).inc()
            elif isinstance(d, ResultIgnored):
                self.ignored.labels(t).inc()
            elif isinstance(d, TimerFired):
                if isinstance(d.fire_at, str):  # not recorded by the first builds
                    lag = (parse_iso(e.at) - parse_iso(d.fire_at)).total_seconds()
                    self.timer_lag.labels(t).observe(max(0.0, lag))
            elif e.type in ("RunCompleted", "RunFailed", "RunCancelled"):
                self.runs_finished.labels(t, e.type[3:].lower()).inc()

    def _activity(self, state: RunState, d: ActivityStarted | ActivityFailed | ActivityTimedOut) -> str:
        a = attempt_of_task(state, d.task_id)
        if a is not None:
            name = a.activity
        else:
            activity = None if isinstance(d, ActivityStarted) else d.activity
            name = str(activity or d.step or "?")
        return self.activity_label(state.tenant, name)

    def _code(self, state: RunState, d: ActivityFailed | ActivityTimedOut) -> str:
        code = str(d.error.get("code"))  # a stored error may be sealed whole: then it has no code
        if code in ENGINE_ERROR_CODES:
            return code
        if code in self.declared_codes(state):
            return self.code_label(state.tenant, code)
        return OTHER


def _orjson_text(obj: object, **kw: Any) -> str:
    # Workers and schedulers log every committed event: the stdlib encoder was a visible share of
    # their CPU per step. `default` is structlog's fallback for values JSON has no type for.
    try:
        return orjson.dumps(obj, default=kw.get("default")).decode()
    except TypeError:  # what orjson refuses (non-string keys, huge integers) the stdlib still writes
        return json.dumps(obj, **kw)


def configure_logging(level: str = "INFO", json_logs: bool = True) -> None:
    """JSON lines on stderr (one object per line, with run/step/attempt ids where they apply)."""
    processors: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.JSONRenderer(serializer=_orjson_text)
        if json_logs
        else structlog.dev.ConsoleRenderer(colors=False),
    ]
    structlog.configure(
        processors=processors,
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
    )


_events_log = structlog.get_logger("lockstep.events")


def log_events(state: RunState, events: list[Event]) -> None:
    """A listener for Service.listeners: one log line per committed event."""
    for e in events:
        fields: dict[str, JSONValue] = {
            "run_id": state.run_id,
            "tenant": state.tenant,
            "seq": e.seq,
            "definition": state.definition["name"],
            "version": state.definition["version"],
        }
        data = e.data_json()  # the line shows the event's fields as stored, whatever its kind
        for k in ("step", "attempt", "task_id", "fencing", "worker"):
            if k in data:
                fields[k] = data[k]
        if data.get("error"):
            fields["error_code"] = data["error"].get("code")
        _events_log.info(e.type, **fields)
