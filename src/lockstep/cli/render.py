"""Rich output shared by the command groups: the two consoles, JSON on stdout, one-line errors, a run."""

from __future__ import annotations

import json
import sys
from typing import NoReturn

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..app.views import RunView, plain
from ..app.views.recorded import ErrorInfo
from ..core.sealed import text_of
from ..core.state import STEP_OPEN

__all__ = ["STATUS_STYLE", "err", "fail", "out", "print_json", "print_run"]


# Piped output (scripts, tests, CI logs) gets a wide console so run ids and reasons are not wrapped.
# Markup is off by default: what the consoles print is mostly tenants' and workers' text (step names,
# error messages, a redaction's "[sensitive]"), which Rich would otherwise read as tags and swallow or
# style. A line that wants styling says markup=True and escapes what it interpolates.
out = Console(highlight=False, soft_wrap=True, markup=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)
STATUS_STYLE = {
    "completed": "green",
    "failed": "red",
    "cancelled": "yellow",
    "needs_attention": "bold magenta",
    "waiting": "cyan",
    "running": "blue",
    "cancelling": "yellow",
    "compensating": "yellow",
}


def fail(message: str, code: int = 2) -> NoReturn:
    err.print(f"[red]error:[/red] {escape(message)}", markup=True, highlight=False)
    sys.exit(code)


def print_json(value: object) -> None:
    """`value` (views, or lists and dicts of them) as indented JSON on stdout."""
    click.echo(json.dumps(plain(value), indent=2, ensure_ascii=False))


def _error(error: ErrorInfo | str) -> str:
    """An error's code and message; a marker (a stored value too large to show) as it is."""
    if isinstance(error, str):
        return error
    return f"{error.get('code')}: {text_of(error.get('message'))}"


def _when(at: str | None) -> str:
    """An event time as a table shows it: `2025-01-01 09:30:00` (UTC; the JSON keeps milliseconds)."""
    return at[:19].replace("T", " ") if at else ""


def print_run(s: RunView) -> None:
    style = STATUS_STYLE.get(s.status, "")
    d = s.definition
    out.print(
        f"[bold]{s.run_id}[/bold]  [{style}]{s.status}[/{style}]  "
        f"{escape(d.name)} v{d.version}  tenant {escape(s.tenant)}",
        markup=True,
    )
    if s.damaged:  # the scrub marked it: say so before anything that reads like an ordinary wait
        out.print(f"[bold red]damaged, every command refused:[/bold red] {escape(s.damaged)}", markup=True)
    if s.current_step:
        out.print(f"current step: {s.current_step}")
    if s.parent is not None:
        out.print(f"child of run {s.parent.run_id} (its step {s.parent.step})")
    for key, child in s.children.items():
        out.print(f"step {key} waits for child run {child.child_run_id} ({child.definition})")
    for key, w in s.event_waits.items():
        cb = " (callback: `lockstep callbacks mint RUN STEP`)" if w.callback else ""
        out.print(escape(f"step {key} waits for event {w.name} (key {w.key}) until {w.expires_at}{cb}"))
    if s.wait_reason:
        out.print(f"[bold]why:[/bold]  {escape(s.wait_reason or '')}", markup=True)
        out.print(f"[bold]next:[/bold] {escape(s.next_action or '')}", markup=True)
    if s.error:
        out.print(f"[red]error:[/red] {escape(_error(s.error))}", markup=True)
    if s.status == "completed":
        out.print(f"output: {json.dumps(s.output)}")
    t = Table("step", "status", "attempts", "started", "finished", "took", "idempotency key", "detail")
    for sid, st in s.steps.items():
        detail = ""
        if st.kind == "approval" and st.took():
            detail = f"time in approval {st.took()}"  # requested to decided, or so far
        if st.error:
            detail = _error(st.error)
        comp = st.compensation
        if comp:
            detail = (detail + "; " if detail else "") + (
                comp
                if isinstance(comp, str)
                else f"compensation {comp['status']} ({comp['attempts']} attempt(s))"
            )
        finished = "" if st.status in STEP_OPEN else _when(st.finished_at)
        t.add_row(
            sid,
            st.status,
            str(st.attempts),
            _when(st.started_at),
            finished,
            st.took(),
            st.idempotency_key or "",
            detail,
        )
    out.print(t)
    if s.lanes:  # the branches and items of its parallel and for-each steps
        lanes = Table("lane", "of step", "status", "at step", "detail")
        for lid, ln in s.lanes.items():
            what = f"{ln.kind} {ln.name}"
            lanes.add_row(
                lid, ln.step, ln.status, ln.current_step or "", _error(ln.error) if ln.error else what
            )
        out.print(lanes)
