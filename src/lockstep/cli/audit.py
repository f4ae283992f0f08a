"""The audit log: `lockstep audit` lists a tenant's rows (newest first) as a table, a JSON page or JSON
lines (an export, read a page at a time); filters as in GET /v1/audit."""

from __future__ import annotations

from dataclasses import asdict

import click
from rich.table import Table
from rich.text import Text

from ..app.audit import DEFAULT_PAGE, MAX_PAGE, audit_filter
from ..app.views import AuditEntry
from ..core.canonical import canonical_json
from ..errors import InvalidInput
from .context import Ctx, cli_user, pass_ctx
from .render import out, print_json

__all__ = ["COMMANDS"]

OUTCOME_STYLE = {"ok": "green", "refused": "red", "throttled": "yellow", "failed": "red"}


def _detail(row: AuditEntry) -> str:
    return ", ".join(
        f"{k}={v if isinstance(v, str) else canonical_json(v)}" for k, v in sorted(row.detail.items())
    )


@click.command("audit")
@click.option("--tenant", "tenant", default=None, help="Whose rows (default: the global --tenant).")
@click.option(
    "--no-tenant", is_flag=True, help="The rows without a tenant (unknown tenants at login, unknown keys)."
)
@click.option("--actor", default=None, help="Only this user's rows.")
@click.option("--action", default=None, help="An action (repair.pause) or a prefix ending in '.' (repair.).")
@click.option("--outcome", default=None, help="ok, refused, throttled or failed.")
@click.option("--since", default=None, help="Rows at or after this time (RFC 3339: 2025-06-01T00:00:00Z).")
@click.option("--until", default=None, help="Rows before this time (RFC 3339).")
@click.option(
    "--limit",
    "limit",
    type=int,
    default=None,
    help=f"Rows to show (default {DEFAULT_PAGE}, at most {MAX_PAGE}; with --jsonl: all unless given).",
)
@click.option("--cursor", default=None, help="Continue after a page (the `next` of --json output).")
@click.option("--json", "as_json", is_flag=True, help="One page as JSON, with the cursor of the next.")
@click.option("--jsonl", "as_jsonl", is_flag=True, help="Export: one JSON row per line, every match.")
@pass_ctx
def audit(
    c: Ctx,
    tenant: str | None,
    no_tenant: bool,
    actor: str | None,
    action: str | None,
    outcome: str | None,
    since: str | None,
    until: str | None,
    limit: int | None,
    cursor: str | None,
    as_json: bool,
    as_jsonl: bool,
) -> None:
    """The audit log of a tenant, newest first: logins, refusals, operator commands, exports."""
    if as_json and as_jsonl:
        raise InvalidInput("--json and --jsonl: choose one (a page as JSON, or every row as JSON lines)")
    if no_tenant and tenant is not None:
        raise InvalidInput("--tenant and --no-tenant: choose one")
    where = audit_filter(actor=actor, action=action, outcome=outcome, since=since, until=until)
    scope = None if no_tenant else (tenant or c.tenant)
    log = c.engine.service.audit
    if as_jsonl:
        if cursor is not None:
            raise InvalidInput("--cursor pages the list; --jsonl exports every row: leave --cursor out")
        if limit is not None and limit < 1:
            raise InvalidInput(f"--limit: {limit} is out of range; give 1 or more rows")
        described = {k: v for k, v in asdict(where).items() if v is not None}
        who = cli_user()
        log.record(scope, who, "audit.export", None, "ok", channel="cli", **described)
        for row in log.export(scope, where, limit=limit):
            click.echo(row.model_dump_json())
        return
    page = log.page(scope, where, cursor=cursor, limit=DEFAULT_PAGE if limit is None else limit)
    if as_json:
        print_json(page)
        return
    t = Table("id", "at", "actor", "action", "target", "outcome", "detail")
    for row in page.items:
        style = OUTCOME_STYLE.get(row.outcome, "")
        t.add_row(
            str(row.id),
            row.at,
            row.actor or "—",
            row.action,
            row.target or "",
            Text(row.outcome, style=style),
            _detail(row),
        )
    out.print(t)
    where_text = "rows without a tenant" if scope is None else f"tenant {scope}"
    more = f"; older rows: --cursor {page.next}" if page.next else ""
    out.print(f"{len(page.items)} row(s) of {where_text}, newest first{more}")


# The commands of this group, attached to the root group in root.py.
COMMANDS: tuple[click.Command, ...] = (audit,)
