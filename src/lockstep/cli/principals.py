"""Tenants, their limits, retention and legal holds; users, their roles, groups, passwords, e-mail
addresses and API keys."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

import click

from ..app.principals import Principals
from ..app.retention import Retention
from ..errors import InvalidInput
from .context import Ctx, cli_user, pass_ctx
from .inputs import seconds
from .render import err, print_json
from .retention import RetentionCall, reason_command

__all__ = ["COMMANDS"]

F = TypeVar("F", bound=Callable[..., object])


def _principals(c: Ctx) -> Principals:
    return c.engine.service.principals


def _csv(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


@click.group()
def tenants() -> None:
    """Tenants and their limits."""


@tenants.command("create")
@click.argument("name")
@pass_ctx
def tenants_create(c: Ctx, name: str) -> None:
    """Create tenant NAME."""
    print_json(_principals(c).create_tenant(name, actor=cli_user()))


def _value_limit_options(f: F) -> F:
    """--max-input-bytes, --max-json-depth, ...: one option per value limit, up to its ceiling."""
    from ..core.limits import TENANT_LIMITS  # noqa: PLC0415

    for name, limit in reversed(TENANT_LIMITS.items()):
        f = click.option(
            f"--{name.replace('_', '-')}",
            name,
            type=click.IntRange(1, limit.ceiling),
            help=f"Bound on {limit.protects}, in {limit.unit} (default {limit.default}).",
        )(f)
    return f


@tenants.command("set")
@click.argument("name")
@click.option("--max-active-runs", type=click.IntRange(1), help="Non-terminal runs allowed at once.")
@click.option(
    "--starts-per-second", type=click.FloatRange(min=0.001), help="Sustained run starts per second."
)
@click.option("--max-steps", type=click.IntRange(1, 1000), help="Steps allowed per definition.")
@click.option("--activity-concurrency", type=click.IntRange(1), help="Activity attempts running at once.")
@click.option("--unserved-after", help="Dead-letter tasks no worker takes within this long, e.g. 10m.")
@click.option("--max-history-events", type=click.IntRange(10), help="Events per run before it is cancelled.")
@click.option("--max-run-time", help="Total time per run before it is cancelled, e.g. 30d.")
@click.option(
    "--max-timers", type=click.IntRange(1), help="Durable timers armed at once (starts beyond: 429)."
)
@click.option(
    "--retention",
    metavar="DURATION|none",
    help="Purge finished runs this long after their terminal event, e.g. 90d (none: keep forever).",
)
@_value_limit_options
@pass_ctx
def tenants_set(
    c: Ctx,
    /,
    name: str,
    max_active_runs: int | None,
    starts_per_second: float | None,
    max_steps: int | None,
    activity_concurrency: int | None,
    unserved_after: str | None,
    max_history_events: int | None,
    max_run_time: str | None,
    max_timers: int | None,
    retention: str | None,
    **value_limits: int | None,
) -> None:
    """Change tenant NAME's limits and retention (only the options given)."""
    changes: dict[str, float | None] = {
        "max_active_runs": max_active_runs,
        "starts_per_second": starts_per_second,
        "max_steps": max_steps,
        "activity_concurrency": activity_concurrency,
        "unserved_after": seconds(unserved_after, "--unserved-after"),
        "max_history_events": max_history_events,
        "max_run_seconds": seconds(max_run_time, "--max-run-time"),
        "max_timers": max_timers,
        **value_limits,
    }
    changes = {k: v for k, v in changes.items() if v is not None}
    if retention is not None:
        changes["retention"] = _retention(retention)  # None (keep forever) unsets it
    if not changes:
        raise InvalidInput("give at least one limit option (see `lockstep tenants set --help`)")
    print_json(_principals(c).set_tenant(name, actor=cli_user(), **changes))
    if changes.get("retention"):
        st = c.engine.service.retention.status(name).tenants[0]
        err.print(
            f"retention {st.retention}: {st.due_now} finished run(s) of {name} are past it now and go in "
            f"the next purge passes; {st.held_runs} held run(s) stay (`lockstep retention status`)"
        )


def _retention(text: str) -> int | None:
    if text.strip().lower() in ("none", "forever", "off"):
        return None
    keep = seconds(text, "--retention") or 0
    if keep < 1:
        raise InvalidInput(f"--retention {text!r}: at least 1s, or `none` to keep finished runs forever")
    return int(keep)


def _whole_tenant(act: Callable[[Retention, str, str, str], object]) -> RetentionCall:
    """A tenant's hold or release in reason_command's shape: the tenant is the command's argument."""
    return lambda retention, _given_tenant, name, reason, who: act(retention, name, reason, who)


