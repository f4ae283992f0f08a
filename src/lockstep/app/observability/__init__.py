"""Metrics (Prometheus) and structured JSON logs, fed by the service's committed transitions.

    metrics.py  this process's counters and histograms, from each transition (before, after, events)
    steps.py    the series labelled by step, with the version bound that removes old versions' series
    gauges.py   the gauges read from the database at scrape time (every process reports the same truth)
    labels.py   the bounds on label values tenants and workers choose (past a bound: `other`)
    logs.py     one JSON log line per committed event

docs/operations.md ("Metrics") lists every series, what it means, its labels and the alert watching it.
"""

from __future__ import annotations

from .labels import ENGINE_ERROR_CODES, OTHER
from .logs import configure_logging, log_events
from .metrics import Metrics

__all__ = ["ENGINE_ERROR_CODES", "OTHER", "Metrics", "configure_logging", "log_events"]
