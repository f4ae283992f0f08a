"""A run's spans derived again from its stored history: what `lockstep trace RUN` shows and, with
`--export`, sends again. Every span has the ids and times the live listener gave it, so re-sending
fills in what a killed process never exported (a backend keyed by span id shows each span once)."""

from __future__ import annotations

from ...store import RunsTx
from ..port import KernelPort
from .records import SpanRecord
from .spans import history_spans

__all__ = ["run_spans"]


def run_spans(kernel: KernelPort[RunsTx], tenant: str | None, run_id: str) -> list[SpanRecord]:
    """Every span the run's history has ended so far (a run still going has no root span yet)."""
    kernel.state(tenant, run_id)  # NotFound / Gone, also for another tenant's run
    with kernel.read() as tx:
        events = [e for e, _hash in tx.events(run_id)]
    return history_spans(events)
