"""Operator repair as users reach it: the `lockstep` CLI run as a subprocess (pause, resume, skip,
edit-input, resolve, retry, migrate incl. --dry-run and bulk), the /v1/runs/{id}/... API over httpx's
ASGI transport (roles, tenants, refusals), and the run page's operator form."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
from fastapi import FastAPI

from lab import clifork
from lockstep.api.app import create_app
from lockstep.engine import Engine

from .conftest import FakeClock

TABLES = ("definitions", "runs", "events", "tasks", "timers")
SHIP_V1 = """\
name: ship
input_schema:
  type: object
  required: [order]
  properties:
    order: {type: string}
steps:
  - id: hold
    wait: 1h
    skippable: true
  - id: pack
    activity: box.pack
    delivery: at_most_once
    input: {order: "${input.order}"}
    timeout: 10s
"""
SHIP_V2 = SHIP_V1.replace(
    "  - id: pack\n", "  - id: label\n    activity: box.label\n    timeout: 10s\n  - id: pack\n"
)
SHIP_V3 = SHIP_V1.replace("required: [order]", "required: [order, customer]")


class Cli:
    """Runs `python -m lockstep --db URL ...` (the console script's code) as an operator named anna."""

    def __init__(self, tmp: Path) -> None:
        self.db = tmp / "lockstep.db"
        self.url = f"sqlite:///{self.db}"
        self.tmp = tmp
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
        self.env["USER"] = "anna"

    def run(self, *args: str, expect: int | None = 0) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "lockstep", "--db", self.url, *args]
        done = clifork.run(
            cmd, env=self.env, cwd=self.tmp, capture_output=True, text=True, timeout=120, check=False
        )
        if expect is not None:
            assert done.returncode == expect, (
                f"lockstep {' '.join(args)} exited {done.returncode}, expected {expect}:\n"
                f"stdout: {done.stdout}\nstderr: {done.stderr}"
            )
        assert "Traceback" not in done.stdout + done.stderr
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args).stdout)

    def error(self, *args: str, code: int, needle: str) -> str:
        """A refused command: one `error:` line naming the problem, exit `code`, nothing written."""
        before = self.dump()
        done = self.run(*args, expect=code)
        lines = done.stderr.splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("error: "), done.stderr
        assert needle in lines[0], lines[0]
        assert done.stdout == ""
        assert self.dump() == before, "a refused command wrote something"
        return lines[0]

    def publish(self, text: str, name: str = "ship.yaml") -> dict[str, Any]:
        path = self.tmp / name
        path.write_text(text)
        out: dict[str, Any] = self.json("publish", str(path))
        return out

    def start(self, order: str = "o-1", **extra: Any) -> str:
        """A run of ship pinned to version 1 (start would take the latest version)."""
        payload = json.dumps({"order": order, **extra})
        return str(self.json("start", "ship", "--version", "1", "--input", payload)["run_id"])

    def show(self, run: str) -> dict[str, Any]:
        out: dict[str, Any] = self.json("show", run, "--json")
        return out

    def events(self, run: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = self.json("events", run, "--json")
        return out

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        with closing(sqlite3.connect(self.db)) as conn:
            return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in TABLES}

    def verify(self) -> None:
        assert self.json("verify", "--json")["ok"] is True

    def unknown_outcome(self, run: str) -> None:
        """Play a worker in-process: take pack and lose it mid-call (an at-most-once unknown outcome)."""
        engine = Engine.open(self.url)
        try:
            svc = engine.service
            [lease] = svc.claim("w-1", ["box.pack"], limit=1, lease_ttl=svc.unserved_after)
            assert lease.run_id == run
            svc.fail(lease.task_id, lease.attempt, lease.fencing, "ConnectionError", "reset", unexpected=True)
        finally:
            engine.close()


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def _skip_hold(cli: Cli, run: str) -> None:
    cli.json("skip", run, "hold", "--reason", "no cool-off needed")


# --- CLI ---------------------------------------------------------------------------------------------

