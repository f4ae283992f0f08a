"""`lockstep webhooks create|list|deliveries|replay`: run-webhook subscriptions of a tenant (admins at the
keyboard, audited with $USER as the actor). The group itself is cli/approvals.py's (`webhooks secret`
makes the approval channel's secret)."""

from __future__ import annotations

import click
from rich.table import Table

from ..app.webhooks import Webhooks
from ..core.effects import WEBHOOK_EVENTS
from .context import Ctx, cli_user, pass_ctx
from .render import out, print_json

__all__ = ["SUBSCRIPTION_COMMANDS"]

tenant_opt = click.option(
    "--tenant", "tenant", default=None, help="The tenant (default: the global --tenant)."
)


def _hooks(c: Ctx) -> Webhooks:
    w: Webhooks = c.engine.service.webhooks
    return w


@click.command("create")
@tenant_opt
@click.option("--url", required=True, help="The receiver: an https:// URL on a public address.")
@click.option(
    "--events",
    required=True,
    help=f"Comma-separated event types: {', '.join(WEBHOOK_EVENTS)}.",
)
@pass_ctx
def create(c: Ctx, tenant: str | None, url: str, events: str) -> None:
    """Subscribe URL to run events; prints the signing secret ONCE (give it to the receiver)."""
    made = _hooks(c).subscribe(tenant or c.tenant, url, events.split(","), cli_user())
    print_json(
        {"id": made.id, "tenant": made.tenant, "url": made.url, "events": made.events, "secret": made.secret}
    )


@click.command("list")
@tenant_opt
@pass_ctx
def list_(c: Ctx, tenant: str | None) -> None:
    """The tenant's subscriptions (never their secrets)."""
    rows = _hooks(c).subscriptions(tenant or c.tenant)
    print_json([{k: v for k, v in r.items() if k != "secret"} for r in rows])


@click.command("deliveries")
@tenant_opt
@click.argument("subscription")
@click.option("--limit", default=50, show_default=True)
@pass_ctx
def deliveries(c: Ctx, tenant: str | None, subscription: str, limit: int) -> None:
    """The subscription's delivery log, newest first: status, attempts, the receiver's last answer."""
    rows = _hooks(c).deliveries(tenant or c.tenant, subscription, limit)
    table = Table("delivery (webhook-id)", "event", "run", "status", "attempts", "last answer")
    for d in rows:
        last = str(d["last_status"] or "") + (f" {d['last_error']}" if d["last_error"] else "")
        table.add_row(d["id"], d["event"], d["run_id"], d["status"], str(d["attempts"]), last.strip())
    out.print(table)


@click.command("replay")
@tenant_opt
@click.argument("subscription")
@click.argument("delivery")
@pass_ctx
def replay(c: Ctx, tenant: str | None, subscription: str, delivery: str) -> None:
    """Deliver DELIVERY again (the same webhook-id: a receiver that kept it drops the copy)."""
    row = _hooks(c).replay(tenant or c.tenant, subscription, delivery, cli_user())
    print_json({"id": row["id"], "status": row["status"]})


SUBSCRIPTION_COMMANDS: tuple[click.Command, ...] = (create, list_, deliveries, replay)
