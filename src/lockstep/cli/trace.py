"""`lockstep trace RUN`: the run's spans as its history implies them (the tree, with times), and with
`--export` sent again through the tracing the OTEL_* variables configure: the same ids and times the
live processes gave them, so what a killed process never exported is filled in."""

from __future__ import annotations

import click
from rich.tree import Tree

from ..app.tracing import SpanRecord, run_spans
from ..core.timeutil import parse_iso
from ..errors import InvalidInput
from .context import Ctx, pass_ctx
from .render import out, print_json

__all__ = ["COMMANDS"]


# How deep each kind of span sits, for spans that start together (a step and its first attempt).
_DEPTH = {"run": 0, "step": 1, "compensation": 1, "approval": 2}


def _ms(r: SpanRecord) -> int:
    return int((parse_iso(r.end) - parse_iso(r.start)).total_seconds() * 1000)


def _label(r: SpanRecord) -> str:
    what = r.attributes.get("lockstep.outcome") or r.attributes.get("lockstep.status") or ""
    error = f" [red]{r.error}[/red]" if r.error else ""
    return f"[bold]{r.name}[/bold] {r.start} +{_ms(r)} ms {what}{error}  [dim]{r.span_id:016x}[/dim]"


@click.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (one object per span).")
@click.option(
    "--export",
    is_flag=True,
    help="Send the spans again to the collector the OTEL_* variables name (same ids and times).",
)
@pass_ctx
def trace(c: Ctx, run_id: str, as_json: bool, export: bool) -> None:
    """The run's trace: its spans (run, steps, attempts, timers, approvals, compensation, operators)."""
    spans = run_spans(c.engine.service.kernel, c.tenant, run_id)
    if export:
        tracing = c.engine.service.tracing
        if tracing is None:
            raise InvalidInput(
                "--export needs tracing: set OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER) as for "
                "the other lockstep processes"
            )
        tracing.emit(spans)
    if as_json:
        print_json(
            [
                {
                    "name": r.name,
                    "trace_id": f"{r.trace.trace_id:032x}",
                    "span_id": f"{r.span_id:016x}",
                    "parent_id": f"{r.parent_id:016x}" if r.parent_id is not None else None,
                    "start": r.start,
                    "end": r.end,
                    "attributes": dict(r.attributes),
                    "events": [{"name": e.name, "at": e.at, **e.attributes} for e in r.events],
                    "error": r.error,
                }
                for r in spans
            ]
        )
        return
    if not spans:
        out.print(f"run {run_id} has ended no span yet")
        return
    first = spans[0].trace
    under = f" (under span {first.parent:016x})" if first.parent else ""
    root = Tree(f"trace {first.trace_id:032x}{under}")
    nodes: dict[int, Tree] = {}
    # A parent starts no later than its children: in order of start, each parent is placed first.
    for r in sorted(spans, key=lambda r: (parse_iso(r.start), _DEPTH.get(r.kind, 3))):
        nodes[r.span_id] = nodes.get(r.parent_id or 0, root).add(_label(r))
    if spans[-1].kind != "run":
        out.print(f"[dim]run {run_id} has not ended: its root span is not emitted yet[/dim]")
    out.print(root)
    if export:
        out.print(f"exported {len(spans)} spans")


COMMANDS: tuple[click.Command, ...] = (trace,)
