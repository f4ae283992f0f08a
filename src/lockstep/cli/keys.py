"""Encryption keys and crypto-shredding: `keys init|rotate|status`, `runs forget`, `tenants shred`, and the
grants that let a user read sensitive values (`users grant|revoke`). Each change is audited."""

from __future__ import annotations

import getpass
import os

import click

from ..app.keys import KEY_FILE_ENV, create_key_file
from ..app.views import KeyFileCreated
from ..core.sealed import READ_GRANT
from ..errors import InvalidInput
from .context import Ctx, cli_user, pass_ctx
from .render import print_json

__all__ = ["COMMANDS", "runs_forget", "tenants_shred", "users_grant", "users_revoke"]


def _actor() -> str | None:
    return cli_user() or getpass.getuser()


@click.group()
def keys() -> None:
    """Encryption keys of sensitive values: the key file, rotation, status."""


@keys.command("init")
@pass_ctx
def keys_init(c: Ctx) -> None:
    """Create the key file that seals sensitive values (32 random bytes, mode 0600) at --key-file or
    LOCKSTEP_KEY_FILE; never overwrites one. Keep it outside the database and back it up: without it
    no sealed value can be read again."""
    path = c.key_file or os.environ.get(KEY_FILE_ENV)
    if not path:
        raise InvalidInput(f"say where to create the key file: --key-file PATH (or {KEY_FILE_ENV}=PATH)")
    provider = create_key_file(path)
    c.key_file = path
    principals = c.engine.service.principals
    principals.audit(None, _actor(), "keys.init", path, "ok", provider=provider.provider_id)
    print_json(KeyFileCreated(key_file=str(path), provider=provider.provider_id))


@keys.command("rotate")
@click.option("--tenant", "tenant", help="Tenant whose key to rotate (default: the global --tenant).")
@pass_ctx
def keys_rotate(c: Ctx, tenant: str | None) -> None:
    """A new version of the tenant's data key: new runs use it at once, existing run keys are re-wrapped
    under it by the scheduler in the background, and the old version is deleted when none is left."""
    print_json(c.engine.service.keys.rotate(tenant or c.tenant, _actor()))


@keys.command("status")
@click.option("--tenant", "tenant", help="Only this tenant (default: every tenant).")
@pass_ctx
def keys_status(c: Ctx, tenant: str | None) -> None:
    """Key versions per tenant, run keys per version, re-wraps pending, and whether this key reads them."""
    svc = c.engine.service
    status = svc.keys.status(tenant)
    svc.principals.audit(tenant, _actor(), "keys.status", None, "ok")
    print_json(status)


@click.command("forget")
@click.argument("run_id")
@click.option("--reason", required=True, help="Why (recorded in the audit log).")
@pass_ctx
def runs_forget(c: Ctx, run_id: str, reason: str) -> None:
    """Destroy a finished run's key: its sensitive values become unreadable for good, its history and
    every other field stay (verify still passes)."""
    print_json(c.engine.service.keys.forget(c.tenant, run_id, reason, _actor()))


@click.command("shred")
@click.argument("name")
@click.option("--reason", required=True, help="Why (recorded in the audit log).")
@click.option("--cancel", is_flag=True, help="Cancel the tenant's unfinished runs first.")
@pass_ctx
def tenants_shred(c: Ctx, name: str, reason: str, cancel: bool) -> None:
    """Destroy every key of tenant NAME: all its sensitive values become unreadable for good. Refused
    while it has unfinished runs (named), unless --cancel."""
    print_json(c.engine.service.keys.shred(name, reason, _actor(), cancel=cancel))


def _grant(c: Ctx, name: str, tenant: str | None, grant: str, granted: bool) -> None:
    principals = c.engine.service.principals
    print_json(principals.set_grant(tenant or c.tenant, name, grant, granted=granted, by=_actor()))


@click.command("grant")
@click.argument("name")
@click.argument("grant", type=click.Choice([READ_GRANT]))
@click.option("--tenant", "tenant", help="Tenant (default: the global --tenant).")
@pass_ctx
def users_grant(c: Ctx, name: str, grant: str, tenant: str | None) -> None:
    """Give user NAME a grant: read_sensitive lets them reveal sealed values (each reveal audited)."""
    _grant(c, name, tenant, grant, True)


@click.command("revoke")
@click.argument("name")
@click.argument("grant", type=click.Choice([READ_GRANT]))
@click.option("--tenant", "tenant", help="Tenant (default: the global --tenant).")
@pass_ctx
def users_revoke(c: Ctx, name: str, grant: str, tenant: str | None) -> None:
    """Take a grant back from user NAME (effective on their next request)."""
    _grant(c, name, tenant, grant, False)


# The group of this module; its other commands join the runs, tenants and users groups (root.py).
COMMANDS: tuple[click.Command, ...] = (keys,)
