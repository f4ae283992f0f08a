"""Activities: user functions registered by type name, and what they receive while they run."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.context import Context

__all__ = [
    "DEFAULT_SLOTS",
    "REGISTRY",
    "ActivityContext",
    "ActivityError",
    "LeaseLost",
    "Registry",
    "activity",
]

# Activities one worker runs at once unless told. Chosen from `make bench` (reports/bench.md, worker
# slots): 16 was the fastest on PostgreSQL and within 2% of the best on SQLite for quick activities,
# and activities that wait on a network overlap more of their waits with more slots.
DEFAULT_SLOTS = 16

# fn(input) or fn(input, ctx), sync or async; what it returns is checked when reported (plain JSON).
ActivityFn = Callable[..., object]


class ActivityError(Exception):
    """Raise from an activity to fail with a code; `retryable=False` (or a code listed in the step's
    `non_retryable`) fails the step without further attempts."""

    def __init__(self, code: str, message: str = "", *, retryable: bool = True) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message or code
        self.retryable = retryable


class LeaseLost(Exception):
    """The worker no longer holds the task's lease: another attempt may be running; stop working."""


@dataclass
class ActivityContext:
    """Passed to every activity as `ctx`."""

    tenant: str
    run_id: str
    step_id: str
    attempt: int
    idempotency_key: str
    activity: str
    definition: str
    version: int
    kind: str = "action"
    _heartbeat: Callable[[], bool] = field(default=lambda: True, repr=False)
    # The W3C traceparent of this attempt's span: make the activity's own spans its children.
    trace_context: str = ""

    def otel_context(self) -> Context:
        """`trace_context` as an OpenTelemetry context, to pass as the parent of the activity's own
        spans: `tracer.start_as_current_span("charge card", context=ctx.otel_context())` (needs the
        opentelemetry-api package, which lockstep's `otel` extra installs)."""
        from opentelemetry.trace.propagation.tracecontext import (  # noqa: PLC0415 - only when asked
            TraceContextTextMapPropagator,
        )

        carrier = {"traceparent": self.trace_context} if self.trace_context else {}
        return TraceContextTextMapPropagator().extract(carrier)

    def heartbeat(self) -> None:
        """Extend the lease. Raises LeaseLost if the lease has expired and the attempt was given up."""
        if not self._heartbeat():
            raise LeaseLost(f"lease of {self.run_id}/{self.step_id} attempt {self.attempt} was lost")


class Registry:
    def __init__(self) -> None:
        self._fns: dict[str, ActivityFn] = {}
        # Whether each takes (input, ctx): inspect.signature costs more than a trivial activity, so it
        # is asked once, here, not on every call.
        self._takes_ctx: dict[str, bool] = {}

    def register(self, name: str, fn: ActivityFn) -> None:
        existing = self._fns.get(name)
        if existing is not None and existing is not fn and _qualname(existing) != _qualname(fn):
            raise ValueError(f"activity {name!r} is already registered by {_qualname(existing)}")
        self._fns[name] = fn
        try:
            self._takes_ctx[name] = len(inspect.signature(fn).parameters) == 2
        except (TypeError, ValueError):  # no signature to read: asked (and failing) at call time
            self._takes_ctx.pop(name, None)

    def get(self, name: str) -> ActivityFn | None:
        return self._fns.get(name)

    def takes_context(self, name: str) -> bool:
        """Whether activity `name` takes (input, ctx) rather than (input)."""
        known = self._takes_ctx.get(name)
        return known if known is not None else len(inspect.signature(self._fns[name]).parameters) == 2

    def names(self) -> list[str]:
        return sorted(self._fns)

    def __contains__(self, name: object) -> bool:
        return name in self._fns


def _qualname(fn: ActivityFn) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


REGISTRY = Registry()


def activity(name: str, *, registry: Registry | None = None) -> Callable[[ActivityFn], ActivityFn]:
    """Register `fn(input: dict, ctx: ActivityContext) -> dict` (sync or async) as activity type `name`."""

    def wrap(fn: ActivityFn) -> ActivityFn:
        params = list(inspect.signature(fn).parameters)
        if len(params) not in (1, 2):
            raise TypeError(f"activity {name!r} must take (input) or (input, ctx), not {params}")
        (registry or REGISTRY).register(name, fn)
        return fn

    return wrap