COMMANDS: dict[str, list[str]] = {
    "pause": ["pause", "{run}"],
    "resume": ["resume", "{run}"],
    "skip": ["skip", "{run}", "hold"],
    "edit-input": ["edit-input", "{run}", "--input", '{"order": "o-2"}'],
    "resolve": ["resolve", "{run}", "pack", "--as", "succeeded"],
    "retry": ["retry", "{run}", "pack"],
    "migrate": ["migrate", "{run}", "--to-version", "2"],
}


def test_cli_every_repair_command_requires_a_reason(cli: Cli) -> None:
    """Without --reason each command is a usage error; with a blank one it is one `error:` line; no writes."""
    cli.publish(SHIP_V1)
    cli.publish(SHIP_V2)
    run = cli.start()
    before = cli.dump()
    for name, args in COMMANDS.items():
        argv = [a.replace("{run}", run) for a in args]
        missing = cli.run(*argv, expect=2)
        assert "--reason" in missing.stderr, (name, missing.stderr)
        blank = cli.run(*argv, "--reason", "   ", expect=2)
        lines = blank.stderr.splitlines()
        assert len(lines) == 1, (name, blank.stderr)
        assert lines[0].startswith("error: "), (name, lines)
        assert "reason" in lines[0], (name, lines)
    assert cli.dump() == before


def test_cli_pause_resume_skip_and_edit_input_record_who_and_why(cli: Cli) -> None:
    """The happy paths print JSON; the events carry the reason and the operator ($USER)."""
    cli.publish(SHIP_V1)
    run = cli.start()
    paused = cli.json("pause", run, "--reason", "customer on the phone")
    assert paused == {"run_id": run, "status": "paused", "events": ["RunPaused"]}
    assert cli.show(run)["wait_kind"] == "paused"
    cli.error("pause", run, "--reason", "again", code=5, needle="already paused")
    cli.json("edit-input", run, "--input", '{"order": "o-9"}', "--reason", "wrong order number")
    resumed = cli.json("resume", run, "--reason", "call ended")
    assert resumed["events"] == ["RunResumed"]
    cli.error("resume", run, "--reason", "twice", code=5, needle="not paused")
    skipped = cli.json("skip", run, "hold", "--output", '{"waived": true}', "--reason", "customer waived")
    assert skipped["events"] == ["TimerCancelled", "StepSkipped", "ActivityScheduled"]
    cli.error("skip", run, "pack", "--reason", "hurry", code=5, needle="may not be skipped")
    events = {e["type"]: e for e in cli.events(run)}
    for kind, reason in [
        ("RunPaused", "customer on the phone"),
        ("InputEdited", "wrong order number"),
        ("RunResumed", "call ended"),
        ("StepSkipped", "customer waived"),
    ]:
        assert events[kind]["data"]["reason"] == reason
        assert events[kind]["data"]["actor"] == "anna"
    assert events["InputEdited"]["data"]["old"] == {"order": "o-1"}
    assert events["InputEdited"]["data"]["new"] == {"order": "o-9"}
    assert events["StepSkipped"]["data"]["output"] == {"waived": True}
    assert events["ActivityScheduled"]["data"]["input"] == {"order": "o-9"}, "pack uses the edited input"
    cli.verify()


def test_cli_resolve_settles_an_unknown_outcome_and_retry_is_audited(cli: Cli) -> None:
    """resolve --as succeeded --output completes the run; retry of a settled step is refused."""
    cli.publish(SHIP_V1)
    run = cli.start()
    _skip_hold(cli, run)
    cli.unknown_outcome(run)
    assert cli.show(run)["status"] == "needs_attention"
    cli.error("resolve", run, "pack", "--as", "succeeded", "--output", "{oops", "--reason", "x", code=2,
              needle="--output is not valid JSON")  # fmt: skip
    cli.error("resolve", run, "hold", "--as", "succeeded", "--reason", "x", code=5, needle="no unknown")
    maybe = cli.run("resolve", run, "pack", "--as", "maybe", "--reason", "x", expect=2)
    assert "maybe" in maybe.stderr
    out = cli.json(
        "resolve", run, "pack", "--as", "succeeded", "--output", '{"box": 7}', "--reason", "found it"
    )
    assert out["status"] == "completed"
    shown = cli.show(run)
    assert shown["output"] == {"box": 7}
    [resolved] = [e["data"] for e in cli.events(run) if e["type"] == "StepResolved"]
    assert (resolved["reason"], resolved["actor"], resolved["code"]) == (
        "found it",
        "anna",
        "outcome_unknown",
    )
    cli.error("retry", run, "pack", "--reason", "again", code=5, needle="already completed")
    cli.verify()


