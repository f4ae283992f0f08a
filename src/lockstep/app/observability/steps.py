"""The series labelled by step (tenant, definition, version, step): a step visit's duration and its
automatic retries. The version label is bounded by NewestVersions: when a newer version pushes one out,
every series of the old one is removed here, under the same lock as every observation, so a removed
series is never recreated by an observation that raced it."""

from __future__ import annotations

import threading
from contextlib import suppress

from prometheus_client import CollectorRegistry, Counter, Histogram

from ...core.limits import ServerLimits
from ...core.paths import step_id
from ...core.state import RunState
from .labels import OTHER, FirstSeen, NewestVersions

__all__ = ["STEP_BUCKETS", "StepSeries"]

# A step visit lasts from milliseconds (an activity) to days (a wait, an approval).
STEP_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300, 1800, 3600, 21600, 86400, 604800)
LABELS = ["tenant", "definition", "version", "step"]


class StepSeries:
    def __init__(self, registry: CollectorRegistry, limits: ServerLimits, definitions: FirstSeen) -> None:
        self.lock = threading.Lock()
        self.definitions = definitions
        self.steps = FirstSeen(limits["max_metric_steps"])
        self.versions = NewestVersions(limits["max_metric_versions"], self._evict)
        # (tenant, definition, version) -> the step labels it has series for (to remove them together).
        self.used: dict[tuple[str, str, str], set[str]] = {}
        self.durations: dict[tuple[str, str, str, str], Histogram] = {}  # the children, by labels
        self.duration = Histogram(
            "lockstep_step_duration_seconds",
            "A step visit, from the event that entered the step to the one that ended it (retries "
            "included; a visit the run's end cuts short ends with the run)",
            LABELS,
            registry=registry,
            buckets=STEP_BUCKETS,
        )
        self.retries = Counter(
            "lockstep_step_retries",
            "Automatic retries of a step: failed or timed-out attempts (actions and compensations) "
            "that the retry policy tries again",
            LABELS,
            registry=registry,
        )

    def visit_ended(self, state: RunState, step: str, seconds: float) -> None:
        with self.lock:
            key = self._labels(state, step)
            child = self.durations.get(key)
            if child is None:
                child = self.durations[key] = self.duration.labels(*key)
            child.observe(seconds)

    def retried(self, state: RunState, step: str) -> None:
        with self.lock:
            self.retries.labels(*self._labels(state, step)).inc()

    def _labels(self, state: RunState, step: str) -> tuple[str, str, str, str]:
        t = state.tenant
        name = self.definitions(t, str(state.definition.get("name")))
        # Versions of different definitions folded into `other` would mix: their version is `other` too.
        version = (
            OTHER if name == OTHER else self.versions(t, name, int(state.definition.get("version") or 0))
        )
        sid = self.steps((t, name), step_id(step))  # a nested step by its id: not one series per item
        self.used.setdefault((t, name, version), set()).add(sid)
        return t, name, version, sid

    def _evict(self, tenant: str, definition: str, version: str) -> None:
        for sid in self.used.pop((tenant, definition, version), ()):
            self.durations.pop((tenant, definition, version, sid), None)
            for family in (self.duration, self.retries):
                with suppress(KeyError):  # a step that only has one of the two
                    family.remove(tenant, definition, version, sid)
