"""Operator repair: retry, the dead letters, pause/resume, skip, edit-input, resolve, the four-eyes
confirm/reject, and migrate to another version. Each works on the database (the actor is $USER) or, with
--url, over the HTTP API (the actor is the API key's user, with its roles), printing the same JSON."""

from __future__ import annotations

import sys

import click
from rich.table import Table

from ..app.repair import Repairs
from ..app.views import DeadLetter, MigrationPlan, RepairResult, RetryResult
from ..errors import InvalidInput
from .backend import as_view, as_views
from .context import Ctx, cli_user, pass_ctx
from .inputs import parse_json
from .render import out, print_json

__all__ = ["COMMANDS"]


@click.command()
@click.argument("run_id")
@click.argument("step")
@click.option("--reason", required=True, help="Why (recorded in the audit trail).")
@click.option(
    "--new-key", is_flag=True, help="Use a new idempotency key (the downstream will see a new request)."
)
@pass_ctx
def retry(c: Ctx, run_id: str, step: str, reason: str, new_key: bool) -> None:
    """Run a step that waits for an operator (dead letter, unknown outcome) again, as a new attempt."""
    if c.remote:
        print_json(as_view(RetryResult, c.client.retry(run_id, step, reason, new_key=new_key)))
        return
    print_json(c.engine.service.retry(c.tenant, run_id, step, reason, actor=cli_user(), new_key=new_key))


@click.command("dead-letters")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def dead_letters(c: Ctx, as_json: bool) -> None:
    """Runs whose task went to the dead-letter state, with the reason (retry with `lockstep retry`)."""
    if c.remote:
        rows = as_views(DeadLetter, c.client.dead_letters())
    else:
        rows = c.engine.service.dead_letters(c.tenant)
    if as_json:
        print_json(rows)
        return
    t = Table("run", "step", "since", "reason")
    for r in rows:
        t.add_row(r.run_id, r.step, r.since, r.reason)
    out.print(t)


def _repairs(c: Ctx) -> Repairs:
    return c.engine.service.repairs


reason_opt = click.option(
    "--reason", required=True, help="Why (recorded with your name in the run's history)."
)


@click.command()
@click.argument("run_id")
@reason_opt
@pass_ctx
def pause(c: Ctx, run_id: str, reason: str) -> None:
    """Pause a run: nothing new starts; in-flight attempts finish and are recorded; due timers wait."""
    if c.remote:
        print_json(as_view(RepairResult, c.client.pause(run_id, reason)))
        return
    print_json(_repairs(c).pause(c.tenant, run_id, reason, actor=cli_user()))


@click.command()
@click.argument("run_id")
@reason_opt
@pass_ctx
def resume(c: Ctx, run_id: str, reason: str) -> None:
    """Resume a paused run: transitions held back while paused (due timers, next steps) happen now."""
    if c.remote:
        print_json(as_view(RepairResult, c.client.resume(run_id, reason)))
        return
    print_json(_repairs(c).resume(c.tenant, run_id, reason, actor=cli_user()))


@click.command()
@click.argument("run_id")
@click.argument("step")
@click.option("--output", help="JSON that stands in for the step's output.")
@reason_opt
@pass_ctx
def skip(c: Ctx, run_id: str, step: str, output: str | None, reason: str) -> None:
    """Skip the current step where the definition allows it (skippable / skip_policy)."""
    stand_in = parse_json(output, "--output")
    if c.remote:
        print_json(as_view(RepairResult, c.client.skip(run_id, step, reason, output=stand_in)))
        return
    print_json(
        _repairs(c).skip(
            c.tenant,
            run_id,
            step,
            reason,
            output=stand_in,
            actor=cli_user(),
            roles=("operator", "admin"),
        )
    )


@click.command("edit-input")
@click.argument("run_id")
@click.option("--input", "input_", required=True, help="The new input as JSON, or @file.json.")
@reason_opt
@pass_ctx
def edit_input(c: Ctx, run_id: str, input_: str, reason: str) -> None:
    """Replace the run's input (checked against its version's input_schema) for steps not yet started."""
    new_input = parse_json(input_, "--input")
    if c.remote:
        print_json(as_view(RepairResult, c.client.edit_input(run_id, new_input, reason)))
        return
    print_json(_repairs(c).edit_input(c.tenant, run_id, new_input, reason, actor=cli_user()))


