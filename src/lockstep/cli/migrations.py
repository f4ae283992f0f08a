"""`lockstep migrations list|show|pass`: migrations that need approval, for operators at the keyboard.
Requests are made by `lockstep migrate` (a run, or a bulk batch); approvers decide them from the UI
inbox or with `POST /v1/approvals/{request_id}/decide`, never from here (the CLI user has the database:
a CLI decision could name anyone). `list` and `show` work over --url too (as the API key's user);
`pass` is the scheduler's work and needs the database."""

from __future__ import annotations

import click

from ..app.migrations import Migrations
from ..app.views import MigrationRequestView
from .backend import as_view, as_views
from .context import Ctx, pass_ctx
from .render import print_json

__all__ = ["COMMANDS"]


def _migrations(c: Ctx) -> Migrations:
    m: Migrations = c.engine.service.migrations
    return m


@click.group("migrations")
def migrations() -> None:
    """Migrations that need approval: the requests `lockstep migrate` made."""


@migrations.command("list")
@click.option(
    "--status", type=click.Choice(["pending", "approved", "applied", "rejected", "expired"]), default=None
)
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 500))
@pass_ctx
def list_(c: Ctx, status: str | None, limit: int) -> None:
    """The tenant's migration requests, newest first."""
    if c.remote:
        rows = c.client.migration_requests(status=status, limit=limit)
        print_json(as_views(MigrationRequestView, rows))
        return
    print_json(_migrations(c).requests(c.tenant, status, limit))


@migrations.command("show")
@click.argument("request_id")
@pass_ctx
def show(c: Ctx, request_id: str) -> None:
    """One request: its runs (and each one's outcome), versions, reason, approvers and decisions."""
    if c.remote:
        print_json(as_view(MigrationRequestView, c.client.migration_request(request_id)))
        return
    print_json(_migrations(c).request(c.tenant, request_id))


@migrations.command("pass")
@pass_ctx
def pass_(c: Ctx) -> None:
    """Run the scheduler's migration pass once: expire undecided requests past their time, apply
    granted ones a crash left unfinished (idempotent)."""
    print_json({"done": _migrations(c).run_pass()})


COMMANDS: tuple[click.Command, ...] = (migrations,)
