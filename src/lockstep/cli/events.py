"""External events (operators and tests): `event send`, `event waits RUN` (`event`, singular: `lockstep
events RUN` is a run's history), `callbacks mint RUN STEP`
and the signing secrets of integrations, `integrations set|list` (the secret read from stdin, never
an argument: the command line is in the shell history and in `ps`)."""

from __future__ import annotations

import json
import sys

import click

from ..app.events import Callbacks
from ..app.principals import Principal
from ..errors import InvalidInput
from .context import Ctx, cli_user, pass_ctx
from .render import print_json

__all__ = ["COMMANDS"]


@click.group("event")
def events() -> None:
    """External events: send one, see a run's event waits."""


@events.command("send")
@click.option("--name", required=True, help="The event's name, e.g. parcel-delivered.")
@click.option("--key", required=True, help="The correlation key the waiting runs rendered.")
@click.option("--id", "event_id", required=True, help="Your unique id of the event (a resend is idempotent).")
@click.option("--payload", default="null", show_default=True, help="The payload, as JSON.")
@pass_ctx
def events_send(c: Ctx, name: str, key: str, event_id: str, payload: str) -> None:
    """Send an event as the tenant's publisher would (POST /v1/events): to every run waiting for it,
    else buffered for the first one that waits; prints where it went."""
    try:
        value = json.loads(payload)
    except ValueError as exc:
        raise InvalidInput(f"--payload is not JSON: {exc}") from None
    who = Principal(c.tenant, cli_user(), ("publisher",), ())
    print_json(c.engine.service.event_deliveries.publish(who, name, key, value, event_id))


@events.command("waits")
@click.argument("run_id")
@pass_ctx
def events_waits(c: Ctx, run_id: str) -> None:
    """The run's event waits and the callbacks minted for them (ids and states, never tokens)."""
    print_json(c.engine.service.callbacks.waits(c.tenant, run_id))


@click.group()
def callbacks() -> None:
    """Per-wait callback URLs of `wait_event` steps with `callback:`."""


@callbacks.command("mint")
@click.argument("run_id")
@click.argument("step")
@click.option(
    "--public-url",
    envvar="LOCKSTEP_PUBLIC_URL",
    default="http://127.0.0.1:8080",
    show_default=True,
    help="Base URL of `lockstep serve`, used in the callback URL.",
)
@pass_ctx
def callbacks_mint(c: Ctx, run_id: str, step: str, public_url: str) -> None:
    """Mint a single-use callback URL for a waiting step and print it, once (only its hash is kept;
    minting again replaces it)."""
    cbs: Callbacks = c.engine.service.callbacks.linking_to(public_url)
    print_json(cbs.mint(Principal(c.tenant, cli_user(), ("operator",), ()), run_id, step))


@click.group()
def integrations() -> None:
    """A tenant's integrations: the Standard Webhooks secrets that sign callbacks."""


@integrations.command("set")
@click.option("--tenant", "tenant", help="The tenant (default: the global --tenant).")
@click.argument("name")
@pass_ctx
def integrations_set(c: Ctx, tenant: str | None, name: str) -> None:
    """Store integration NAME's secret (whsec_..., read from stdin), sealed under a data key of the
    tenant; replaces the one before. Callbacks of waits naming it must be signed with it."""
    secret = sys.stdin.readline().strip()
    if not secret:
        raise InvalidInput("give the secret on stdin, e.g. `lockstep webhooks secret | tee s | lockstep ...`")
    print_json(c.engine.service.callbacks.set_integration(tenant or c.tenant, name, secret, cli_user()))


@integrations.command("list")
@click.option("--tenant", "tenant", help="The tenant (default: the global --tenant).")
@pass_ctx
def integrations_list(c: Ctx, tenant: str | None) -> None:
    """The tenant's integrations (names and dates, never a secret)."""
    print_json(c.engine.service.callbacks.integrations(tenant or c.tenant))


COMMANDS: tuple[click.Command, ...] = (events, callbacks, integrations)
