"""Retention: what the purge will delete and when, what is held, the tombstones of purged runs, and a
purge pass run now. Setting a tenant's retention is `tenants set T --retention 90d`; holds are
`runs hold|release RUN` and `tenants hold|release T`."""

from __future__ import annotations

from collections.abc import Callable

import click
from rich.table import Table

from ..app.retention import Retention
from .context import Ctx, cli_user, pass_ctx
from .render import out, print_json

__all__ = ["COMMANDS", "HOLD_REASON", "RetentionCall", "reason_command"]

HOLD_REASON = "Why (kept with the hold and audited)."
# A retention call a command makes: (the service, the --tenant given, the command's argument, the reason,
# the operator) -> what it prints. Retention.hold_run, release_run and purge_run have this shape.
RetentionCall = Callable[[Retention, str, str, str, str], object]


def reason_command(
    group: click.Group, name: str, argument: str, act: RetentionCall, doc: str, *, why: str = HOLD_REASON
) -> None:
    """Add `NAME ARGUMENT --reason TEXT` to `group` (`runs hold RUN_ID`, `tenants release NAME`, ...):
    it prints, as JSON, what `act` answers, the operator at the CLI as its actor."""

    @group.command(name, help=doc)
    @click.argument(argument)
    @click.option("--reason", required=True, help=why)
    @pass_ctx
    def command(c: Ctx, /, reason: str, **given: str) -> None:
        print_json(act(c.engine.service.retention, c.tenant, given[argument], reason, cli_user()))


@click.group()
def retention() -> None:
    """Retention of finished runs: status, tombstones, a purge pass now."""


tenant_opt = click.option("--tenant", "tenant", help="Only this tenant (default: every tenant).")


@retention.command("status")
@tenant_opt
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def retention_status(c: Ctx, tenant: str | None, as_json: bool) -> None:
    """Per tenant: the retention, finished runs due now and when the next are, holds, tombstones."""
    status = c.engine.service.retention.status(tenant)
    if as_json:
        print_json(status)
        return
    t = Table("tenant", "retention", "finished", "due now", "next due", "held", "tombstones")
    for s in status.tenants:
        held = f"TENANT ({s.tenant_hold.reason})" if s.tenant_hold else str(s.held_runs)
        stones = ", ".join(f"{n} {state}" for state, n in sorted(s.tombstones.items()) if n) or "0"
        t.add_row(
            s.tenant,
            s.retention or "forever",
            str(s.finished_runs),
            str(s.due_now),
            s.next_due_at or "-",
            held,
            stones,
        )
    out.print(t)
    for s in status.tenants:
        for h in ([s.tenant_hold] if s.tenant_hold else []) + s.run_holds:
            what = f"run {h.run_id}" if h.run_id else f"tenant {h.tenant}"
            out.print(f"held: {what} since {h.held_at} by {h.held_by}: {h.reason}")


@retention.command("tombstones")
@tenant_opt
@click.option("--after", default="", help="Cursor: tombstones after this run id.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def retention_tombstones(c: Ctx, tenant: str | None, after: str, limit: int, as_json: bool) -> None:
    """The tombstones of purged runs (run id order): what each run was, when and why it was purged."""
    rows = c.engine.service.retention.tombstones(tenant, after=after, limit=limit)
    if as_json:
        print_json(rows)
        return
    t = Table("run", "tenant", "definition", "status", "finished", "events", "purged", "by", "why", "state")
    for r in rows:
        t.add_row(
            r.run_id,
            r.tenant,
            f"{r.definition} v{r.version}",
            r.status,
            r.finished_at,
            str(r.events),
            r.purged_at,
            r.purged_by,
            r.reason,
            r.state,
        )
    out.print(t)


@retention.command("purge")
@tenant_opt
@pass_ctx
def retention_purge(c: Ctx, tenant: str | None) -> None:
    """Run one purge pass now, over every scheduler partition (the scheduler runs them on its own)."""
    print_json(c.engine.service.retention.purge_now(tenant))


# The commands of this group, attached to the root group in root.py.
COMMANDS: tuple[click.Command, ...] = (retention,)
