"""Runs: start, show, the event history, list, cancel; a run's legal hold and its purge."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click
from rich.table import Table
from rich.text import Text

from ..app.principals import Principal
from ..app.retention import Retention
from ..app.views import RunSummary
from ..core.narrate import narrate
from ..core.state import STATUSES
from .context import Ctx, cli_user, pass_ctx
from .inputs import parse_json
from .render import STATUS_STYLE, out, print_json, print_run
from .retention import reason_command

__all__ = ["COMMANDS"]

F = TypeVar("F", bound=Callable[..., object])


@click.command()
@click.argument("name")
@click.option("--version", "version", type=int, help="Definition version (default: latest).")
@click.option("--input", "input_", help="Run input as JSON, or @file.json.")
@click.option("--key", help="Start key: the same key returns the same run.")
@click.option(
    "--traceparent",
    envvar="TRACEPARENT",
    help="W3C traceparent of the caller's span: the run's trace becomes part of the caller's "
    "(default: $TRACEPARENT).",
)
@pass_ctx
def start(
    c: Ctx, name: str, version: int | None, input_: str | None, key: str | None, traceparent: str | None
) -> None:
    """Start a run of definition NAME; prints {"run_id"}."""
    payload = parse_json(input_, "--input")
    run_id = c.engine.start(
        name,
        input=payload,
        key=key,
        version=version,
        tenant=c.tenant,
        actor=cli_user(),
        traceparent=traceparent or None,
    )
    print_json({"run_id": run_id})


def _revealer(c: Ctx, who: str | None, run_id: str, what: str) -> Principal:
    """The user a --reveal is made as (and audited for): --as, else $USER; they need read_sensitive."""
    name = who or cli_user()
    return c.engine.service.reveal.as_user(
        c.tenant, name, run_id, what=what, channel="cli", hint="name one with --as USER"
    )


json_opt = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
reveal_opt = click.option(
    "--reveal", is_flag=True, help="Show sensitive values (needs the read_sensitive grant; audited)."
)
as_opt = click.option("--as", "who", metavar="USER", help="The user a --reveal is made as (default: $USER).")


def _showing(f: F) -> F:
    """A command that shows one run: RUN_ID, then --json, --reveal and --as."""
    return click.argument("run_id")(json_opt(reveal_opt(as_opt(f))))


@click.command()
@_showing
@pass_ctx
def show(c: Ctx, run_id: str, as_json: bool, reveal: bool, who: str | None) -> None:
    """Show a run: status, current step, why it waits and what happens next (sensitive values redacted)."""
    svc = c.engine.service
    s = (
        svc.reveal.run(_revealer(c, who, run_id, "run"), run_id, channel="cli")
        if reveal
        else svc.show(c.tenant, run_id)
    )
    if as_json:
        print_json(s)
    else:
        print_run(s)
        for h in svc.retention.holding(c.tenant, run_id):
            on = "this run" if h.run_id else f"tenant {h.tenant}"
            since = f"since {h.held_at} by {h.held_by}"
            out.print(f"legal hold on {on} {since}: {h.reason} (never purged while held)")


@click.command()
@_showing
@pass_ctx
def events(c: Ctx, run_id: str, as_json: bool, reveal: bool, who: str | None) -> None:
    """The run's event history (append-only, hash-chained; sensitive values redacted)."""
    svc = c.engine.service
    if reveal:
        rows = svc.reveal.events(_revealer(c, who, run_id, "events"), run_id, channel="cli")
    else:
        rows = svc.events(c.tenant, run_id)
    if as_json:
        print_json(rows)
        return
    t = Table("seq", "at", "type", "what happened")
    for e in rows:
        what = narrate(e.type, e.data, e.at) if isinstance(e.data, dict) else e.data  # else: a marker
        t.add_row(str(e.seq), e.at, e.type, what)
    out.print(t)


@click.group(invoke_without_command=True)
@click.option(
    "--status",
    type=click.Choice(STATUSES),
)
@click.option("--definition", help="Only runs of this definition.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@click.option("--before", default="", help="Cursor: the next page, older than this run id.")
@click.option("--after", default=None, help="Cursor: oldest first, from the run after this run id.")
@click.option("--oldest-first", is_flag=True, help="Oldest first, from the first run.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def runs(
    c: Ctx,
    status: str | None,
    definition: str | None,
    limit: int,
    before: str,
    after: str | None,
    oldest_first: bool,
    as_json: bool,
) -> None:
    """List runs, newest first (as the API and the UI do), with filters and cursors; `runs
    hold|release|purge RUN` for retention, `runs forget RUN` destroys a run's key."""
    if click.get_current_context().invoked_subcommand is not None:
        return
    ascending = after is not None or oldest_first
    rows = c.engine.service.runs(
        c.tenant,
        status=status,
        definition=definition,
        limit=limit,
        after=after or "",
        before=None if ascending else before,
    )
    if as_json:
        print_json([RunSummary.of(r) for r in rows])
        return
    t = Table("run", "status", "definition", "step", "why / next")
    for r in rows:
        style = STATUS_STYLE.get(r.status, "")
        t.add_row(
            r.run_id,
            Text(r.status, style=style),
            f"{r.definition.name} v{r.definition.version}",
            r.current_step or "",
            r.wait_reason or "",
        )
    out.print(t)


@click.command()
@click.argument("run_id")
@click.option("--reason", required=True, help="Why (recorded in the audit trail).")
@pass_ctx
def cancel(c: Ctx, run_id: str, reason: str) -> None:
    """Cancel a run: start nothing new, wait for in-flight work, compensate, end cancelled."""
    print_json(c.engine.cancel(run_id, reason=reason, tenant=c.tenant, actor=cli_user()))


reason_command(
    runs,
    "hold",
    "run_id",
    Retention.hold_run,
    "Place a legal hold on a run (running or finished): it is never purged until released.",
)
reason_command(
    runs,
    "release",
    "run_id",
    Retention.release_run,
    "Release a run's legal hold: once past its tenant's retention it is purged again.",
)
reason_command(
    runs,
    "purge",
    "run_id",
    Retention.purge_run,
    "Purge a finished, unheld run now, whatever the retention; prints its tombstone.",
    why="Why, e.g. an erasure request (kept in its tombstone).",
)


# The commands of this group, attached to the root group in root.py.
COMMANDS: tuple[click.Command, ...] = (start, show, events, runs, cancel)
