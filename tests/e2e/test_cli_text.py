"""The CLI prints what tenants, operators and workers wrote as text, never as Rich markup (a reason or
an error message holding `[red]` or a redaction's `[sensitive]` shows literally), and its audit rows name
the operator at the keyboard (the login name) for every account change; on both backends."""

from __future__ import annotations

from clikit import Cli

NAP = """\
name: nap
steps:
  - id: nap
    wait: 1h
"""

TRICKY = "[red]urgent[/red] [sensitive] [link=http://evil.example]click[/link]"


def test_reasons_with_markup_are_printed_literally(cli: Cli) -> None:
    """A cancel reason that looks like Rich markup is shown exactly as written in `events` and `show`."""
    cli.run("publish", cli.write("nap.yaml", NAP))
    run = cli.json("start", "nap")["run_id"]
    cli.run("cancel", run, "--reason", TRICKY)
    events = cli.run("events", run).stdout
    assert TRICKY in events.replace("\n", ""), events
    assert "\\[" not in events, "escaped markup leaked as backslashes"


def test_account_changes_are_audited_with_the_cli_user(cli: Cli) -> None:
    """tenants create, users create and disable record the CLI user ($USER, else the login name)."""
    cli.env.pop("USER", None)
    cli.env["LOGNAME"] = "ops-ana"  # no $USER: the login name
    cli.run("tenants", "create", "acme")
    cli.run("users", "create", "bo", "--tenant", "acme", "--roles", "viewer")
    cli.run("users", "disable", "bo", "--tenant", "acme")
    rows = cli.json("audit", "--tenant", "acme", "--json")["items"]
    acts = {r["action"]: r["actor"] for r in rows}
    assert acts["tenant.create"] == "ops-ana", rows
    assert acts["user.create"] == "ops-ana", rows
    assert all(r["actor"] == "ops-ana" for r in rows if r["action"].startswith("user.")), rows
