"""Label values that tenants and workers choose, bounded (core/limits.py), so that no tenant can grow
/metrics (and every scraper's memory) without end. Past a bound a value is counted as `other`.

- activity names: the first `max_metric_activities` per tenant keep their name;
- error codes: the engine's own always, and those the definition declares (`non_retryable`), at most
  `max_metric_error_codes` per tenant; undeclared codes are `other`;
- definition names: the first `max_metric_definitions` per tenant;
- step ids: the first `max_metric_steps` per definition (a version holds at most the tenant's
  max_steps, but a definition's versions together may hold any number);
- versions: the `max_metric_versions` newest seen per definition keep their number; an older one is
  `other`, and the series of a version pushed out by a newer one are removed (StepSeries), so a tenant
  publishing version after version never adds series.

Tenants (created by operators), statuses, outcomes, wait kinds and attention reasons (the engine's own,
closed sets) need no bound.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

from ...core.definition import ActivityStep
from ...core.definition.shapes import all_steps
from ...core.state import RunState
from ...store import DefinitionsTx
from ..port import KernelPort

__all__ = [
    "ATTENTION_REASONS",
    "ENGINE_ERROR_CODES",
    "OTHER",
    "Children",
    "DeclaredCodes",
    "FirstSeen",
    "NewestVersions",
]

C = TypeVar("C")
C_co = TypeVar("C_co", covariant=True)


class Labelled(Protocol[C_co]):
    def labels(self, *values: str) -> C_co: ...


OTHER = "other"
# Codes the engine itself reports for an attempt (lease timeout, lost lease, output that is not JSON):
# a fixed set, so always their own label value.
ENGINE_ERROR_CODES = frozenset({"Timeout", "LeaseLost", "InvalidOutput"})
# NeedsAttention.code: why a run waits for a person (core/attempt.py, core/flow.py, core/repair.py).
ATTENTION_REASONS = frozenset(
    {"dead_letter", "outcome_unknown", "compensation_failed", "compensation_input_error"}
)


class FirstSeen:
    """Per scope (a tenant, a tenant's definition), the first `limit` distinct values keep their name
    for the process's life; later ones are OTHER. Never evicts, so a series never changes meaning
    between scrapes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen: dict[Hashable, set[str]] = {}
        self.lock = threading.Lock()

    def __call__(self, scope: Hashable, value: str) -> str:
        known = self.seen.get(scope)
        if known is not None and value in known:  # the hot path: no lock (a set only grows)
            return value
        with self.lock:
            seen = self.seen.setdefault(scope, set())
            if value in seen:
                return value
            if len(seen) < self.limit:
                seen.add(value)
                return value
            return OTHER


class Children(Generic[C]):
    """A metric's children by label values, looked up without prometheus_client's per-call label
    checks and lock (a child, once made, is the metric's for good: two threads making one at once get
    the same object from `labels`)."""

    def __init__(self, metric: Labelled[C]) -> None:
        self.metric = metric
        self.made: dict[tuple[str, ...], C] = {}

    def __call__(self, *values: str) -> C:
        child = self.made.get(values)
        if child is None:
            child = self.made[values] = self.metric.labels(*values)
        return child


class NewestVersions:
    """Per (tenant, definition), the `limit` newest versions seen keep their number; an older one is
    OTHER. When a newer version arrives with `limit` held, the oldest held one is pushed out and
    `evicted(tenant, definition, version label)` is called (under the caller's lock: see StepSeries)."""

    def __init__(self, limit: int, evicted: Callable[[str, str, str], None]) -> None:
        self.limit = limit
        self.evicted = evicted
        self.held: dict[tuple[str, str], list[int]] = {}

    def __call__(self, tenant: str, definition: str, version: int) -> str:
        held = self.held.setdefault((tenant, definition), [])
        if version in held:
            return str(version)
        if len(held) < self.limit:
            held.append(version)
            held.sort()
            return str(version)
        if version < held[0]:
            return OTHER
        gone = held.pop(0)
        held.append(version)
        held.sort()
        self.evicted(tenant, definition, str(gone))
        return str(version)


class DeclaredCodes:
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
        for step in all_steps(d.steps):  # nested ones too (parallel branches, for-each bodies)
            if isinstance(step, ActivityStep):
                codes.update(step.retry.non_retryable)
                if step.compensate is not None:
                    codes.update(step.compensate.retry.non_retryable)
        with self.lock:
            self.cache[key] = frozenset(codes)
            if len(self.cache) > self.SIZE:
                self.cache.popitem(last=False)
        return frozenset(codes)