@click.command()
@click.argument("run_id")
@click.argument("step")
@click.option("--as", "outcome", required=True, type=click.Choice(["succeeded", "failed"]))
@click.option("--output", help="The step's output as JSON (with --as succeeded).")
@reason_opt
@pass_ctx
def resolve(c: Ctx, run_id: str, step: str, outcome: str, output: str | None, reason: str) -> None:
    """Settle a step whose outcome was unknown, after checking the downstream system."""
    value = parse_json(output, "--output")
    if c.remote:
        print_json(as_view(RepairResult, c.client.resolve(run_id, step, outcome, reason, output=value)))
        return
    print_json(_repairs(c).resolve(c.tenant, run_id, step, outcome, reason, output=value, actor=cli_user()))


@click.command()
@click.argument("run_id")
@click.argument("proposal_id")
@reason_opt
@pass_ctx
def confirm(c: Ctx, run_id: str, proposal_id: str, reason: str) -> None:
    """Four-eyes: confirm another operator's proposed skip, migrate or resolve (it runs now)."""
    if c.remote:
        print_json(as_view(RepairResult, c.client.confirm(run_id, proposal_id, reason)))
        return
    print_json(
        _repairs(c).confirm(
            c.tenant, run_id, proposal_id, reason, actor=cli_user(), roles=("operator", "admin")
        )
    )


@click.command("reject-proposal")
@click.argument("run_id")
@click.argument("proposal_id")
@reason_opt
@pass_ctx
def reject_proposal(c: Ctx, run_id: str, proposal_id: str, reason: str) -> None:
    """Four-eyes: reject a proposal (your own proposal: withdraw it)."""
    if c.remote:
        print_json(as_view(RepairResult, c.client.reject(run_id, proposal_id, reason)))
        return
    print_json(_repairs(c).reject(c.tenant, run_id, proposal_id, reason, actor=cli_user()))


def _mapping(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for p in pairs:
        old, sep, new = p.partition("=")
        if not sep or not old or not new:
            raise InvalidInput(f"--map {p!r}: write OLD_STEP=NEW_STEP")
        out[old] = new
    return out


@click.command()
@click.argument("run_id", required=False)
@click.option("--to-version", type=click.IntRange(1), required=True)
@click.option("--map", "maps", multiple=True, help="OLD_STEP=NEW_STEP for renamed steps (repeatable).")
@click.option("--dry-run", is_flag=True, help="Explain what would happen; change nothing.")
@click.option("--definition", help="Bulk: migrate the runs of this definition ...")
@click.option("--from-version", type=click.IntRange(1), help="... that are on this version ...")
@click.option("--where", "where", help="... and match status=S (e.g. status=waiting).")
@reason_opt
@pass_ctx
def migrate(
    c: Ctx,
    run_id: str | None,
    to_version: int,
    maps: tuple[str, ...],
    dry_run: bool,
    definition: str | None,
    from_version: int | None,
    where: str | None,
    reason: str,
) -> None:
    """Move a running run (or, with --definition, many) to another version of its definition."""
    mapping = _mapping(maps)
    actor = cli_user()
    if run_id is not None:
        if definition or from_version or where:
            raise InvalidInput("give either RUN_ID or --definition/--from-version/--where, not both")
        if c.remote:
            plan = c.client.migrate(run_id, to_version, reason, mapping=mapping, dry_run=dry_run)
            result = as_view(MigrationPlan, plan)
        else:
            result = _repairs(c).migrate(
                c.tenant, run_id, to_version, reason, mapping=mapping, dry_run=dry_run, actor=actor
            )
        print_json(result)
        if not result.ok:
            sys.exit(5)
        return
    if not definition or not from_version:
        raise InvalidInput("give a RUN_ID, or --definition NAME --from-version N for a bulk migration")
    if c.remote:  # the API moves one run per call; a bulk migration is one request for all its runs
        raise InvalidInput(
            "a bulk migration (--definition) works only on the database (--db URL), not over --url: "
            "give a RUN_ID to migrate one run over the API"
        )
    status = None
    if where:
        key, _, value = where.partition("=")
        if key != "status" or not value:
            raise InvalidInput("--where supports status=STATUS, e.g. --where status=waiting")
        status = value
    print_json(
        _repairs(c).migrate_many(
            c.tenant,
            definition,
            from_version,
            to_version,
            reason,
            status=status,
            mapping=mapping,
            dry_run=dry_run,
            actor=actor,
        )
    )


# The commands of this group, attached to the root group in root.py.
COMMANDS: tuple[click.Command, ...] = (
    retry,
    dead_letters,
    pause,
    resume,
    skip,
    edit_input,
    resolve,
    confirm,
    reject_proposal,
    migrate,
)
