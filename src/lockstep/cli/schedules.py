"""`lockstep schedules`: create, list, show, update, pause, resume, delete and trigger schedules of the
tenant (--tenant). Changes are audited with the operator at the keyboard ($USER) as their actor."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from ..app.schedules import Schedules, paused_since
from ..app.views.schedules import ScheduleView
from ..core.canonical import JSONValue
from ..core.schedule import CATCH_UPS, OVERLAPS
from .context import Ctx, cli_user, pass_ctx
from .inputs import parse_json
from .render import out, print_json

__all__ = ["COMMANDS"]


def _schedules(c: Ctx) -> Schedules:
    s: Schedules = c.engine.service.schedules
    return s


@click.group()
def schedules() -> None:
    """Cron schedules that start runs: every slot starts one run (start key NAME:SLOT)."""


def _policy_options(f: Any) -> Any:
    for option in reversed(
        (
            click.option(
                "--overlap",
                type=click.Choice(OVERLAPS),
                help="While the schedule's previous run is unfinished: skip the slot (default), allow "
                "another run, or cancel_previous (with a reason naming the new run).",
            ),
            click.option(
                "--catch-up",
                "catch_up",
                type=click.Choice(CATCH_UPS),
                help="Slots missed while no scheduler ran: none (start nothing late), last (the most "
                "recent once; default) or all (each, up to --catch-up-limit).",
            ),
            click.option(
                "--catch-up-limit",
                "catch_up_limit",
                type=click.IntRange(1),
                help="With --catch-up all: the most missed slots started (default 10; at most the "
                "tenant's max_catch_up_slots).",
            ),
        )
    ):
        f = option(f)
    return f


@schedules.command("create")
@click.argument("name")
@click.option("--definition", required=True, help="The definition its runs start.")
@click.option("--version", type=click.IntRange(1), help="Pin a version (default: the latest at each slot).")
@click.option("--cron", required=True, help="5 fields (e.g. '0 2 * * *'), or 6 with seconds first.")
@click.option("--timezone", default="UTC", show_default=True, help="IANA zone the cron is read in.")
@click.option("--input", "input_json", help="The run input as JSON, or @file.")
@_policy_options
@pass_ctx
def schedules_create(
    c: Ctx,
    name: str,
    definition: str,
    version: int | None,
    cron: str,
    timezone: str,
    input_json: str | None,
    overlap: str | None,
    catch_up: str | None,
    catch_up_limit: int | None,
) -> None:
    """Create schedule NAME; it fires from its first slot after now."""
    view = _schedules(c).create(
        c.tenant,
        name,
        definition=definition,
        version=version,
        cron=cron,
        timezone=timezone,
        input=parse_json(input_json, "--input"),
        overlap=overlap or "skip",
        catch_up=catch_up or "last",
        catch_up_limit=catch_up_limit,
        actor=cli_user(),
    )
    print_json(view)


@schedules.command("update")
@click.argument("name")
@click.option("--definition", help="Start runs of another definition.")
@click.option("--version", type=click.IntRange(1), help="Pin this version.")
@click.option("--latest", is_flag=True, help="Follow the latest version from now on.")
@click.option("--cron", help="A new cron expression (fires from its first slot after now).")
@click.option("--timezone", help="A new time zone.")
@click.option("--input", "input_json", help="A new run input as JSON, or @file.")
@_policy_options
@pass_ctx
def schedules_update(
    c: Ctx,
    name: str,
    definition: str | None,
    version: int | None,
    latest: bool,
    cron: str | None,
    timezone: str | None,
    input_json: str | None,
    overlap: str | None,
    catch_up: str | None,
    catch_up_limit: int | None,
) -> None:
    """Change schedule NAME (only the options given)."""
    changes: dict[str, Any] = {}
    if version is not None or latest:
        if version is not None and latest:
            raise click.UsageError("give --version N or --latest, not both")
        changes["version"] = None if latest else version
    if input_json is not None:
        given: JSONValue = parse_json(input_json, "--input")
        changes["input"] = given
    view = _schedules(c).update(
        c.tenant,
        name,
        actor=cli_user(),
        definition=definition,
        cron=cron,
        timezone=timezone,
        overlap=overlap,
        catch_up=catch_up,
        catch_up_limit=catch_up_limit,
        **changes,
    )
    print_json(view)


@schedules.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def schedules_list(c: Ctx, as_json: bool) -> None:
    """The tenant's schedules with their next fire times."""
    views = _schedules(c).list(c.tenant)
    if as_json:
        print_json(views)
        return
    t = Table("name", "status", "cron", "zone", "definition", "next fire (UTC)", "last run", "started")
    for v in views:
        t.add_row(
            v.name,
            v.status,
            v.cron,
            v.timezone,
            v.definition + (f" v{v.version}" if v.version else ""),
            v.next_fire_at or "paused",
            v.last_run or "-",
            str(v.runs_started),
        )
    out.print(t)


