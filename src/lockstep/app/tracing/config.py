"""Whether this process traces, decided from the standard OpenTelemetry environment variables:

- OTEL_SDK_DISABLED=true: off.
- OTEL_TRACES_EXPORTER: `otlp` (OTLP over HTTP/protobuf), `console`, both (comma-separated) or `none`.
  Unset, tracing is on only when an OTLP endpoint is set (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
  OTEL_EXPORTER_OTLP_ENDPOINT): a process nobody configured exports nothing, and never tries a default
  collector address.
- The exporter and processor read the rest themselves: OTEL_EXPORTER_OTLP_* (endpoint, headers,
  timeout, compression, certificates), OTEL_BSP_* (batching), OTEL_TRACES_SAMPLER[_ARG],
  OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.

Off, nothing of the SDK is imported and no listener is registered. On without the SDK installed, the
process refuses to start, naming the extra to install (`pip install 'lockstep[otel]'`).
"""

from __future__ import annotations

from collections.abc import Mapping

from ...errors import InvalidInput
from .sink import TraceSink

__all__ = ["EXPORTERS", "tracing_configured", "tracing_from_env"]

EXPORTERS = ("otlp", "console")


def tracing_configured(environ: Mapping[str, str]) -> list[str]:
    """The exporters the environment asks for (empty: tracing is off)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    named = [x.strip().lower() for x in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if x.strip()]
    if not named:
        endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        named = ["otlp"] if endpoint else []
    named = [x for x in named if x != "none"]
    unknown = sorted(set(named) - set(EXPORTERS))
    if unknown:
        raise InvalidInput(
            f"OTEL_TRACES_EXPORTER={environ.get('OTEL_TRACES_EXPORTER')!r}: lockstep exports traces with "
            f"{' or '.join(EXPORTERS)} (or none), not {', '.join(unknown)}",
            code="tracing",
        )
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if "otlp" in named and protocol.strip() != "http/protobuf":
        raise InvalidInput(
            f"OTLP protocol {protocol!r}: lockstep exports OTLP over HTTP (http/protobuf); point "
            "OTEL_EXPORTER_OTLP_ENDPOINT at the collector's HTTP port (4318 by default)",
            code="tracing",
        )
    return named


def tracing_from_env(environ: Mapping[str, str]) -> TraceSink | None:
    """The process's tracing as the environment configures it, or None when it is off."""
    exporters = tracing_configured(environ)
    if not exporters:
        return None
    try:
        from opentelemetry.sdk.trace.export import (  # noqa: PLC0415 - the SDK only when configured
            ConsoleSpanExporter,
            SpanExporter,
        )

        from .sdk import Tracing  # noqa: PLC0415

        chosen: list[SpanExporter] = []
        if "otlp" in exporters:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter,
            )

            chosen.append(OTLPSpanExporter())
    except ImportError as exc:
        raise InvalidInput(
            f"tracing is configured (OTEL_* variables) but {exc.name or 'the OpenTelemetry SDK'} is not "
            "installed: pip install 'lockstep[otel]', or unset OTEL_TRACES_EXPORTER and "
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            code="tracing",
        ) from None
    if "console" in exporters:
        chosen.append(ConsoleSpanExporter())
    return Tracing(chosen)