def test_cli_retry_runs_the_unknown_step_again_with_the_same_key(cli: Cli) -> None:
    """retry on an unknown at-most-once step schedules attempt 2 with the same idempotency key."""
    cli.publish(SHIP_V1)
    run = cli.start()
    _skip_hold(cli, run)
    cli.unknown_outcome(run)
    out = cli.json("retry", run, "pack", "--reason", "downstream says it never arrived")
    assert (out["step"], out["attempt"], out["status"]) == ("pack", 2, "running")
    scheduled = [e["data"] for e in cli.events(run) if e["type"] == "ActivityScheduled"]
    assert [s["attempt"] for s in scheduled] == [1, 2]
    assert scheduled[0]["idempotency_key"] == scheduled[1]["idempotency_key"]
    [retried] = [e["data"] for e in cli.events(run) if e["type"] == "StepRetried"]
    assert (retried["actor"], retried["new_key"]) == ("anna", False)
    cli.verify()


def test_cli_migrate_dry_run_explains_and_the_real_one_records_both_versions(cli: Cli) -> None:
    """--dry-run prints the plan and writes nothing; the real migrate appends WorkflowMigrated."""
    v1 = cli.publish(SHIP_V1)
    v2 = cli.publish(SHIP_V2)
    run = cli.start()
    before = cli.dump()
    plan = cli.json("migrate", run, "--to-version", "2", "--dry-run", "--reason", "add labels")
    assert plan["ok"] is True
    assert plan["dry_run"] is True
    assert plan["steps_added"] == ["label"]
    assert plan["carried"] == ["wait timer of hold"]
    assert plan["current_step"] == {"from": "hold", "to": "hold"}
    assert cli.dump() == before
    out = cli.json("migrate", run, "--to-version", "2", "--reason", "add labels")
    assert out["events"] == ["WorkflowMigrated"]
    [migrated] = [e["data"] for e in cli.events(run) if e["type"] == "WorkflowMigrated"]
    assert migrated["previous"] == {"name": "ship", "version": 1, "digest": v1["digest"]}
    assert migrated["definition"] == {"name": "ship", "version": 2, "digest": v2["digest"]}
    assert (migrated["reason"], migrated["actor"]) == ("add labels", "anna")
    assert cli.show(run)["definition"]["version"] == 2
    _skip_hold(cli, run)
    assert cli.show(run)["current_step"] == "label", "the run continues on v2"
    cli.error("migrate", run, "--to-version", "2", "--reason", "again", code=5, needle="already on version 2")
    cli.error("migrate", run, "--to-version", "7", "--reason", "x", code=3, needle="no version 7")
    cli.verify()


def test_cli_migrate_refuses_incompatible_moves_and_bulk_reports_per_run(cli: Cli) -> None:
    """An input failing v3's schema: dry run exits 5 with the problem, the real one is one error line."""
    cli.publish(SHIP_V1)
    cli.publish(SHIP_V2)
    cli.publish(SHIP_V3, "ship3.yaml")
    plain = cli.start("o-1")
    named = cli.start("o-2", customer="c-1")
    before = cli.dump()
    dry = cli.run("migrate", plain, "--to-version", "3", "--dry-run", "--reason", "x", expect=5)
    plan = json.loads(dry.stdout)
    assert plan["ok"] is False
    assert any("input_schema" in p for p in plan["problems"])
    cli.error("migrate", plain, "--to-version", "3", "--reason", "x", code=5, needle="input_schema")
    assert cli.dump() == before
    report = cli.json("migrate", "--definition", "ship", "--from-version", "1", "--to-version", "3",
                      "--where", "status=waiting", "--reason", "customers required")  # fmt: skip
    assert (report["runs"], report["migrated"]) == (2, 1)
    outcome = {r["run_id"]: (r["ok"], r["problems"]) for r in report["report"]}
    assert outcome[named] == (True, [])
    assert outcome[plain][0] is False
    assert "input_schema" in outcome[plain][1][0]
    assert cli.show(named)["definition"]["version"] == 3
    assert cli.show(plain)["definition"]["version"] == 1
    cli.verify()


