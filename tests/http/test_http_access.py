"""Who may touch secrets and egress policies, over the API and the CLI (both backends): only a tenant
admin sets, lists and deletes; no route or command returns a value, to anyone; viewers and operators
are refused; a remote worker over HTTP can neither poll for nor report an http step's task."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from httpworld import OTHER, TENANT, Api, World, definition

from lab import clifork

VALUE = "sk_test_do_not_show_1234567890"


def _client(world: World) -> Api:
    return world.api()


def _as(world: World, user: str, tenant: str = TENANT) -> dict[str, str]:
    return {"Authorization": f"Bearer {world.api_keys[(tenant, user)]}"}


def test_only_an_admin_sets_and_lists_secrets_and_no_route_returns_a_value(world: World) -> None:
    """Admin: PUT then GET shows names and versions only; viewer and operator get 403 on every route."""
    c = _client(world)
    put = c.put("/v1/secrets/pay-key", json={"value": VALUE}, headers=_as(world, "admin"))
    assert put.status_code == 200, put.text
    assert put.json()["latest"] == 1
    listed = c.get("/v1/secrets", headers=_as(world, "admin"))
    assert listed.status_code == 200
    assert [s["name"] for s in listed.json()] == ["pay-key"]
    assert VALUE not in listed.text
    assert c.get("/v1/secrets/pay-key", headers=_as(world, "admin")).status_code in (404, 405)
    for user in ("viewer", "op"):
        for method, path, body in (
            ("GET", "/v1/secrets", None),
            ("PUT", "/v1/secrets/pay-key", {"value": "mine now"}),
            ("DELETE", "/v1/secrets/pay-key", None),
            ("GET", "/v1/egress", None),
            ("PUT", "/v1/egress", {"allow": ["https://evil.example/"]}),
        ):
            r = c.request(method, path, json=body, headers=_as(world, user))
            assert r.status_code == 403, (user, method, path, r.text)
            assert VALUE not in r.text
    # Other tenant's admin sees its own (empty) list, never acme's secret.
    assert c.get("/v1/secrets", headers=_as(world, "admin", OTHER)).json() == []
    (listed_again,) = world.service.secrets.list(TENANT)
    assert listed_again.latest == 1  # the refused PUTs changed nothing


def test_an_admin_replaces_the_egress_policy_over_the_api_and_a_bad_entry_is_named(world: World) -> None:
    """An admin replaces the policy; a bad entry is a 422 that names it and changes nothing."""
    c = _client(world)
    ok = c.put("/v1/egress", json={"allow": ["https://api.example.com/v1/"]}, headers=_as(world, "admin"))
    assert ok.status_code == 200, ok.text
    assert ok.json()["allow"] == ["https://api.example.com/v1/"]
    bad = c.put("/v1/egress", json={"allow": ["ftp://x/"]}, headers=_as(world, "admin"))
    assert bad.status_code == 422
    assert "ftp://x/" in bad.text
    assert c.get("/v1/egress", headers=_as(world, "admin")).json()["allow"] == ["https://api.example.com/v1/"]
    assert [r["outcome"] for r in world.audit("egress.set")] == ["ok"]


def _cli(world: World, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOCKSTEP_KEY_FILE": str(world.key_file)}
    return clifork.run(
        [sys.executable, "-m", "lockstep", "--db", world.url, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_the_cli_reads_a_value_from_stdin_and_never_prints_one(world: World) -> None:
    """`secrets set` from stdin, `list` without values, no `show`/`get`; `tenants egress set|show`."""
    done = _cli(world, "secrets", "set", "--tenant", TENANT, "pay-key", stdin=VALUE + "\n")
    assert done.returncode == 0, done.stderr
    assert VALUE not in done.stdout + done.stderr
    listed = _cli(world, "secrets", "list", "--tenant", TENANT)
    assert listed.returncode == 0
    assert json.loads(listed.stdout)[0]["name"] == "pay-key"
    assert VALUE not in listed.stdout
    for verb in ("show", "get"):
        assert _cli(world, "secrets", verb, "pay-key").returncode != 0
    egress = _cli(world, "tenants", "egress", "set", TENANT, "--allow", world.server.url("/"), "--allow-http")
    assert egress.returncode == 0, egress.stderr
    shown = json.loads(_cli(world, "tenants", "egress", "show", TENANT).stdout)
    assert shown["allow_http"] is True
    refused = _cli(world, "tenants", "egress", "set", TENANT, "--allow-loopback")
    assert refused.returncode != 0
    assert "egress_allow_loopback=1" in refused.stderr
    assert "Traceback" not in refused.stderr
    deleted = _cli(world, "secrets", "delete", "--tenant", TENANT, "pay-key")
    assert json.loads(deleted.stdout)["key_destroyed"] is True
    assert world.service.secrets.list(TENANT) == []


def test_a_remote_worker_can_neither_poll_nor_report_an_http_task(world: World) -> None:
    """POST /v1/tasks/poll for lockstep.http is 403; so are heartbeat, complete and fail of its task."""
    assert world.worker is not None
    world.worker.stop()  # nothing runs the task: it stays queued
    world.worker = None
    world.allow_loopback()
    world.engine.publish(definition("queued", {"url": world.server.url("/ok")}), tenant=TENANT)
    run_id = world.engine.start("queued", input={}, tenant=TENANT, actor="admin")
    task_id = f"{run_id}/call/a1-2"
    made = world.service.principals.create_user(TENANT, "remote", ["worker"], [])
    auth = {"Authorization": f"Bearer {made.api_key}"}
    c = _client(world)
    poll = c.post("/v1/tasks/poll", json={"activities": ["lockstep.http"], "wait_seconds": 0}, headers=auth)
    assert poll.status_code == 403, poll.text
    assert "lockstep's own workers" in poll.text
    forged: dict[str, Any] = {"attempt": 1, "fencing_token": 3, "output": {"status": 200}}
    for verb, body in (
        ("heartbeat", {"fencing_token": 3}),
        ("complete", forged),
        ("fail", {"attempt": 1, "fencing_token": 3, "error": {"code": "X", "message": "x"}}),
    ):
        r = c.post(f"/v1/tasks/{task_id}/{verb}", json=body, headers=auth)
        assert r.status_code == 403, (verb, r.text)
    assert world.engine.show(run_id, tenant=TENANT)["status"] == "running"
    assert world.server.seen == []
