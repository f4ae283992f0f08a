"""Structured JSON logs: one line per committed event, with run, step and attempt ids."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import orjson
import structlog
from structlog.typing import Processor

from ...core.canonical import JSONValue
from ...core.events import Event
from ...core.state import RunState

__all__ = ["configure_logging", "log_events"]


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
