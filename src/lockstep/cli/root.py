"""The `lockstep` command line: thin commands over the Engine/Service, `--json` on every read.

Every failure is one line on stderr and a non-zero exit; no traceback reaches the user unless
LOCKSTEP_DEBUG=1 is set.

This module holds the root group, its global options (--db, --tenant, --limit) and main(); the commands
live in one module per group and are attached here.
"""

from __future__ import annotations

import logging
import os
import sys

import click

from ..app import failpoints
from ..core.limits import LimitSettingError, ServerLimits, parse_limit_settings
from ..engine import DEFAULT_DB
from ..errors import InvalidInput, LockstepError
from . import (
    admin,
    approvals,
    audit,
    definitions,
    events,
    keys,
    migrations,
    principals,
    processes,
    repair,
    retention,
    runs,
    trace,
)
from . import schedules as schedule_commands
from . import secrets as secret_commands
from .anywhere import accept_everywhere
from .context import Ctx
from .render import err, fail

LIMITS_ENV = "LOCKSTEP_LIMITS"


def _server_limits(options: tuple[str, ...]) -> ServerLimits:
    """LOCKSTEP_LIMITS, then each --limit (a later setting of a name wins), checked before anything
    starts: one line naming the setting, the limit and its range, exit 2."""
    where = LIMITS_ENV
    try:
        settings = parse_limit_settings([os.environ.get(LIMITS_ENV, "")])
        where = "--limit"
        settings |= parse_limit_settings(options)
        where = "limits"
        return ServerLimits(settings)
    except LimitSettingError as exc:
        raise InvalidInput(f"{where}: {exc}", code="bad_limit") from None


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--db",
    envvar="LOCKSTEP_DB",
    default=DEFAULT_DB,
    show_default=True,
    help="Database URL (env LOCKSTEP_DB).",
)
@click.option(
    "--tenant",
    envvar="LOCKSTEP_TENANT",
    default="default",
    show_default=True,
    help="Tenant whose definitions and runs to use (env LOCKSTEP_TENANT).",
)
@click.option(
    "--limit",
    "limit_settings",
    multiple=True,
    metavar="NAME=VALUE",
    help=f"Set a server-wide limit, e.g. max_request_bytes=33554432 (repeatable; env {LIMITS_ENV}="
    "NAME=VALUE,...; docs/security.md lists the names and ranges).",
)
@click.option(
    "--key-file",
    type=click.Path(dir_okay=False),
    help="Key file that seals sensitive values (default: env LOCKSTEP_KEY_FILE, else LOCKSTEP_KEY).",
)
@click.option(
    "--url",
    envvar="LOCKSTEP_URL",
    help="A lockstep server (https://HOST) to talk to over its HTTP API instead of --db: for runs, "
    "show, events, start, cancel, worker, the repair commands, approvals and migrations "
    "(env LOCKSTEP_URL).",
)
@click.option(
    "--api-key-file",
    envvar="LOCKSTEP_API_KEY_FILE",
    type=click.Path(dir_okay=False),
    help="File holding the API key for --url (env LOCKSTEP_API_KEY_FILE; or the key in LOCKSTEP_API_KEY).",
)
@click.version_option(package_name="lockstep")
@click.pass_context
def cli(
    ctx: click.Context,
    db: str,
    tenant: str,
    limit_settings: tuple[str, ...],
    key_file: str | None,
    url: str | None,
    api_key_file: str | None,
) -> None:
    """lockstep: durable workflows for tenant-defined processes.

    Publish a definition, start runs, run workers; every run survives crashes and explains its waits.
    The options below may also follow the command (`lockstep runs --db URL`); a RUN may be given as
    its id, the start of its id (6 or more characters) or its start key.
    """
    if failpoints.SPEC_ERROR:
        raise InvalidInput(f"{failpoints.SPEC_ERROR} (unset {failpoints.ENV} to run normally)")
    if failpoints.active_spec():
        err.print(f"warning: fail points are active ({failpoints.ENV}={failpoints.active_spec()})")
    ctx.meta["lockstep.limits"] = _server_limits  # for --limit given after the command (anywhere.py)
    ctx.obj = Ctx(db, tenant, _server_limits(limit_settings), key_file)
    ctx.obj.url, ctx.obj.api_key_file = url or None, api_key_file
    source = ctx.get_parameter_source("db")
    ctx.obj.db_given = source in (
        click.core.ParameterSource.COMMANDLINE,
        click.core.ParameterSource.ENVIRONMENT,
    )
    ctx.call_on_close(ctx.obj.close)


for _group in (
    definitions,
    runs,
    trace,
    repair,
    approvals,
    principals,
    retention,
    processes,
    admin,
    keys,
    audit,
    events,
    secret_commands,
    migrations,
):
    for _command in _group.COMMANDS:
        cli.add_command(_command)
for _command in schedule_commands.COMMANDS:
    cli.add_command(_command)
# Sensitive data's commands that belong to other groups' nouns.
runs.runs.add_command(keys.runs_forget)
principals.tenants.add_command(keys.tenants_shred)
principals.users.add_command(keys.users_grant)
principals.users.add_command(keys.users_revoke)
principals.tenants.add_command(secret_commands.tenants_egress)
accept_everywhere(cli)


def main() -> None:
    debug = os.environ.get("LOCKSTEP_DEBUG") == "1"
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        fail("aborted", 130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except LockstepError as exc:
        fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except BrokenPipeError:
        # the reader went away (e.g. `lockstep events RUN | head`): nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except Exception as exc:
        if debug:
            raise
        fail(f"internal error: {type(exc).__name__}: {exc} (set LOCKSTEP_DEBUG=1 for a traceback)", 70)
