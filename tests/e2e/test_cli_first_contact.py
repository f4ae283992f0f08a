"""The command line as a newcomer types it: global options after the command, runs named by a start
key or the start of their id, newest runs first (as the API and the UI list them), users of the
`default` tenant without creating it first, and waits past their time said plainly."""

from __future__ import annotations

import json

from clikit import Cli

NAP = """\
name: nap
steps:
  - id: nap
    wait: 1h
"""


def start(cli: Cli, *args: str) -> str:
    return str(cli.json("start", "nap", *args)["run_id"])


def test_global_options_may_follow_the_command(cli: Cli) -> None:
    """`lockstep runs --db URL --tenant T` means what `lockstep --db URL --tenant T runs` means."""
    cli.json("publish", cli.write("nap.yaml", NAP))
    run = start(cli)
    after = cli.run("runs", "--json", "--db", cli.url, db=False)
    assert [r["run_id"] for r in json.loads(after.stdout)] == [run]
    cli.run("tenants", "create", "acme")
    assert cli.json("runs", "--json", "--tenant", "acme") == []
    shown = cli.run("show", run, "--db", cli.url, db=False)
    assert run in shown.stdout


def test_a_run_is_found_by_its_start_key_or_the_start_of_its_id(cli: Cli) -> None:
    """show takes a start key or a unique id prefix of 6+ characters; an ambiguous or short prefix and
    an unknown name are refused with what to give instead."""
    cli.json("publish", cli.write("nap.yaml", NAP))
    first = start(cli, "--key", "order-42")
    second = start(cli, "--key", "order-43")
    assert first in cli.run("show", "order-42").stdout
    assert next(e["seq"] for e in cli.json("events", "order-43", "--json")) == 1
    assert first in cli.run("show", first[:20]).stdout
    common = next(i for i in range(32) if first[i] != second[i])
    if common >= 6:
        many = cli.run("show", first[:common], expect=2)
        assert "matches several runs" in many.stderr
        assert first in many.stderr
        assert second in many.stderr
    short = cli.run("show", first[:3], expect=3)
    assert "at least 6 hex digits" in short.stderr
    unknown = cli.run("show", "no-such-key", expect=3)
    assert unknown.stderr.startswith("error: no run no-such-key in tenant default")
    assert "start key" in unknown.stderr
    cancelled = cli.json("cancel", "order-43", "--reason", "by its key")
    assert cancelled["run_id"] == second


def test_runs_are_listed_newest_first_with_cursors_both_ways(cli: Cli) -> None:
    """runs lists newest first; --before pages on; --oldest-first and --after go the other way."""
    cli.json("publish", cli.write("nap.yaml", NAP))
    ids = [start(cli) for _ in range(3)]
    listed = [r["run_id"] for r in cli.json("runs", "--json")]
    assert listed == ids[::-1]
    assert [r["run_id"] for r in cli.json("runs", "--json", "--limit", "1", "--before", ids[2])] == [ids[1]]
    assert [r["run_id"] for r in cli.json("runs", "--json", "--oldest-first")] == ids
    assert [r["run_id"] for r in cli.json("runs", "--json", "--after", ids[0])] == ids[1:]


def test_users_of_the_default_tenant_need_no_tenants_create(cli: Cli) -> None:
    """users create on the default tenant works at once (its row is made and audited); another tenant
    that was never created is still refused, so a typo makes no tenant."""
    made = cli.json("users", "create", "app", "--roles", "operator")
    assert made["tenant"] == "default"
    typo = cli.run("users", "create", "app", "--roles", "operator", "--tenant", "acmee", expect=3)
    assert "tenant acmee does not exist" in typo.stderr
    actions = [row["action"] for row in cli.json("audit", "--json")["items"]]
    assert "tenant.create" in actions
    assert "user.create" in actions


def test_another_tenants_run_cannot_be_found_by_key_or_prefix(cli: Cli) -> None:
    """An attack: naming a run of tenant default by its start key or id prefix from tenant acme finds
    nothing (both lookups are scoped to the caller's tenant)."""
    cli.json("publish", cli.write("nap.yaml", NAP))
    run = start(cli, "--key", "secret-order")
    cli.run("tenants", "create", "acme")
    for ref in ("secret-order", run[:12]):
        probe = cli.run("show", ref, "--tenant", "acme", expect=3)
        assert probe.stderr.startswith(f"error: no run {ref} in tenant acme")
        assert run not in probe.stderr
