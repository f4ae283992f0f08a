"""Secrets by reference and egress policies: `secrets set|list|delete` and `tenants egress set|show`.

A secret's value is read from stdin (never an argument: every user of the machine can read the process
list), and no command prints one: `list` shows names, versions and dates. Each change is audited with
the CLI user as its actor."""

from __future__ import annotations

import sys

import click

from ..errors import InvalidInput
from .context import Ctx, cli_user, pass_ctx
from .render import print_json

__all__ = ["COMMANDS", "tenants_egress"]


@click.group()
def secrets() -> None:
    """Secrets that http steps name in `auth: {secret: NAME}` (values are never shown)."""


@secrets.command("set")
@click.argument("name")
@click.option("--tenant", "tenant", help="Tenant of the secret (default: the global --tenant).")
@pass_ctx
def secrets_set(c: Ctx, name: str, tenant: str | None) -> None:
    """Set NAME's value from stdin (one trailing newline is dropped); setting it again adds a version
    (rotation): steps use the newest unless they pin `auth.version`."""
    if sys.stdin.isatty():
        click.echo(f"value of secret {name} (then Enter):", err=True)
    value = sys.stdin.readline() if sys.stdin.isatty() else sys.stdin.read()
    value = value.removesuffix("\n").removesuffix("\r")
    if not value:
        raise InvalidInput(f"secret {name}: no value on stdin (e.g. `lockstep secrets set {name} < file`)")
    print_json(c.engine.service.secrets.set(tenant or c.tenant, name, value, actor=cli_user()))


@secrets.command("list")
@click.option("--tenant", "tenant", help="Tenant (default: the global --tenant).")
@pass_ctx
def secrets_list(c: Ctx, tenant: str | None) -> None:
    """Every secret of the tenant: names, versions and who set them when (never a value)."""
    print_json(c.engine.service.secrets.list(tenant or c.tenant))


@secrets.command("delete")
@click.argument("name")
@click.option("--tenant", "tenant", help="Tenant (default: the global --tenant).")
@click.option("--version", type=click.IntRange(min=1), help="Delete only this version.")
@pass_ctx
def secrets_delete(c: Ctx, name: str, tenant: str | None, version: int | None) -> None:
    """Delete NAME (every version; its data key is destroyed) or one --version of it."""
    print_json(c.engine.service.secrets.delete(tenant or c.tenant, name, version=version, actor=cli_user()))


@click.group("egress")
def tenants_egress() -> None:
    """Where a tenant's http steps may send requests (default: nowhere)."""


@tenants_egress.command("set")
@click.argument("tenant")
@click.option("--allow", "allow", multiple=True, help="An allowed URL prefix, e.g. https://api.example.com/.")
@click.option("--allow-host", "hosts", multiple=True, help="An allowed host; *.example.org: its subdomains.")
@click.option("--allow-http", is_flag=True, help="Allow http:// too (HTTPS only otherwise).")
@click.option(
    "--allow-loopback",
    is_flag=True,
    help="Tests only: needs the server setting --limit egress_allow_loopback=1 on every process.",
)
@pass_ctx
def egress_set(
    c: Ctx,
    tenant: str,
    allow: tuple[str, ...],
    hosts: tuple[str, ...],
    allow_http: bool,
    allow_loopback: bool,
) -> None:
    """Replace TENANT's egress policy with the given prefixes and hosts (none given: nothing allowed)."""
    policy = {
        "allow": list(allow),
        "allow_hosts": list(hosts),
        "allow_http": allow_http,
        "allow_loopback": allow_loopback,
    }
    print_json(c.engine.service.egress.set(tenant, policy, actor=cli_user()))


@tenants_egress.command("show")
@click.argument("tenant")
@pass_ctx
def egress_show(c: Ctx, tenant: str) -> None:
    """TENANT's egress policy."""
    print_json(c.engine.service.egress.show(tenant))


COMMANDS: tuple[click.Command, ...] = (secrets,)
