"""End-to-end: the `lockstep` CLI as a user runs it (publish, start, show, events, runs, cancel, verify,
db upgrade, demo), its JSON shapes, and its one-line errors that write nothing; every test but the demo
(which brings its own database) runs on both backends (the `backend` fixture in conftest.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from clikit import BACKENDS, Cli, fresh_url

SHOP = """\
# a process whose first step waits for a worker (none runs in these tests)
name: shop
input_schema:
  type: object
  required: [order]
  properties:
    order: {type: string}
    qty: {type: integer, minimum: 1}
steps:
  - id: charge
    activity: payments.charge
    input: {order: "${input.order}"}
    timeout: 10s
    idempotency_key: "charge-${input.order}"
  - id: cooling-off
    wait: 1h
"""

NAP = """\
name: nap
steps:
  - id: nap
    wait: 1h
"""


def run_id(cli: Cli, *args: str) -> str:
    out = cli.json("start", *args)
    assert set(out) == {"run_id"}
    return str(out["run_id"])


def test_publish_prints_name_version_digest_and_is_idempotent(cli: Cli) -> None:
    """publish prints {name, version, digest}; the same file gives the same version, a changed one N+1."""
    path = cli.write("shop.yaml", SHOP)
    first = cli.json("publish", path)
    assert set(first) == {"name", "version", "digest"}
    assert first["name"] == "shop"
    assert first["version"] == 1
    assert first["digest"].startswith("sha256:")
    assert cli.json("publish", path) == first
    cli.write("shop.yaml", SHOP.replace("wait: 1h", "wait: 2h"))
    second = cli.json("publish", path)
    assert (second["version"], second["name"]) == (2, "shop")
    assert second["digest"] != first["digest"]
    listed = cli.json("definitions", "--json")
    assert [(d["name"], d["version"]) for d in listed] == [("shop", 1), ("shop", 2)]


def test_start_with_the_same_key_returns_the_same_run(cli: Cli) -> None:
    """start --key is idempotent: the same key and request return the same run_id, and no second run."""
    cli.json("publish", cli.write("shop.yaml", SHOP))
    payload = json.dumps({"order": "o-1", "qty": 2})
    first = run_id(cli, "shop", "--input", payload, "--key", "order-o-1")
    assert run_id(cli, "shop", "--input", payload, "--key", "order-o-1") == first
    other = run_id(cli, "shop", "--input", payload, "--key", "order-o-2")
    assert other != first
    assert sorted(r["run_id"] for r in cli.json("runs", "--json")) == sorted([first, other])


def test_show_json_describes_the_run(cli: Cli) -> None:
    """show --json has run_id, tenant, status, definition, current_step, why/next, input, output, steps."""
    pub = cli.json("publish", cli.write("shop.yaml", SHOP))
    run = run_id(cli, "shop", "--input", '{"order": "o-7"}')
    shown = cli.json("show", run, "--json")
    assert shown["run_id"] == run
    assert shown["tenant"] == "default"
    assert shown["status"] == "running"
    assert shown["definition"] == {"name": "shop", "version": 1, "digest": pub["digest"]}
    assert shown["current_step"] == "charge"
    assert "payments.charge" in shown["wait_reason"]
    assert "queued" in shown["wait_reason"]
    assert shown["next_action"]
    assert shown["input"] == {"order": "o-7"}
    assert shown["output"] is None
    assert shown["error"] is None
    assert list(shown["steps"]) == ["charge", "cooling-off"]
    assert {k: shown["steps"]["charge"][k] for k in ("status", "attempts")} == {
        "status": "scheduled",
        "attempts": 1,
    }
    assert {k: shown["steps"]["cooling-off"][k] for k in ("status", "attempts")} == {
        "status": "pending",
        "attempts": 0,
    }
    assert shown["steps"]["charge"]["idempotency_key"] == "charge-o-7"  # the rendered template
    text = cli.run("show", run).stdout  # the human view says the same thing
    assert run in text
    assert "running" in text
    assert "queued" in text
    assert "idempotency key" in text


def test_events_json_lists_the_history(cli: Cli) -> None:
    """events --json: contiguous seq from 1, each with type, at and data; step/attempt on activity events."""
    cli.json("publish", cli.write("shop.yaml", SHOP))
    run = run_id(cli, "shop", "--input", '{"order": "o-8"}')
    events = cli.json("events", run, "--json")
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert all({"seq", "type", "at", "data"} <= set(e) for e in events)
    assert all(e["at"].endswith("Z") for e in events)
    assert [e["type"] for e in events] == ["RunStarted", "ActivityScheduled"]
    assert events[0]["data"]["input"] == {"order": "o-8"}
    scheduled = events[1]
    assert (scheduled["step"], scheduled["attempt"]) == ("charge", 1)
    assert scheduled["data"]["idempotency_key"] == "charge-o-8"
    assert "RunStarted" in cli.run("events", run).stdout


def test_runs_filters_by_status(cli: Cli) -> None:
    """runs --status running --json lists the running run only; --status waiting the waiting one."""
    cli.json("publish", cli.write("shop.yaml", SHOP))
    cli.json("publish", cli.write("nap.yaml", NAP))
    running = run_id(cli, "shop", "--input", '{"order": "o-9"}')
    waiting = run_id(cli, "nap")
    rows = cli.json("runs", "--status", "running", "--json")
    assert [r["run_id"] for r in rows] == [running]
    assert rows[0]["status"] == "running"
    assert rows[0]["definition"]["name"] == "shop"
    assert rows[0]["current_step"] == "charge"
    assert [r["run_id"] for r in cli.json("runs", "--status", "waiting", "--json")] == [waiting]
    assert cli.json("runs", "--status", "completed", "--json") == []
    assert {r["run_id"] for r in cli.json("runs", "--json")} == {running, waiting}


def test_cancel_requires_a_reason_and_records_it(cli: Cli) -> None:
    """cancel without --reason (or with an empty one) is refused and changes nothing; with one it cancels."""
    cli.json("publish", cli.write("nap.yaml", NAP))
    run = run_id(cli, "nap")
    before = cli.dump()
    missing = cli.run("cancel", run, expect=None)
    assert missing.returncode != 0
    assert "--reason" in missing.stderr
    blank = cli.run("cancel", run, "--reason", "  ", expect=2)
    assert blank.stderr.startswith("error:")
    assert cli.dump() == before
    assert cli.json("show", run, "--json")["status"] == "waiting"

    out = cli.json("cancel", run, "--reason", "customer changed their mind")
    assert out == {"run_id": run, "status": "cancelled", "accepted": True}
    shown = cli.json("show", run, "--json")
    assert shown["status"] == "cancelled"
    assert shown["cancel"]["reason"] == "customer changed their mind"
    types = [e["type"] for e in cli.json("events", run, "--json")]
    assert types[-3:] == ["CancelRequested", "TimerCancelled", "RunCancelled"]
    again = cli.run("cancel", run, "--reason", "twice", expect=5)  # a finished run refuses
    assert again.stderr.startswith("error:")


# --- bad input: one line on stderr, non-zero exit, nothing written ----------------------------------


@pytest.fixture(scope="module", params=BACKENDS)
def populated(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> tuple[Cli, str]:
    """A database with `shop` published and one run of it (shared: the cases below must not write)."""
    tmp = tmp_path_factory.mktemp("populated")
    cli = Cli(fresh_url(request.param, tmp, request), tmp)  # PostgreSQL: migrated by the first command
    cli.json("publish", cli.write("shop.yaml", SHOP))
    run = run_id(cli, "shop", "--input", '{"order": "o-1"}', "--key", "k-1")
    cli.write("malformed.yaml", "name: broken\nsteps: [ {id: a, wait: 1s\n")
    cli.write(
        "bad-expression.yaml",
        "name: bad-expr\nsteps:\n  - id: route\n    choice:\n      - {if: 'input.qty >', next: end}\n",
    )
    cli.write("no-timeout.yaml", "name: no-timeout\nsteps:\n  - id: a\n    activity: inventory.reserve\n")
    cli.write("unknown-field.yaml", "name: typo\nsteps:\n  - id: a\n    wiat: 1s\n")
    return cli, run


BAD: dict[str, tuple[Callable[[str], list[str]], int, str]] = {
    "malformed-yaml": (lambda run: ["publish", "malformed.yaml"], 2, "not valid YAML"),
    "bad-expression": (lambda run: ["publish", "bad-expression.yaml"], 2, "steps[0](route).choice[0].if"),
    "activity-without-timeout": (lambda run: ["publish", "no-timeout.yaml"], 2, "timeout"),
    "unknown-step-kind": (lambda run: ["publish", "unknown-field.yaml"], 2, "steps[0](a)"),
    "missing-file": (lambda run: ["publish", "nope.yaml"], 2, "does not exist"),
    "unknown-definition": (lambda run: ["start", "nope"], 3, "no definition nope"),
    "unknown-version": (lambda run: ["start", "shop", "--version", "9", "--input", "{}"], 3, "version 9"),
    "input-not-json": (lambda run: ["start", "shop", "--input", "{order: o-2}"], 2, "not valid JSON"),
    "input-fails-schema": (
        lambda run: ["start", "shop", "--input", '{"order": "o-2", "qty": 0}'],
        2,
        "input.qty",
    ),
    "key-reused-for-other-input": (
        lambda run: ["start", "shop", "--input", '{"order": "o-3"}', "--key", "k-1"],
        4,
        "already used",
    ),
    "show-unknown-run": (lambda run: ["show", "0" * 32, "--json"], 3, "not found"),
    "events-unknown-run": (lambda run: ["events", "0" * 32, "--json"], 3, "not found"),
    "cancel-unknown-run": (lambda run: ["cancel", "0" * 32, "--reason", "x"], 3, "not found"),
    "show-other-tenants-run": (lambda run: ["--tenant", "other", "show", run, "--json"], 3, "not found"),
    "events-other-tenants-run": (lambda run: ["--tenant", "other", "events", run], 3, "not found"),
    "cancel-other-tenants-run": (
        lambda run: ["--tenant", "other", "cancel", run, "--reason", "x"],
        3,
        "not found",
    ),
    "start-in-other-tenant": (lambda run: ["--tenant", "other", "start", "shop"], 3, "no definition shop"),
    "unknown-activity-module": (
        lambda run: ["worker", "--activities", "no_such_module_xyz"],
        2,
        "no_such_module_xyz",
    ),
    "unknown-activity-type": (
        lambda run: ["worker", "--activities", "lockstep.examples.activities", "--only", "nope.nothing"],
        1,
        "nope.nothing",
    ),
    "bad-duration": (
        lambda run: ["worker", "--activities", "lockstep.examples.activities", "--lease-ttl", "10"],
        2,
        "--lease-ttl",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_error_line_and_writes_nothing(populated: tuple[Cli, str], case: str) -> None:
    """A bad input: one stderr line starting with 'error:', no traceback, a non-zero exit, no writes; a
    CEL syntax error adds the expression and a caret under the position (two indented lines)."""
    cli, run = populated
    build, code, needle = BAD[case]
    before = cli.dump()
    done = cli.run(*build(run), expect=None)
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    if case == "bad-expression":
        assert lines[1:] == ["    input.qty >", "    " + " " * 11 + "^"], done.stderr
        lines = lines[:1]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: "), done.stderr
    assert needle in lines[0]
    assert "Traceback" not in done.stderr + done.stdout
    assert done.stdout == ""
    assert cli.dump() == before


# --- operations ----------------------------------------------------------------------------------


# Sets input.n to 2 in one run's stored snapshot (the snapshot column is JSON text on both backends).
TAMPER_INPUT_N = {
    "sqlite": "UPDATE runs SET snapshot = json_set(snapshot, '$.input.n', 2) WHERE run_id = ?",
    "postgresql": "UPDATE runs SET snapshot = jsonb_set(snapshot::jsonb, '{input,n}', '2')::text "
    "WHERE run_id = %s",
}


def test_verify_detects_a_tampered_snapshot(cli: Cli) -> None:
    """verify exits 0 on consistent runs and 1 (naming the run) after a snapshot is edited behind its back."""
    cli.json("publish", cli.write("nap.yaml", NAP))
    good = run_id(cli, "nap")
    bad = run_id(cli, "nap", "--input", '{"n": 1}')
    report = cli.json("verify", "--json")
    assert {k: report[k] for k in ("runs", "ok", "problems")} == {"runs": 2, "ok": True, "problems": []}
    assert report["audit"]["ok"] is True  # the audit chains are verified too (tests/e2e/test_audit_cli.py)

    changed = cli.sql(TAMPER_INPUT_N[cli.backend], (bad,))
    assert changed == 1
    done = cli.run("verify", expect=1)
    assert "MISMATCH" in done.stdout
    assert bad in done.stdout
    assert good not in done.stdout
    report = json.loads(cli.run("verify", "--json", expect=1).stdout)
    assert report["ok"] is False
    assert [p["run_id"] for p in report["problems"]] == [bad]
    assert "input" in "; ".join(report["problems"][0]["problems"])
    cli.run("verify", bad, expect=1)
    cli.run("verify", good)


def test_db_upgrade_on_a_current_database_applies_nothing(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """db upgrade creates a missing schema once; on a current database it reports nothing applied."""
    cli = Cli(fresh_url(backend, tmp_path, request, schema=False), tmp_path)
    first = cli.json("db", "upgrade")
    assert first["applied"]  # a fresh file gets every migration
    assert cli.json("db", "upgrade") == {"applied": []}
    cli.json("publish", cli.write("nap.yaml", NAP))
    assert cli.json("db", "upgrade") == {"applied": []}
    assert [d["name"] for d in cli.json("definitions", "--json")] == ["nap"]


@pytest.mark.slow
def test_demo_runs_the_tour_end_to_end(tmp_path: Path) -> None:
    """lockstep demo exits 0 and ends with "every run reached the state it should"."""
    cli = Cli(f"sqlite:///{tmp_path / 'unused.db'}", tmp_path)  # db=False: the tour brings its own
    done = cli.run("demo", db=False)
    assert "every run reached the state it should" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    assert "[bold]" not in done.stdout  # its markup is rendered, never printed as text
    assert "[/green]" not in done.stdout
    assert not list(tmp_path.iterdir())  # the tour uses its own temporary directory
