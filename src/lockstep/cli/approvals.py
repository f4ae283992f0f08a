"""Approvals (links, approvers of waiting runs) and the signing secret of approval webhooks."""

from __future__ import annotations

import click

from ..app.approvals import Approvals
from .context import Ctx, cli_user, pass_ctx
from .inputs import duration
from .render import print_json
from .webhooks import SUBSCRIPTION_COMMANDS

__all__ = ["COMMANDS"]


@click.group()
def webhooks() -> None:
    """Signed approval webhooks (Standard Webhooks)."""


@webhooks.command("secret")
def webhooks_secret() -> None:
    """Print a new whsec_ signing secret (give it to the receiver; start serve with it in
    LOCKSTEP_WEBHOOK_SECRET_FILE or LOCKSTEP_WEBHOOK_SECRET)."""
    from ..runtime.webhook import new_secret  # noqa: PLC0415

    click.echo(new_secret())


public_url_opt = click.option(
    "--public-url",
    envvar="LOCKSTEP_PUBLIC_URL",
    default="http://127.0.0.1:8080",
    show_default=True,
    help="Base URL of `lockstep serve`, used in approval links.",
)


@click.group()
def approvals() -> None:
    """Approval links and approvers of waiting runs (operators)."""


def _approvals(c: Ctx, public_url: str = "http://127.0.0.1:8080") -> Approvals:
    return c.engine.service.approvals.linking_to(public_url)


@approvals.command("link")
@click.argument("run_id")
@click.argument("step")
@click.option("--approver", required=True, help="The user the link is for (it works only for them).")
@click.option("--expires-in", help="e.g. 1d (never later than the step's timeout).")
@public_url_opt
@pass_ctx
def approvals_link(
    c: Ctx, run_id: str, step: str, approver: str, expires_in: str | None, public_url: str
) -> None:
    """Mint and print a fresh single-use link {"url", "token", "expires_at"} (recorded in the history)."""
    expires = duration(expires_in, "--expires-in") if expires_in else None
    print_json(
        _approvals(c, public_url).mint(c.tenant, run_id, step, approver, expires_in=expires, by=cli_user())
    )


@approvals.command("links")
@click.argument("run_id")
@pass_ctx
def approvals_links(c: Ctx, run_id: str) -> None:
    """Links of the run's pending approval request (ids and status, never tokens)."""
    print_json(_approvals(c).links(c.tenant, run_id))


@approvals.command("revoke")
@click.argument("link_id")
@click.option("--reason", required=True)
@pass_ctx
def approvals_revoke(c: Ctx, link_id: str, reason: str) -> None:
    """Revoke a pending link (e.g. after resending a new one)."""
    print_json(_approvals(c).revoke(c.tenant, link_id, reason, actor=cli_user()))


@approvals.command("reassign")
@click.argument("run_id")
@click.argument("step")
@click.option("--from", "old", required=True, help="The approver to replace.")
@click.option("--to", "new", required=True, help="The new approver (an enabled user).")
@click.option("--reason", required=True)
@pass_ctx
def approvals_reassign(c: Ctx, run_id: str, step: str, old: str, new: str, reason: str) -> None:
    """Replace an approver on a pending request; their links are revoked, the new one is notified."""
    print_json(_approvals(c).reassign(c.tenant, run_id, step, old, new, reason, actor=cli_user()))


# The commands of this group, attached to the root group in root.py.
for _command in SUBSCRIPTION_COMMANDS:  # run webhooks (cli/webhooks.py)
    webhooks.add_command(_command)

COMMANDS: tuple[click.Command, ...] = (webhooks, approvals)