@schedules.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def schedules_show(c: Ctx, name: str, as_json: bool) -> None:
    """One schedule: next fire times, the last slot and its run, why slots were skipped or missed."""
    view = _schedules(c).show(c.tenant, name)
    if as_json:
        print_json(view)
        return
    _print(view)


def _print(v: ScheduleView) -> None:
    version = f"v{v.version}" if v.version else "latest version"
    out.print(f"{v.name}  {v.status}  {v.definition} ({version})")
    out.print(f"when: {v.cron} in {v.timezone}: {v.description}")
    out.print(f"policies: overlap {v.overlap}, catch-up {v.catch_up} (limit {v.catch_up_limit})")
    if v.status == "paused":
        out.print(f"{paused_since(v)}")
        out.print("next fire times: none while paused (resuming fires from the first slot after it)")
    else:
        out.print("next fire times:")
        for utc, local in zip(v.next_fire_times, v.next_fire_times_local, strict=True):
            out.print(f"  {utc}  ({local})")
    out.print(f"last slot: {v.last_slot or '-'}  last run: {v.last_run or '-'}")
    out.print(f"runs started {v.runs_started}, slots skipped {v.slots_skipped}, missed {v.slots_missed}")
    if v.last_skipped:
        out.print(f"last skipped: {v.last_skipped.slot}: {v.last_skipped.reason}")
    if v.last_missed:
        m = v.last_missed
        count = f"{m.count} slot(s)" if m.count is not None else "many slots"
        out.print(f"last missed: {count} from {m.slot} to {m.until}: {m.reason}")
    if v.recent:
        t = Table("slot", "outcome", "run", "reason")
        for s in v.recent:
            t.add_row(s.slot, s.outcome, s.run_id or "", s.reason or "")
        out.print(t)


@schedules.command("pause")
@click.argument("name")
@click.option("--reason", help="Why (shown with the schedule and audited).")
@pass_ctx
def schedules_pause(c: Ctx, name: str, reason: str | None) -> None:
    """Stop firing NAME: its slots start nothing until it is resumed (and are not caught up)."""
    print_json(_schedules(c).pause(c.tenant, name, reason=reason, actor=cli_user()))


@schedules.command("resume")
@click.argument("name")
@pass_ctx
def schedules_resume(c: Ctx, name: str) -> None:
    """Fire NAME again, from its first slot after now."""
    print_json(_schedules(c).resume(c.tenant, name, actor=cli_user()))


@schedules.command("delete")
@click.argument("name")
@pass_ctx
def schedules_delete(c: Ctx, name: str) -> None:
    """Delete NAME; the runs it started are kept."""
    print_json(_schedules(c).delete(c.tenant, name, actor=cli_user()))


@schedules.command("trigger")
@click.argument("name")
@click.option(
    "--key",
    help="Idempotency key: the same key starts one run (start key NAME:trigger:KEY; default: the "
    "current second, UTC).",
)
@pass_ctx
def schedules_trigger(c: Ctx, name: str, key: str | None) -> None:
    """Start one run of NAME now, whatever its overlap policy (also while paused)."""
    print_json(_schedules(c).trigger(c.tenant, name, key=key, actor=cli_user()))


# The commands of this group, attached to the root group in root.py.
COMMANDS: tuple[click.Command, ...] = (schedules,)
