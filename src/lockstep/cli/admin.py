"""Administration: verify the stored histories, upgrade the schema, the scripted demo."""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from .context import Ctx, pass_ctx
from .render import out, print_json

__all__ = ["COMMANDS"]


@click.command()
@click.argument("run_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def verify(c: Ctx, run_id: str | None, as_json: bool) -> None:
    """Replay events and compare with snapshots; check sequences and the hash chain; without RUN_ID also
    the audit log's chains (the tenant's and the rows without a tenant) and the database file's own
    integrity check (SQLite). Exit 1 on mismatch."""
    c.refuse_damaged = False  # a damaged schema is a finding here, not a reason not to look
    report = c.engine.service.verify(run_id, tenant=c.tenant)
    # Purged runs are not replayed (their events are gone): their tombstones must agree with the rows.
    stones = [] if run_id else c.engine.service.retention.check_tombstones(c.tenant)
    bad = [r for r in report if not r.ok] + stones
    audit = c.engine.service.verify_audit(c.tenant) if run_id is None else None
    audit_bad = [p for chain in audit.chains for p in chain.problems] if audit is not None else []
    # The whole database only: SQLite's integrity_check of every page (slow on a big file, so not at
    # start-up); PostgreSQL checks its own pages.
    files = c.engine.service.store.check_files() if run_id is None else []
    if as_json:
        body: dict[str, Any] = {
            "runs": len(report),
            "ok": not bad and not audit_bad and not files,
            "problems": bad,
        }
        body["files"] = files
        if audit is not None:
            body["audit"] = audit
        print_json(body)
    else:
        for r in bad:
            out.print(f"[red]MISMATCH[/red] {r.run_id}: " + escape("; ".join(r.problems)), markup=True)
        for p in audit_bad:
            out.print(f"[red]AUDIT[/red] {escape(p.problem)}", markup=True)
        for problem in files:
            out.print(f"[red]FILE[/red] {escape(problem)}", markup=True)
        checked = f"verified {len(report)} run(s), {sum(r.events for r in report)} event(s)"
        if audit is not None:
            checked += f", {audit.rows} audit row(s)"
        problems = len(bad) + len(audit_bad) + len(files)
        out.print(
            f"{checked}: "
            + ("[green]all consistent[/green]" if not problems else f"[red]{problems} inconsistent[/red]"),
            markup=True,
        )
        for chain in audit.chains if audit is not None else []:
            if chain.head is not None:  # what to keep elsewhere to notice a rewrite of the whole chain
                who = f"tenant {chain.tenant}" if chain.tenant else "rows without a tenant"
                out.print(f"audit chain of {who}: {chain.rows} row(s), head {chain.head}")
    if bad or audit_bad or files:
        sys.exit(1)


@click.group()
def db() -> None:
    """Database schema management."""


@db.command("upgrade")
@pass_ctx
def db_upgrade(c: Ctx) -> None:
    """Apply pending schema migrations (safe to run from several processes at once)."""
    from ..store import upgrade_store  # noqa: PLC0415

    c.database_only("db upgrade")
    print_json({"applied": upgrade_store(c.db)})


@db.command("backup")
@click.argument("dest", type=click.Path(dir_okay=False))
@pass_ctx
def db_backup(c: Ctx, dest: str) -> None:
    """Copy a SQLite database to the new file DEST while it is in use: one consistent moment of it,
    checked with integrity_check. Restore: stop every process, put the copy in place, `lockstep verify`."""
    from ..errors import LockstepError  # noqa: PLC0415
    from ..store import SchemaError, StoreUnavailable, backup_store  # noqa: PLC0415

    c.database_only("db backup")
    try:
        report = backup_store(c.db, dest)
    except (SchemaError, StoreUnavailable) as exc:
        raise LockstepError(str(exc), code="database") from None
    print_json(
        {"backup": report.path, "pages": report.pages, "bytes": report.bytes, "schema": report.schema_version}
    )


@click.command()
@click.option("--db", "db_url", default=None, help="Where to run the tour (default: a fresh temporary file).")
@click.option("--keep", is_flag=True, help="Keep the temporary database afterwards.")
def demo(db_url: str | None, keep: bool) -> None:
    """A scripted tour: retries, a lost response, a durable timer, a cancellation with compensation."""
    from ..examples.tour import run_tour  # noqa: PLC0415

    # The tour writes its own text, styled with markup (unlike the other commands, which print tenants'
    # and workers' text and so keep markup off).
    console = Console(highlight=False, soft_wrap=True, width=out.width if out.is_terminal else 200)
    sys.exit(run_tour(db_url, keep=keep, console=console))


# The commands of this group, attached to the root group in root.py.
COMMANDS: tuple[click.Command, ...] = (verify, db, demo)
