"""Runs: start, show, the event history, list, cancel; a run's legal hold and its purge."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click
from rich.table import Table
from rich.text import Text

from ..app.principals import Principal
from ..app.retention import Retention
from ..app.search import Filters
from ..app.views import EventView, RunSummary, RunView
from ..core.explain import WAIT_KINDS
from ..core.narrate import narrate
from ..core.state import STATUSES
from ..errors import InvalidInput
from .backend import backend
from .context import Ctx, cli_user, pass_ctx
from .inputs import parse_json
from .render import STATUS_STYLE, out, print_json, print_run
from .retention import reason_command

__all__ = ["COMMANDS"]

F = TypeVar("F", bound=Callable[..., object])
# The search's options that only list newest first (the store's search), by the filter each sets.
SEARCH_ONLY = {
    "--waiting": "waiting",
    "--run": "run",
    "--key": "key",
    "--version": "version",
    "--since": "since",
    "--until": "until",
    "--input": "input",
}


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
    print_json({"run_id": backend(c).start(name, payload, key, version, traceparent or None)})


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
    if c.remote:  # a --reveal is made as the API key's user (and audited for them)
        s = backend(c, unsupported={"--as": who}).show(run_id, reveal)
        if as_json:
            print_json(s)
        else:
            print_run(s)
        return
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
    if c.remote:  # a --reveal is made as the API key's user (and audited for them)
        _print_events(backend(c, unsupported={"--as": who}).events(run_id, reveal), as_json)
        return
    svc = c.engine.service
    if reveal:
        rows = svc.reveal.events(_revealer(c, who, run_id, "events"), run_id, channel="cli")
    else:
        rows = svc.events(c.tenant, run_id)
    _print_events(rows, as_json)


def _print_events(rows: list[EventView], as_json: bool) -> None:
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
@click.option("--waiting", type=click.Choice(WAIT_KINDS), help="Only runs waiting for this.")
@click.option("--run", "run_prefix", help="Only the run with this id, or the runs whose id begins so.")
@click.option("--key", help="Only the run started with this start key.")
@click.option("--version", type=click.IntRange(min=1), help="Only runs of this definition version.")
@click.option("--since", help="Only runs started at or after this time (ISO 8601; no offset: UTC).")
@click.option("--until", help="Only runs started before this time (ISO 8601; no offset: UTC).")
@click.option(
    "--input",
    "input_filter",
    help="Only runs whose input field equals a value: 'customer=ACME', 'address.city=\"Köln\"' "
    "(a sensitive field never matches).",
)
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
    waiting: str | None,
    run_prefix: str | None,
    key: str | None,
    version: int | None,
    since: str | None,
    until: str | None,
    input_filter: str | None,
    limit: int,
    before: str,
    after: str | None,
    oldest_first: bool,
    as_json: bool,
) -> None:
    """List and search runs, newest first (the search of the API and the UI, with --db or --url), with
    cursors; `runs hold|release|purge RUN` for retention, `runs forget RUN` destroys a run's key."""
    if click.get_current_context().invoked_subcommand is not None:
        return
    f = Filters(
        status=status or "",
        definition=definition or "",
        waiting=waiting or "",
        run=run_prefix or "",
        key=key or "",
        version=str(version or ""),
        since=since or "",
        until=until or "",
        input=input_filter or "",
    )
    if after is not None or oldest_first:  # the only listing oldest first: on the database, unsearched
        rows = _oldest_first(c, f, after or "", limit)
    else:
        rows = backend(c).runs(f, limit, before)
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


def _oldest_first(c: Ctx, f: Filters, after: str, limit: int) -> list[RunView]:
    searched = [o for o, v in SEARCH_ONLY.items() if getattr(f, v)]
    if c.remote or searched:
        with_what = "--url" if c.remote else ", ".join(searched)
        raise InvalidInput(
            f"--after and --oldest-first list runs oldest first, on the database (--db) by --status and "
            f"--definition only; with {with_what} runs are listed newest first (page on with --before)"
        )
    return c.engine.service.runs(
        c.tenant, status=f.status or None, definition=f.definition or None, limit=limit, after=after
    )


@click.command()
@click.argument("run_id")
@click.option("--reason", required=True, help="Why (recorded in the audit trail).")
@pass_ctx
def cancel(c: Ctx, run_id: str, reason: str) -> None:
    """Cancel a run: start nothing new, wait for in-flight work, compensate, end cancelled."""
    print_json(backend(c).cancel(run_id, reason))


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