BAD: dict[str, tuple[list[str], int, str]] = {
    "skip output not JSON": (["skip", "{run}", "hold", "--output", "nope"], 2, "--output is not valid JSON"),
    "skip not current": (["skip", "{run}", "pack"], 5, "not the current step (hold)"),
    "edit-input not JSON": (["edit-input", "{run}", "--input", "{"], 2, "--input is not valid JSON"),
    "edit-input schema": (["edit-input", "{run}", "--input", '{"order": 5}'], 5, "input_schema"),
    "edit-input missing file": (["edit-input", "{run}", "--input", "@nope.json"], 2, "cannot read"),
    "resolve healthy run": (["resolve", "{run}", "hold", "--as", "failed"], 5, "no unknown"),
    "pause unknown run": (["pause", "r-nope"], 3, "no run r-nope in tenant default"),
    "skip other tenant": (["--tenant", "globex", "skip", "{run}", "hold"], 3, "not found"),
    "migrate bad map": (["migrate", "{run}", "--to-version", "2", "--map", "hold"], 2, "OLD_STEP=NEW_STEP"),
    "migrate bad where": (
        ["migrate", "--definition", "ship", "--from-version", "1", "--to-version", "2", "--where", "x=y"],
        2,
        "status=STATUS",
    ),
    "migrate run and bulk": (
        ["migrate", "{run}", "--definition", "ship", "--to-version", "2"],
        2,
        "not both",
    ),
    "migrate map unknown step": (
        ["migrate", "{run}", "--to-version", "2", "--map", "nope=hold"],
        5,
        "the current version has no step nope",
    ),
}


@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Cli, str]:
    """One database with v1 and v2 of ship and a run waiting on its hold timer."""
    cli = Cli(tmp_path_factory.mktemp("bad"))
    cli.publish(SHIP_V1)
    cli.publish(SHIP_V2)
    return cli, cli.start()


@pytest.mark.parametrize("case", sorted(BAD))
def test_cli_bad_repair_input_is_one_error_line_and_writes_nothing(
    populated: tuple[Cli, str], case: str
) -> None:
    """Each bad repair command: one `error:` line naming the problem, a non-zero exit, no writes."""
    cli, run = populated
    args, code, needle = BAD[case]
    cli.error(*[a.replace("{run}", run) for a in args], "--reason", "testing", code=code, needle=needle)


