"""`lockstep migrate` of a version that requires approval, as an operator types it: the answer is a
pending request and nothing changes; `lockstep migrations list|show` read it back; an unknown id is one
error line (exit 3); `lockstep migrations pass` expires nothing early and applies nothing ungranted."""

from __future__ import annotations

from pathlib import Path

from .test_repair_cli_api import SHIP_V1, Cli

SHIP_V2_APPROVED = (
    SHIP_V1.replace(
        "steps:\n",
        "migration:\n  requires_approval: {approvers: {users: [ana, ben]}, quorum: 2, timeout: 1d}\nsteps:\n",
        1,
    )
    + "  - id: notify\n    activity: mail.send\n    timeout: 10s\n"
)


def test_cli_migrate_asks_for_approval_and_lists_the_request(tmp_path: Path) -> None:
    """One request per migrate (one for a bulk batch), listed and shown; the runs stay on version 1."""
    cli = Cli(tmp_path)
    cli.publish(SHIP_V1)
    cli.publish(SHIP_V2_APPROVED, "ship2.yaml")
    run = cli.start("o-1")
    out = cli.json("migrate", run, "--to-version", "2", "--reason", "add the notification")
    request = out["request"]
    assert out["ok"] is True
    assert "events" not in out
    assert request["status"] == "pending"
    assert request["requested_by"] == "anna"
    assert request["approvers"]["users"] == ["ana", "ben"]
    assert cli.show(run)["definition"]["version"] == 1
    others = [cli.start(f"o-{n}") for n in (2, 3)]
    bulk = cli.json(
        "migrate", "--definition", "ship", "--from-version", "1", "--to-version", "2", "--reason", "all"
    )
    assert bulk["migrated"] == 0
    assert sorted(r["run_id"] for r in bulk["request"]["runs"]) == sorted(others)  # run 1 is in the first
    assert [r["ok"] for r in bulk["report"]].count(False) == 1
    listed = cli.json("migrations", "list", "--status", "pending")
    assert {m["request_id"] for m in listed} == {request["request_id"], bulk["request"]["request_id"]}
    shown = cli.json("migrations", "show", request["request_id"])
    assert shown["runs"] == [{"run_id": run, "outcome": None, "detail": None}]
    cli.error("migrations", "show", "mig_" + "0" * 20, code=3, needle="no migration request")
    assert cli.json("migrations", "pass") == {"done": 0}
    assert {cli.show(r)["definition"]["version"] for r in [run, *others]} == {1}