reason_command(
    tenants,
    "hold",
    "name",
    _whole_tenant(Retention.hold_tenant),
    "Place a legal hold on tenant NAME: none of its runs is purged until the hold is released.",
)
reason_command(
    tenants,
    "release",
    "name",
    _whole_tenant(Retention.release_tenant),
    "Release tenant NAME's legal hold: its runs past retention are purged again.",
)


@tenants.command("list")
@pass_ctx
def tenants_list(c: Ctx) -> None:
    """List tenants and their settings."""
    print_json(_principals(c).tenants())


@click.group()
def users() -> None:
    """Users (people and services) of a tenant, their roles, groups and keys."""


tenant_opt = click.option("--tenant", "tenant", help="Tenant (default: the global --tenant).")


@users.command("create")
@click.argument("name")
@tenant_opt
@click.option("--roles", required=True, help="Comma-separated: admin, operator, approver, viewer, worker.")
@click.option("--groups", default="", help="Comma-separated group names, e.g. finance,managers.")
@click.option(
    "--grant", "grants", multiple=True, type=click.Choice(["read_sensitive"]), help="A per-user grant."
)
@pass_ctx
def users_create(
    c: Ctx, name: str, tenant: str | None, roles: str, groups: str, grants: tuple[str, ...]
) -> None:
    """Create a user; prints its API key ONCE (only a hash is stored)."""
    created = _principals(c).create_user(
        tenant or c.tenant, name, _csv(roles), _csv(groups), actor=cli_user()
    )
    for g in grants:
        _principals(c).set_grant(tenant or c.tenant, name, g, granted=True, by=cli_user())
    print_json(created)


@users.command("disable")
@click.argument("name")
@tenant_opt
@pass_ctx
def users_disable(c: Ctx, name: str, tenant: str | None) -> None:
    """Disable a user: their key, sessions and links stop working at once (enabling does not revive
    the sessions)."""
    print_json(_principals(c).disable_user(tenant or c.tenant, name, actor=cli_user()))


@users.command("enable")
@click.argument("name")
@tenant_opt
@pass_ctx
def users_enable(c: Ctx, name: str, tenant: str | None) -> None:
    """Enable a disabled user again."""
    print_json(_principals(c).enable_user(tenant or c.tenant, name, actor=cli_user()))


@users.command("set-password")
@click.argument("name")
@tenant_opt
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@pass_ctx
def users_set_password(c: Ctx, name: str, tenant: str | None, password_stdin: bool) -> None:
    """Set the password used to log in to the web UI; ends the user's UI sessions.

    At least 12 characters, and not easy to guess (checked offline against lists of common passwords,
    words, names and keyboard patterns): a passphrase of four or more unrelated words works."""
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    print_json(_principals(c).set_password(tenant or c.tenant, name, password, actor=cli_user()))


@users.command("rotate-key")
@click.argument("name")
@tenant_opt
@pass_ctx
def users_rotate_key(c: Ctx, name: str, tenant: str | None) -> None:
    """Replace a user's API key; prints the new key once, the old one stops working and the user's UI
    sessions end."""
    print_json(_principals(c).rotate_key(tenant or c.tenant, name, actor=cli_user()))


@users.command("set")
@click.argument("name")
@tenant_opt
@click.option("--roles", help="Replace the roles (comma-separated).")
@click.option("--groups", help="Replace the groups (comma-separated; empty string for none).")
@pass_ctx
def users_set(c: Ctx, name: str, tenant: str | None, roles: str | None, groups: str | None) -> None:
    """Change a user's roles or groups."""
    print_json(
        _principals(c).set_membership(
            tenant or c.tenant,
            name,
            roles=_csv(roles) if roles is not None else None,
            groups=_csv(groups) if groups is not None else None,
            actor=cli_user(),
        )
    )


@users.command("list")
@tenant_opt
@pass_ctx
def users_list(c: Ctx, tenant: str | None) -> None:
    """List a tenant's users (never their keys)."""
    print_json(_principals(c).users(tenant or c.tenant))


@users.command("set-email")
@click.argument("name")
@click.argument("email")
@tenant_opt
@pass_ctx
def users_set_email(c: Ctx, name: str, email: str, tenant: str | None) -> None:
    """Set the address the SMTP notifier sends approval links to."""
    print_json(_principals(c).set_email(tenant or c.tenant, name, email, actor=cli_user()))


# The commands of this group, attached to the root group in root.py.
COMMANDS: tuple[click.Command, ...] = (tenants, users)
