"""The operator commands over `--url`: repair (retry, dead-letters, pause, resume, skip, edit-input,
resolve, confirm, reject-proposal, migrate), approvals (link, links, revoke, reassign) and migrations
(list, show) go to a real `lockstep serve` through lockstep.client and print what the same command prints
on the database; a command that only works on the database refuses --url with one line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lab import clifork
from lockstep.client import Client

from .serverkit import TENANT, Server, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

HOLD = {"name": "hold", "steps": [{"id": "nap", "wait": "1h", "skippable": True}]}
HOLD_V2 = {"name": "hold", "steps": [{"id": "nap", "wait": "2h", "skippable": True}]}
GUARDED = {
    "name": "guarded",
    "four_eyes": ["skip"],
    "steps": [{"id": "nap", "wait": "1h", "skippable": True}],
}
GUARDED_V2 = {
    "name": "guarded",
    "four_eyes": ["skip"],
    "migration": {"requires_approval": {"approvers": {"users": ["u-approver"]}, "timeout": "1d"}},
    "steps": [{"id": "nap", "wait": "1h", "skippable": True}],
}
FLAKY = {
    "name": "flaky",
    "steps": [
        {
            "id": "work",
            "activity": "test.step",
            "timeout": "60s",
            "retry": {"max_attempts": 1, "on_exhausted": "dead_letter"},
        }
    ],
}
ASK = {
    "name": "ask",
    "steps": [
        {
            "id": "approve",
            "approval": {
                "approvers": {"users": ["u-approver"], "groups": ["reviewers"]},
                "timeout": "1d",
            },
        }
    ],
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("cli-remote-ops")
    s = Server(tmp, f"sqlite:///{tmp / 'lockstep.db'}")
    try:
        third = s.engine.service.principals.create_user(TENANT, "u-approver3", ["approver"], ["reviewers"])
        assert third.api_key is not None
        s.key_files["approver3"] = tmp / "approver3.key"
        s.key_files["approver3"].write_text(third.api_key + "\n")
        s.key_files["approver3"].chmod(0o600)
        for definition in (HOLD, HOLD_V2, GUARDED, GUARDED_V2, FLAKY, ASK):
            s.publish(definition)
        yield s.up()
    finally:
        s.shutdown()


def _cli(server: Server, *args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
    done = clifork.run(
        [sys.executable, "-m", "lockstep", *args],
        env=server.env,
        cwd=server.dir,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == expect, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    if expect:
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done


def _remote(server: Server, role: str = "operator") -> list[str]:
    return ["--url", server.url, "--api-key-file", str(server.key_files[role])]


def _local(server: Server) -> list[str]:
    return ["--db", server.db_url, "--tenant", TENANT]


def _json(server: Server, *args: str) -> Any:
    return json.loads(_cli(server, *args).stdout)


def _start(server: Server, name: str, version: int | None = None) -> str:
    extra = ["--version", str(version)] if version else []
    run_id: str = _json(server, *_remote(server), "start", name, *extra)["run_id"]
    return run_id


def _same(local: Any, remote: Any, local_id: str, remote_id: str) -> None:
    """The two outputs are the same JSON once the run ids are swapped."""
    assert json.loads(json.dumps(remote).replace(remote_id, local_id)) == local


def test_repairs_print_the_same_over_url_as_on_the_database(server: Server) -> None:
    """pause, resume, edit-input, skip and a dry-run migrate print the same JSON on --db and over --url."""
    a, b = _start(server, "hold", 1), _start(server, "hold", 1)
    for command in (
        ["pause", "--reason", "look"],
        ["resume", "--reason", "go on"],
        ["edit-input", "--input", '{"x": 1}', "--reason", "typo"],
        ["migrate", "--to-version", "2", "--dry-run", "--reason", "plan"],
        ["skip", "nap", "--output", '{"done": true}', "--reason", "no need"],
    ):
        verb, rest = command[0], command[1:]
        here = _json(server, *_local(server), verb, a, *rest)
        there = _json(server, *_remote(server), verb, b, *rest)
        _same(here, there, a, b)
    assert _json(server, *_remote(server), "show", b, "--json")["status"] == "completed"
    assert _json(server, *_remote(server), "show", b, "--json")["input"] == {"x": 1}


def test_migrate_over_url_moves_the_run(server: Server) -> None:
    """`migrate RUN --to-version 2` over --url records WorkflowMigrated; bulk migration refuses --url."""
    run_id = _start(server, "hold", 1)
    plan = _json(server, *_remote(server), "migrate", run_id, "--to-version", "2", "--reason", "move")
    assert plan["ok"] is True
    assert plan["dry_run"] is False
    assert plan["from"]["version"] == 1
    assert "WorkflowMigrated" in plan["events"]
    assert _json(server, *_remote(server), "show", run_id, "--json")["definition"]["version"] == 2
    bulk = ["migrate", "--definition", "hold", "--from-version", "1", "--to-version", "2", "--reason", "r"]
    err = _cli(server, *_remote(server), *bulk, expect=2).stderr
    assert "only on the database" in err
    assert "RUN_ID" in err


def test_four_eyes_and_migration_requests_over_url(server: Server) -> None:
    """A four-eyes skip over --url prints its proposal, reject-proposal withdraws it, confirm by the
    same operator is refused; a migration that needs approval prints its request, which migrations
    list and show find over --url as on the database."""
    run_id = _start(server, "guarded", 1)
    proposed = _json(server, *_remote(server), "skip", run_id, "nap", "--reason", "skip it")
    proposal = proposed["proposal"]
    assert proposal["kind"] == "skip"
    assert proposal["actor"] == "u-operator"
    err = _cli(
        server, *_remote(server), "confirm", run_id, proposal["proposal_id"], "--reason", "me", expect=5
    ).stderr
    assert "different operator" in err
    withdrawn = _json(
        server, *_remote(server), "reject-proposal", run_id, proposal["proposal_id"], "--reason", "no"
    )
    assert withdrawn["run_id"] == run_id
    asked = _json(server, *_remote(server), "migrate", run_id, "--to-version", "2", "--reason", "v2")
    request = asked["request"]
    assert request["status"] == "pending"
    assert request["requested_by"] == "u-operator"
    listed = _json(server, *_remote(server), "migrations", "list", "--status", "pending")
    assert request["request_id"] in [r["request_id"] for r in listed]
    shown = _json(server, *_remote(server), "migrations", "show", request["request_id"])
    assert shown == _json(server, *_local(server), "migrations", "show", request["request_id"])
    assert shown["runs"][0]["run_id"] == run_id
    err = _cli(server, *_remote(server), "migrations", "pass", expect=2).stderr
    assert "needs the database" in err
    decide = ["approvals", "decide", request["request_id"], "approve"]
    err = _cli(server, *_remote(server), *decide, expect=7).stderr  # an operator's key
    assert "error:" in err
    inbox = _json(server, *_remote(server, "approver"), "approvals", "inbox", "--json")
    assert [i["kind"] for i in inbox if i["request_id"] == request["request_id"]] == ["migration"]
    applied = _json(server, *_remote(server, "approver"), *decide, "--comment", "ok")
    assert applied["request_id"] == request["request_id"]
    assert applied["status"] == "applied"
    assert _json(server, *_remote(server), "show", run_id, "--json")["definition"]["version"] == 2


def test_dead_letter_and_retry_over_url(server: Server) -> None:
    """A task that failed its only attempt is in `dead-letters` over --url (the same JSON as on the
    database) and `retry` over --url runs it again as attempt 2."""
    run_id = _start(server, "flaky")
    with Client(server.url, api_key=server.keys["worker"]) as worker:
        tasks: list[Any] = []
        wait_until(lambda: bool(tasks.extend(worker.poll_tasks(["test.step"], wait_seconds=1)) or tasks))
        task = tasks[0]
        worker.fail_task(task.task_id, task.attempt, task.fencing_token, "Boom", "downstream said no")
    show = [*_remote(server), "show", run_id, "--json"]
    wait_until(lambda: _json(server, *show)["status"] == "needs_attention")
    remote = _json(server, *_remote(server), "dead-letters", "--json")
    assert remote == _json(server, *_local(server), "dead-letters", "--json")
    assert [(d["run_id"], d["step"]) for d in remote] == [(run_id, "work")]
    assert run_id in _cli(server, *_remote(server), "dead-letters").stdout
    retried = _json(server, *_remote(server), "retry", run_id, "work", "--reason", "fixed downstream")
    assert retried == {"run_id": run_id, "step": "work", "status": "running", "attempt": 2}


def test_approval_links_over_url(server: Server) -> None:
    """approvals link, links, revoke and reassign work over --url; the minted link is the server's."""
    run_id = _start(server, "ask")
    minted = _json(
        server, *_remote(server), "approvals", "link", run_id, "approve", "--approver", "u-approver",
        "--expires-in", "1h",
    )  # fmt: skip
    assert minted["approver"] == "u-approver"
    assert minted["url"].startswith("http")
    assert minted["token"] in minted["url"]
    links = _json(server, *_remote(server), "approvals", "links", run_id)
    assert links == _json(server, *_local(server), "approvals", "links", run_id)
    assert minted["link_id"] in [link["link_id"] for link in links]
    revoked = _json(server, *_remote(server), "approvals", "revoke", minted["link_id"], "--reason", "resent")
    assert revoked == {"link_id": minted["link_id"], "status": "revoked"}
    reassign = ["approvals", "reassign", run_id, "approve", "--from", "u-approver", "--reason", "away"]
    err = _cli(server, *_remote(server), *reassign, "--to", "u-operator", expect=7).stderr
    assert "may not make themself an approver" in err  # the key's user is the actor, as in the API
    moved = _json(server, *_remote(server), *reassign, "--to", "u-approver3")
    assert (moved["old"], moved["new"]) == ("u-approver", "u-approver3")
    err = _cli(server, *_remote(server), "approvals", "link", run_id, "approve", "--approver", "u-approver",
               "--expires-in", "soon", expect=2).stderr  # fmt: skip
    assert "--expires-in" in err
    inbox = _json(server, *_remote(server, "approver3"), "approvals", "inbox", "--json")
    mine = [i for i in inbox if i["run_id"] == run_id]
    assert [i["kind"] for i in mine] == ["approval"]
    assert run_id in _cli(server, *_remote(server, "approver3"), "approvals", "inbox").stdout
    decide = ["approvals", "decide", mine[0]["request_id"]]
    err = _cli(server, *_local(server), *decide, "approve", expect=2).stderr
    assert "only over --url" in err
    err = _cli(server, *_remote(server, "approver3"), *decide, "approve", "--values", "[1]", expect=2).stderr
    assert "--values" in err
    err = _cli(server, *_remote(server, "approver"), *decide, "approve", expect=7).stderr
    assert "error:" in err  # reassigned away: no longer an approver of this request
    decided = _json(server, *_remote(server, "approver3"), *decide, "approve", "--comment", "fine")
    assert (decided["decision"], decided["run_id"]) == ("approve", run_id)
    assert decided["decisions"][0]["approver"] == "u-approver3"
    wait_until(lambda: _json(server, *_remote(server), "show", run_id, "--json")["status"] == "completed")