# --- API ---------------------------------------------------------------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Api:
    """The app on a fresh database: tenants acme and globex, one user (and API key) per role."""

    def __init__(self, tmp: Path) -> None:
        self.clock = FakeClock()
        self.engine = Engine.open(f"sqlite:///{tmp / 'api.db'}", clock=self.clock)
        self.db = tmp / "api.db"
        p = self.engine.service.principals
        self.keys: dict[tuple[str, str], str] = {}
        for tenant in ("acme", "globex"):
            p.create_tenant(tenant)
            for role in ("admin", "operator", "viewer", "worker"):
                self.keys[tenant, role] = p.create_user(tenant, f"{role}-{tenant[0]}", [role], []).api_key
        self.principals = p
        self.app: FastAPI = create_app(self.engine.service)

    def auth(self, role: str, tenant: str = "acme") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant, role]}"}

    def start(self, input: Any = None, version: int = 1) -> str:
        return self.engine.start("ship", input=input or {"order": "o-1"}, tenant="acme", version=version)

    def types(self, run: str) -> list[str]:
        return [e["type"] for e in self.engine.events(run, tenant="acme")]

    def rows(self) -> dict[str, list[tuple[Any, ...]]]:
        with closing(sqlite3.connect(self.db)) as conn:
            return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in TABLES}


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[Api, httpx.AsyncClient]]:
    a = Api(tmp_path)
    a.engine.publish(SHIP_V1, tenant="acme")
    a.engine.publish(SHIP_V2, tenant="acme")
    a.engine.publish(SHIP_V1, tenant="globex")
    try:
        transport = httpx.ASGITransport(app=a.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield a, client
    finally:
        a.engine.close()


def _problem(r: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = r.json()
    assert body["status"] == status
    assert body["detail"]
    if code is not None:
        assert body["code"] == code, body
    return body


ENDPOINTS: dict[str, dict[str, Any]] = {
    "pause": {},
    "resume": {},
    "skip": {"step": "hold"},
    "edit-input": {"input": {"order": "o-2"}},
    "resolve": {"step": "pack", "as": "succeeded"},
    "migrate": {"to_version": 2, "dry_run": True},
}


@pytest.mark.anyio
@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
async def test_api_roles_tenants_and_a_missing_reason(
    api: tuple[Api, httpx.AsyncClient], endpoint: str
) -> None:
    """viewer and worker get 403, no key 401, another tenant's operator 404, no reason 422; no writes."""
    a, c = api
    run = a.start()
    url = f"/v1/runs/{run}/{endpoint}"
    body = {**ENDPOINTS[endpoint], "reason": "ticket 7"}
    before = a.rows()
    _problem(await c.post(url, json=body), 401)
    for role in ("viewer", "worker"):
        _problem(await c.post(url, json=body, headers=a.auth(role)), 403, "forbidden")
    _problem(await c.post(url, json=body, headers=a.auth("operator", "globex")), 404, "not_found")
    _problem(await c.post(f"/v1/runs/nope/{endpoint}", json=body, headers=a.auth("operator")), 404)
    no_reason = {k: v for k, v in body.items() if k != "reason"}
    _problem(await c.post(url, json=no_reason, headers=a.auth("operator")), 422, "invalid_request")
    _problem(await c.post(url, json={**body, "reason": ""}, headers=a.auth("operator")), 422)
    _problem(await c.post(url, json={**body, "extra": 1}, headers=a.auth("operator")), 422)
    assert a.rows() == before


@pytest.mark.anyio
async def test_api_repair_commands_and_refusals(api: tuple[Api, httpx.AsyncClient]) -> None:
    """Operators pause/resume/skip/edit; a refused command is 409 with the reason and writes nothing."""
    a, c = api
    run = a.start()
    op = a.auth("operator")

    async def post(endpoint: str, **body: Any) -> httpx.Response:
        return await c.post(f"/v1/runs/{run}/{endpoint}", json={"reason": "ticket 7", **body}, headers=op)

    async def refused(endpoint: str, status: int, code: str, needle: str, **body: Any) -> None:
        before = a.rows()
        problem = _problem(await post(endpoint, **body), status, code)
        assert needle in problem["detail"], problem
        assert a.rows() == before

    r = await post("pause")
    assert r.status_code == 200, r.text
    assert r.json() == {"run_id": run, "status": "paused", "events": ["RunPaused"]}
    await refused("pause", 409, "already_paused", "already paused")
    await refused("edit-input", 409, "invalid_input", "input_schema", input={"order": 1})
    await refused("skip", 409, "not_current", "not the current step", step="pack")
    await refused("resolve", 409, "not_resolvable", "no unknown", step="hold", **{"as": "failed"})
    _problem(await post("resolve", step="hold", **{"as": "maybe"}), 422, "invalid_request")
    await refused("migrate", 404, "not_found", "no version 5", to_version=5)
    await refused("migrate", 409, "same_version", "already on version 1", to_version=1)
    await refused("migrate", 409, "incompatible", "no step nope", to_version=2, map={"nope": "hold"})
    assert (await post("edit-input", input={"order": "o-5"})).status_code == 200
    assert (await post("resume")).json()["events"] == ["RunResumed"]
    r = await post("skip", step="hold", output={"waived": True})
    assert r.json()["events"] == ["TimerCancelled", "StepSkipped", "ActivityScheduled"]
    await refused("skip", 409, "not_skippable", "may not be skipped", step="pack")
    events = a.engine.events(run, tenant="acme")
    actors = {e["type"]: e["data"].get("actor") for e in events}
    assert actors["RunPaused"] == actors["InputEdited"] == actors["StepSkipped"] == "operator-a"
    assert [e["data"]["input"] for e in events if e["type"] == "ActivityScheduled"] == [{"order": "o-5"}]
    assert all(r["ok"] for r in a.engine.verify())


@pytest.mark.anyio
async def test_api_migrate_dry_run_then_real(api: tuple[Api, httpx.AsyncClient]) -> None:
    """POST migrate with dry_run explains and writes nothing; without it WorkflowMigrated is appended."""
    a, c = api
    run = a.start()
    url = f"/v1/runs/{run}/migrate"
    before = a.rows()
    r = await c.post(
        url, json={"to_version": 2, "dry_run": True, "reason": "labels"}, headers=a.auth("admin")
    )
    assert r.status_code == 200, r.text
    plan = r.json()
    assert (plan["ok"], plan["dry_run"], plan["steps_added"]) == (True, True, ["label"])
    assert a.rows() == before
    r = await c.post(url, json={"to_version": 2, "reason": "labels"}, headers=a.auth("operator"))
    assert r.status_code == 200, r.text
    assert r.json()["events"] == ["WorkflowMigrated"]
    assert a.types(run)[-1] == "WorkflowMigrated"
    assert a.engine.show(run, tenant="acme")["definition"]["version"] == 2
    assert all(r["ok"] for r in a.engine.verify())


@pytest.mark.anyio
async def test_api_skip_policy_roles_come_from_the_caller(api: tuple[Api, httpx.AsyncClient]) -> None:
    """A step whose skip_policy names admin: the operator is refused (409 forbidden), the admin may."""
    a, c = api
    a.engine.publish(SHIP_V1.replace("skippable: true", "skip_policy: {roles: [admin]}"), tenant="acme")
    run = a.start(version=3)
    body = {"step": "hold", "reason": "waive"}
    before = a.rows()
    problem = _problem(await c.post(f"/v1/runs/{run}/skip", json=body, headers=a.auth("operator")), 409)
    assert problem["code"] == "forbidden"
    assert "only admin may skip step hold" in problem["detail"]
    assert a.rows() == before
    r = await c.post(f"/v1/runs/{run}/skip", json=body, headers=a.auth("admin"))
    assert r.status_code == 200, r.text
    assert "StepSkipped" in r.json()["events"]


# --- the run page's operator form --------------------------------------------------------------------


async def _ui_session(a: Api, c: httpx.AsyncClient, run: str) -> str:
    """Log in as the acme operator with an API key; return the CSRF token of the run page."""
    form = await c.get("/ui/login")
    login_csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert login_csrf is not None
    r = await c.post(
        "/ui/login",
        data={"csrf": login_csrf.group(1), "api_key": a.keys["acme", "operator"], "next": f"/ui/runs/{run}"},
    )
    assert r.status_code == 303, r.text
    page = await c.get(f"/ui/runs/{run}")
    assert page.status_code == 200, page.text
    assert "Operator actions" in page.text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    return csrf.group(1)


@pytest.mark.anyio
async def test_ui_operator_form_pauses_with_a_reason(api: tuple[Api, httpx.AsyncClient]) -> None:
    """The run page's Pause button records RunPaused with the signed-in operator and the reason."""
    a, c = api
    run = a.start()
    csrf = await _ui_session(a, c, run)
    r = await c.post(f"/ui/runs/{run}/action", data={"csrf": csrf, "action": "pause", "reason": ""})
    assert r.status_code == 303
    assert "Not done" in unquote(r.cookies.get("lockstep_flash", ""))
    assert "RunPaused" not in a.types(run)
    r = await c.post(f"/ui/runs/{run}/action", data={"csrf": csrf, "action": "pause", "reason": "audit"})
    assert r.status_code == 303
    [paused] = [e["data"] for e in a.engine.events(run, tenant="acme") if e["type"] == "RunPaused"]
    assert (paused["reason"], paused["actor"]) == ("audit", "operator-a")


@pytest.mark.anyio
@pytest.mark.anyio
async def test_ui_migrate_without_a_reason_is_refused(api: tuple[Api, httpx.AsyncClient]) -> None:
    """The run page's Migrate button with an empty reason migrates nothing."""
    a, c = api
    run = a.start()
    csrf = await _ui_session(a, c, run)
    data = {"csrf": csrf, "action": "migrate", "reason": "", "version": "2"}
    r = await c.post(f"/ui/runs/{run}/action", data=data)
    assert r.status_code == 303
    assert "WorkflowMigrated" not in a.types(run), a.engine.events(run, tenant="acme")[-1]


GUARDED = SHIP_V1.replace("name: ship\n", "name: ship\nfour_eyes: [skip, resolve, migrate]\n")
APPROVED = """\
name: po
input_schema: {type: object, required: [amount]}
steps:
  - id: approve
    approval:
      approvers: {users: [alice, bob]}
      quorum: 2
      timeout: 1d
      details: "Pay ${input.amount} EUR"
  - id: pay
    activity: payments.charge
    input: {amount: "${input.amount}"}
    timeout: 10s
"""


def test_cli_four_eyes_skip_needs_a_second_operator(cli: Cli) -> None:
    """`lockstep skip` on a four_eyes definition proposes; `lockstep show` says a proposal awaits a
    second operator; anna's own `lockstep confirm` is refused (exit 5); bert's runs the skip."""
    cli.publish(GUARDED)
    run = cli.start()
    proposed = cli.json("skip", run, "hold", "--reason", "customer called")
    assert proposed["events"] == ["RepairProposed"]
    pid = proposed["proposal"]["proposal_id"]
    shown = cli.run("show", run).stdout
    assert (
        f"proposal {pid} (skip of step hold by anna: customer called) awaits a second operator"
        in " ".join(shown.split())
    )
    cli.error("confirm", run, pid, "--reason", "me again", code=5, needle="second, different operator")
    cli.env["USER"] = "bert"
    done = cli.json("confirm", run, pid, "--reason", "checked the call log")
    assert done["events"][:3] == ["RepairConfirmed", "TimerCancelled", "StepSkipped"]
    cli.error("reject-proposal", run, pid, "--reason", "late", code=5, needle="is not open")
    cli.verify()


def test_cli_operator_cannot_get_around_a_pending_approval(cli: Cli) -> None:
    """On a run waiting for approval: migrate mapping the approval onto pay, skip, and edit-input are
    each one error line (exit 5) that writes nothing."""
    path = cli.tmp / "po.yaml"
    path.write_text(APPROVED)
    cli.json("publish", str(path))
    run = str(cli.json("start", "po", "--input", '{"amount": 10}')["run_id"])
    path.write_text(APPROVED.replace("timeout: 10s", "timeout: 20s"))
    cli.json("publish", str(path))
    cli.error(
        "migrate",
        run,
        "--to-version",
        "2",
        "--map",
        "approve=pay",
        "--reason",
        "hurry",
        code=5,
        needle="would move it onto another step",
    )
    cli.error("skip", run, "approve", "--reason", "hurry", code=5, needle="never by a skip")
    cli.error(
        "edit-input",
        run,
        "--input",
        '{"amount": 999999}',
        "--reason",
        "typo",
        code=5,
        needle="cannot change under them",
    )
    assert cli.show(run)["wait_kind"] == "approval"
