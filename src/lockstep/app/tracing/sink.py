"""What the application layer needs of tracing (`TraceSink`): the SDK glue (sdk.py) is one, set up from
the OTEL_* environment only when tracing is configured; without one, nothing is traced and nothing of
the OpenTelemetry SDK is imported."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ...core.events import Event
from ...core.state import RunState
from .ids import SpanRef

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["TraceSink"]


class TraceSink(Protocol):
    @property
    def tracer_provider(self) -> TracerProvider:
        """The provider the process's other spans use too (the HTTP server's requests)."""

    def observe(self, before: RunState | None, after: RunState, events: list[Event]) -> None:
        """After a commit: emit the spans that the transition `before` -> `after` (`events`) ended."""

    def new_trace(self, parent: SpanRef | None) -> tuple[str, str | None]:
        """RunStarted's (trace, trace_parent) for a run starting now, under `parent` if given."""

    def set_global(self) -> None:
        """Make this the process's global tracer provider (if none is set): for the long-running
        processes, so activities' own spans (`ctx.otel_context()`) go the same way."""

    def flush(self) -> None:
        """Export what is buffered now (bounded by the exporter's timeout)."""

    def shutdown(self) -> None:
        """Flush and stop: no span is emitted after this."""
