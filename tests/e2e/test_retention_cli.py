"""End-to-end on both backends: `runs hold|release|purge RUN --reason` and `tenants hold|release T
--reason` each print the hold (or the tombstone) as JSON, name the operator at the CLI ($USER, else
the login name) as its actor, need a reason, and are audited."""

from __future__ import annotations

import pytest
from clikit import Cli

NAP = "name: nap\nsteps:\n  - id: nap\n    wait: 1h\n"


@pytest.fixture
def acme(cli: Cli) -> Cli:
    cli.env["USER"] = "ops-ben"
    cli.json("tenants", "create", "acme")
    cli.json("--tenant", "acme", "publish", cli.write("nap.yaml", NAP))
    return cli


def test_holds_releases_and_an_operators_purge_print_json_and_name_the_operator(acme: Cli) -> None:
    """Each command prints what it made; the actor is $USER, else the login name; the audit log has a
    row of each, with the run or the tenant as target."""
    run = acme.json("--tenant", "acme", "start", "nap")["run_id"]
    hold = acme.json("--tenant", "acme", "runs", "hold", run, "--reason", "case 4")
    assert (hold["run_id"], hold["tenant"], hold["held_by"], hold["reason"]) == (
        run,
        "acme",
        "ops-ben",
        "case 4",
    )
    released = acme.json("--tenant", "acme", "runs", "release", run, "--reason", "case 4 closed")
    assert (released["released_by"], released["release_reason"]) == ("ops-ben", "case 4 closed")
    held = acme.json("--tenant", "globex", "tenants", "hold", "acme", "--reason", "regulator")
    assert (held["run_id"], held["tenant"], held["held_by"]) == (None, "acme", "ops-ben")
    del acme.env["USER"]
    acme.env["LOGNAME"] = "ops-cy"
    free = acme.json("tenants", "release", "acme", "--reason", "done")
    assert (free["tenant"], free["released_by"], free["release_reason"]) == ("acme", "ops-cy", "done")
    acme.run("--tenant", "acme", "runs", "hold", run, expect=2)  # --reason is required
    acme.run("--tenant", "acme", "tenants", "hold", "acme", expect=2)
    acme.json("--tenant", "acme", "cancel", run, "--reason", "not needed")  # finished: it may be purged
    stone = acme.json("--tenant", "acme", "runs", "purge", run, "--reason", "erasure #3")
    assert (stone["run_id"], stone["purged_by"], stone["reason"], stone["state"]) == (
        run,
        "ops-cy",
        "erasure #3",
        "purged",
    )
    rows = acme.json("--tenant", "acme", "audit", "--action", "retention.", "--json")["items"]
    assert [(r["action"], r["actor"], r["target"]) for r in reversed(rows)] == [
        ("retention.hold", "ops-ben", run),
        ("retention.release", "ops-ben", run),
        ("retention.hold", "ops-ben", "acme"),
        ("retention.release", "ops-cy", "acme"),
        ("retention.purge", "ops-cy", run),
    ]
