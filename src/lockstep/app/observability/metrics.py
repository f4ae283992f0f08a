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

from prometheus_client import CollectorRegistry, disable_created_metrics
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ...core.events import Event
from ...core.state import STEP_OPEN, RunState
from ...store import ObserveTx
from ..port import KernelPort
from ..tracing.operator import OPERATOR_SPANS
from .families import Families
from .gauges import DatabaseCollector
from .transition import HANDLERS, Transition, seconds

__all__ = ["OPERATOR_COMMANDS", "Metrics"]

# An operator's command, by the event it records: the `command` label (the CLI's command names).
OPERATOR_COMMANDS = {kind: name.removeprefix("operator ") for kind, name in OPERATOR_SPANS.items()}


class _Exposition(Collector):
    """What a /metrics answer shows: this process's series, and the database's gauges if asked."""

    def __init__(self, parts: tuple[Collector, ...]) -> None:
        self.parts = parts

    def collect(self) -> Iterable[Metric]:
        return self._all()

    def _all(self) -> Iterator[Metric]:
        for part in self.parts:
            yield from part.collect()


class Metrics(Families):
    """A registry per Service (tests create many; the global registry would collide)."""

    def __init__(self, kernel: KernelPort[ObserveTx]) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # `_created` series only add noise
        self.registry = CollectorRegistry()
        super().__init__(self.registry, kernel.server_limits, kernel)
        labels = (self.activity_label, self.definition_label, self.steps.steps)
        self.database = DatabaseCollector(kernel, *labels)
        kernel.observers.append(self.observe)

    def exposition(self, *, database: bool = True) -> Collector:
        """This process's series, with the database's gauges unless `database` is False."""
        return _Exposition((self.registry, self.database) if database else (self.registry,))

    def refused(self, tenant: str | None, status: int, code: str) -> None:
        """A request the API refused with 403 or 429. Codes are the package's own literals (about a
        hundred, api/codes.py); the bound only guards against a code built from input by mistake."""
        self.refusals(tenant or "", str(status), self.refusal_code("", code)).inc()

    def observe(self, before: RunState | None, after: RunState, events: list[Event]) -> None:
        """A kernel observer: every metric this committed transition moves."""
        if not events:
            return
        tr = Transition(self, before, after)
        for e in events:
            handle = HANDLERS.get(type(e.data))
            if handle is not None:
                handle(tr, e)
            command = OPERATOR_COMMANDS.get(e.data.type)
            if command is not None:
                self.operator_commands(tr.t, command).inc()
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
            self.steps.visit_ended(before, sid, seconds(b.entered_at, at))