def test_bad_input_over_url_is_one_clear_line(server: Server, tmp_path: Path) -> None:
    """An unknown run, a wrong key, a role that may not, a step that does not wait for an operator and
    a database-only command over --url: each one line on stderr, its exit code, no traceback, nothing
    changed on the server."""
    run_id = _start(server, "hold")
    before = _json(server, *_remote(server), "events", run_id, "--json")
    err = _cli(server, *_remote(server), "pause", "no-such-run", "--reason", "r", expect=3).stderr
    assert "no-such-run" in err
    err = _cli(server, *_remote(server), "approvals", "links", "no-such-run", expect=3).stderr
    assert "no-such-run" in err
    wrong = tmp_path / "wrong.key"
    wrong.write_text("lsk_not_a_real_key\n")
    wrong.chmod(0o600)
    err = _cli(server, "--url", server.url, "--api-key-file", str(wrong), "pause", run_id, "--reason", "r",
               expect=7).stderr  # fmt: skip
    assert "error:" in err
    for role in ("viewer", "worker", "approver"):
        err = _cli(server, *_remote(server, role), "pause", run_id, "--reason", "r", expect=7).stderr
        assert "error:" in err
    err = _cli(server, *_remote(server, "viewer"), "migrations", "list", expect=7).stderr
    assert "error:" in err
    err = _cli(server, *_remote(server, "viewer"), "approvals", "links", run_id, expect=7).stderr
    assert "error:" in err
    # A refusal of the state machine is a 409 with refused: true over the API: exit 5, as on the database.
    err = _cli(server, *_remote(server), "retry", run_id, "nap", "--reason", "r", expect=5).stderr
    assert "does not wait for an operator" in err
    err = _cli(server, *_remote(server), "edit-input", run_id, "--input", "{bad", "--reason", "r", expect=2)
    assert "--input" in err.stderr
    assert _json(server, *_remote(server), "events", run_id, "--json") == before
    for command in (["db", "backup", str(tmp_path / "copy.db")], ["db", "upgrade"]):
        err = _cli(server, *_remote(server), *command, expect=2).stderr
        assert "not over --url" in err
        assert "--db" in err
    assert not (tmp_path / "copy.db").exists()


def test_a_refused_command_exits_5_over_url_as_on_the_database(server: Server) -> None:
    """A command the run refuses (resume of a run that is not paused; migrate to the version it is on)
    exits 5 with the same message on --db and over --url, not --url's 4 of a conflict."""
    run_id = _start(server, "hold", 1)
    for command in (
        ["resume", run_id, "--reason", "go"],
        ["migrate", run_id, "--to-version", "1", "--reason", "r"],
    ):
        here = _cli(server, *_local(server), *command, expect=5).stderr
        there = _cli(server, *_remote(server), *command, expect=5).stderr
        assert here == there
