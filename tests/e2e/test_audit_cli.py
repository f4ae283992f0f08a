"""End-to-end: `lockstep audit` (a table, a JSON page, a JSON-lines export; filters; bad filters are one
error line that writes nothing) and `lockstep verify` over the audit chains, attacked with raw SQL
(triggers bypassed: an operator with the database's owner rights), on both backends."""

from __future__ import annotations

import json
import sqlite3

import psycopg
import pytest
from clikit import Cli

NAP = "name: nap\nsteps:\n  - id: nap\n    wait: 1h\n"


@pytest.fixture
def acme(cli: Cli) -> Cli:
    """Tenant acme with an admin, a nap run cancelled and one paused then resumed, by user ops-anna."""
    cli.env["USER"] = "ops-anna"
    cli.json("tenants", "create", "acme")
    cli.json("users", "create", "boss", "--tenant", "acme", "--roles", "admin")
    cli.json("--tenant", "acme", "publish", cli.write("nap.yaml", NAP))
    for _ in range(2):
        run = cli.json("--tenant", "acme", "start", "nap")["run_id"]
        cli.json("--tenant", "acme", "pause", run, "--reason", "hold on")
        cli.json("--tenant", "acme", "resume", run, "--reason", "go on")
    cli.json("--tenant", "acme", "cancel", run, "--reason", "customer changed their mind")
    return cli


@pytest.fixture
def bare_acme(cli: Cli) -> Cli:
    """Tenant acme and nothing else: a bad filter is refused before any row is read."""
    cli.json("tenants", "create", "acme")
    return cli


def count(cli: Cli) -> int:
    return int(cli._query("SELECT COUNT(*) FROM audit")[0][0])


def test_audit_shows_filters_and_exports_a_tenants_rows(acme: Cli) -> None:
    """The table names the rows; --json is a page (newest first) with a cursor; --jsonl exports every
    matching row and is itself audited; --no-tenant shows the rows without a tenant."""
    table = acme.run("--tenant", "acme", "audit").stdout
    assert "run.cancel" in table
    assert "ops-anna" in table
    assert "of tenant acme, newest first" in table
    page = acme.json("--tenant", "acme", "audit", "--action", "repair.", "--json", "--limit", "3")
    assert [r["action"] for r in page["items"]] == ["repair.resume", "repair.pause", "repair.resume"]
    assert page["next"] is not None
    rest = acme.json("audit", "--tenant", "acme", "--action", "repair.", "--json", "--cursor", page["next"])
    assert [r["action"] for r in rest["items"]] == ["repair.pause"]
    assert rest["next"] is None
    cancels = acme.json("audit", "--tenant", "acme", "--action", "run.cancel", "--json")["items"]
    assert [(r["actor"], r["detail"]["reason"]) for r in cancels] == [
        ("ops-anna", "customer changed their mind")
    ]
    lines = acme.run("audit", "--tenant", "acme", "--actor", "ops-anna", "--jsonl").stdout.splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["action"] for r in rows] == [
        "audit.export",
        "run.cancel",
        "repair.resume",
        "repair.pause",
        "repair.resume",
        "repair.pause",
        "user.create",  # the CLI names its user on account changes too
        "tenant.create",
    ]
    assert rows[0]["detail"] == {"actor": "ops-anna", "channel": "cli"}
    assert [r["seq"] for r in rows] == sorted((r["seq"] for r in rows), reverse=True)
    assert acme.json("audit", "--no-tenant", "--json")["items"] == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--since", "last week"], "since: 'last week' is not a time"),
        (["--action", "no spaces"], "action: 'no spaces' is neither an action name nor a prefix"),
        (["--outcome", "meh"], "outcome: 'meh' is not an outcome"),
        (["--cursor", "zzz"], "cursor: 'zzz' is not a cursor this server gave out"),
        (["--limit", "0"], "limit: 0 is out of range"),
        (["--json", "--jsonl"], "choose one"),
        (["--jsonl", "--until", "2025-01-01", "--since", "2025-02-01"], "is not before until"),
    ],
)
def test_a_bad_filter_is_one_error_line_and_writes_nothing(
    bare_acme: Cli, args: list[str], says: str
) -> None:
    """Exit 2, one line on stderr naming the filter and how to write it, no traceback, no audit row."""
    before = count(bare_acme)
    done = bare_acme.run("audit", "--tenant", "acme", *args, expect=2)
    assert done.stderr.startswith("error: ")
    assert says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr
    assert count(bare_acme) == before


def _tamper(cli: Cli, statement: str) -> None:
    """Raw SQL past the append-only triggers (SQLite: drop them; PostgreSQL: replica mode)."""
    if cli.backend == "sqlite":
        for trigger in ("audit_append_only_update", "audit_append_only_delete"):
            cli.sql(f"DROP TRIGGER IF EXISTS {trigger}")
        cli.sql(statement)
    else:
        cli.sql(f"SET session_replication_role = replica; {statement}")


def test_verify_counts_the_audit_rows_and_names_a_changed_or_deleted_one(acme: Cli) -> None:
    """Attack: verify passes and says how many audit rows it checked; after an operator edits a row's
    detail and deletes another from the middle with raw SQL, it exits 1 naming both rows and the tenant."""
    done = acme.run("--tenant", "acme", "verify")
    total = count(acme)
    assert f"{total} audit row(s): all consistent" in done.stdout
    assert "audit chain of tenant acme" in done.stdout
    ids = [r[0] for r in acme._query("SELECT id FROM audit WHERE tenant = 'acme' ORDER BY id")]
    edited, deleted = ids[2], ids[4]
    with pytest.raises((sqlite3.DatabaseError, psycopg.DatabaseError), match="append-only"):
        acme.sql(f"UPDATE audit SET detail = '{{}}' WHERE id = {edited}")  # plain SQL: refused
    _tamper(acme, f'UPDATE audit SET detail = \'{{"reason":"nothing to see"}}\' WHERE id = {edited}')
    _tamper(acme, f"DELETE FROM audit WHERE id = {deleted}")
    bad = acme.run("--tenant", "acme", "verify", expect=1)
    assert f"audit row {edited} (tenant acme) was changed" in bad.stdout
    assert f"before row {ids[5]} were deleted" in bad.stdout
    report = json.loads(acme.run("--tenant", "acme", "verify", "--json", expect=1).stdout)
    assert report["ok"] is False
    assert report["problems"] == []  # the runs themselves are intact
    chain = next(c for c in report["audit"]["chains"] if c["tenant"] == "acme")
    assert [p["id"] for p in chain["problems"]] == [edited, ids[5]]
