"""The publish-time checks through the real CLI, on SQLite and PostgreSQL: refusals exit 2 with the
path, the reason and the fix on stderr (a CEL syntax error as a caret under the expression) and store
nothing; warnings go to stderr while the version is published and stdout keeps its JSON; duplicate
YAML keys at any depth are refused with the key and the line; a run waiting on approvers the tenant
lacks says so in `show`."""

from __future__ import annotations

import json
import textwrap

from clikit import Cli

BASE = """\
name: pay
input_schema:
  type: object
  properties: {amount: {type: number}, order: {type: string}}
steps:
  - id: approve
    approval: {approvers: {users: [alice]}, timeout: 1d}
  - id: charge
    activity: payments.charge
    input: {amount: "${input.amount}"}
    timeout: 10s
"""


def test_a_misspelt_kind_and_a_syntax_error_are_refused_with_a_fix(cli: Cli) -> None:
    """`activty:` names the key and its match; `input.amount >` shows the expression and a caret."""
    bad = BASE.replace("activity: payments.charge", "activty: payments.charge") + textwrap.indent(
        "- id: route\n  choice:\n    - {if: 'input.amount >', next: charge}\n    - {else: end}\n", "  "
    )
    done = cli.run("publish", cli.write("pay.yaml", bad), expect=2)
    err = done.stderr
    assert "steps[1](charge): unknown key `activty` (did you mean `activity`?)" in err, err
    assert "found none" not in err
    assert (
        "steps[2](route).choice[0].if: invalid expression: syntax error at column 15: the expression " in err
    )
    lines = err.splitlines()
    shown = next(i for i, line in enumerate(lines) if line.strip() == "input.amount >")
    assert lines[shown + 1].index("^") == lines[shown].index("input.amount >") + 14, err
    assert "Traceback" not in err
    assert "ERROR: <input>" not in err
    assert cli.dump()["definitions"] == []


def test_a_read_of_a_later_step_is_refused_with_the_path(cli: Cli) -> None:
    """The approval's details read the charge that comes after it: refused, explaining the path."""
    bad = BASE.replace("timeout: 1d}", 'timeout: 1d, details: "${steps.charge.output.id}"}')
    done = cli.run("publish", cli.write("pay.yaml", bad), expect=2)
    assert (
        "steps[0](approve).approval.details: `steps.charge.output`: step `charge` runs only after "
        "`approve` (approve → charge)" in done.stderr
    ), done.stderr
    assert cli.dump()["definitions"] == []


def test_warnings_go_to_stderr_and_the_version_is_published(cli: Cli) -> None:
    """alice is no user of the tenant and `input.amout` is not declared (the schema allows others):
    publish succeeds, stdout is the version's JSON as before, stderr has one warning line each."""
    path = cli.write("pay.yaml", BASE.replace("${input.amount}", "${input.amout}"))
    done = cli.run("publish", path)
    assert set(json.loads(done.stdout)) == {"name", "version", "digest"}
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 2, done.stderr
    assert warnings[0].startswith(
        "warning: steps[0](approve).approval.approvers: no user alice in tenant default; nobody can approve"
    )
    assert warnings[1].startswith(
        "warning: steps[1](charge).input.amount: `input.amout`: input_schema does not"
    )
    assert "did you mean `input.amount`?" in warnings[1]
    assert [row[1] for row in cli.dump()["definitions"]] == ["pay"]


def test_the_run_says_nobody_can_approve(cli: Cli) -> None:
    """A run of that version waits on alice, whom the tenant lacks: `show` says so."""
    cli.run("publish", cli.write("pay.yaml", BASE))
    run = cli.json("start", "pay", "--input", '{"amount": 5}')["run_id"]
    shown = cli.json("show", run, "--json")
    assert "no user alice in tenant default; nobody can approve" in shown["wait_reason"], shown
    events = cli.json("events", run, "--json")
    (requested,) = [e for e in events if e["type"] == "ApprovalRequested"]
    assert requested["data"]["warnings"][0] == "no user alice in tenant default"


def test_duplicate_keys_are_refused_at_any_depth_with_the_line(cli: Cli) -> None:
    """Two `timeout:` keys in one step (the last silently won before): exit 2, the key and both lines."""
    bad = BASE.replace("    timeout: 10s\n", "    timeout: 10s\n    timeout: 1s\n")
    done = cli.run("publish", cli.write("pay.yaml", bad), expect=2)
    assert "duplicate key 'timeout' at line 12, column 5 (first at line 11, column 5)" in done.stderr
    assert cli.dump()["definitions"] == []
