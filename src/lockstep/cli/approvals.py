"""Approvals (links, approvers of waiting runs) and the signing secret of approval webhooks. The
`approvals` commands work on the database or, with --url, over the HTTP API as the API key's user (a
link minted there points at the server's own public URL: --public-url does not apply)."""

from __future__ import annotations

import click
from rich.table import Table

from ..app.approvals import Approvals
from ..app.views import (
    DecisionResult,
    InboxItem,
    LinkView,
    MigrationRequestView,
    MintedLink,
    Reassigned,
    RevokedLink,
)
from ..errors import InvalidInput
from .backend import as_view, as_views
from .context import Ctx, cli_user, pass_ctx
from .inputs import duration, parse_json
from .render import out, print_json
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
    if c.remote:
        minted = c.client.mint_link(run_id, step, approver, expires_in=expires_in)
        print_json(as_view(MintedLink, minted))
        return
    print_json(
        _approvals(c, public_url).mint(c.tenant, run_id, step, approver, expires_in=expires, by=cli_user())
    )


@approvals.command("links")
@click.argument("run_id")
@pass_ctx
def approvals_links(c: Ctx, run_id: str) -> None:
    """Links of the run's pending approval request (ids and status, never tokens)."""
    if c.remote:
        print_json(as_views(LinkView, c.client.links(run_id)))
        return
    print_json(_approvals(c).links(c.tenant, run_id))


@approvals.command("revoke")
@click.argument("link_id")
@click.option("--reason", required=True)
@pass_ctx
def approvals_revoke(c: Ctx, link_id: str, reason: str) -> None:
    """Revoke a pending link (e.g. after resending a new one)."""
    if c.remote:
        print_json(as_view(RevokedLink, c.client.revoke_link(link_id, reason)))
        return
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
    if c.remote:
        print_json(as_view(Reassigned, c.client.reassign(run_id, step, old, new, reason)))
        return
    print_json(_approvals(c).reassign(c.tenant, run_id, step, old, new, reason, actor=cli_user()))


def _as_approver(c: Ctx, command: str) -> None:
    """An approver decides with their own key: over --url the server knows who they are. On the database
    the CLI could record any name, so deciding there is refused (the UI inbox or --url instead)."""
    if not c.remote:
        raise InvalidInput(
            f"`lockstep approvals {command}` works only over --url with your own API key (role approver): "
            "lockstep --url https://HOST --api-key-file FILE approvals " + command
        )


@approvals.command("inbox")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def approvals_inbox(c: Ctx, as_json: bool) -> None:
    """The requests your API key's user may decide (over --url): decide one with `approvals decide`."""
    _as_approver(c, "inbox")
    items = as_views(InboxItem, c.client.inbox())
    if as_json:
        print_json(items)
        return
    t = Table("request", "kind", "run", "step", "definition", "decisions", "expires")
    for i in items:
        d = i.definition
        votes = f"{len(i.decisions)}/{i.quorum}"
        t.add_row(i.request_id, i.kind, i.run_id, i.step, f"{d.name} v{d.version}", votes, i.expires_at)
    out.print(t)


@approvals.command("decide")
@click.argument("request_id")
@click.argument("decision", type=click.Choice(["approve", "reject"]))
@click.option("--comment", help="Recorded with your decision.")
@click.option("--values", "values", help="The approval form's values as a JSON object, or @file.json.")
@pass_ctx
def approvals_decide(c: Ctx, request_id: str, decision: str, comment: str | None, values: str | None) -> None:
    """Approve or reject REQUEST_ID from your inbox (over --url, as your API key's user)."""
    _as_approver(c, "decide")
    form = parse_json(values, "--values")
    if form is not None and not isinstance(form, dict):
        raise InvalidInput('--values: give a JSON object of the form\'s fields, e.g. {"amount": 12}')
    answer = c.client.decide(request_id, decision, comment=comment, values=form)
    view = DecisionResult if hasattr(answer, "run_id") else MigrationRequestView
    print_json(as_view(view, answer))


# The commands of this group, attached to the root group in root.py.
for _command in SUBSCRIPTION_COMMANDS:  # run webhooks (cli/webhooks.py)
    webhooks.add_command(_command)

COMMANDS: tuple[click.Command, ...] = (webhooks, approvals)
