"""Authentication and roles: who may call what, and how refusals look (RFC 9457 problem documents)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from lockstep.app.principals import Principals

from .conftest import Api, Db, Tenant, assert_problem, order_input

pytestmark = pytest.mark.anyio

RUN = "0123456789abcdef0123456789abcdef"
TASK = f"{RUN}/reserve/a1"
REPORT = {"attempt": 1, "fencing_token": 1}
# Every /v1 operation with a body that passes validation, so only authentication can refuse it.
OPERATIONS: list[tuple[str, str, Any]] = [
    ("GET", "/v1/definitions", None),
    ("POST", "/v1/definitions", {"name": "x", "steps": [{"id": "s", "wait": "1s"}]}),
    ("GET", "/v1/definitions/x/versions/1", None),
    ("POST", "/v1/runs", {"definition": "x"}),
    ("GET", "/v1/runs", None),
    ("GET", f"/v1/runs/{RUN}", None),
    ("GET", f"/v1/runs/{RUN}/events", None),
    ("POST", f"/v1/runs/{RUN}/cancel", {"reason": "r"}),
    ("POST", "/v1/tasks/poll", {"activities": ["a"], "wait_seconds": 0}),
    ("POST", f"/v1/tasks/{TASK}/heartbeat", {"fencing_token": 1}),
    ("POST", f"/v1/tasks/{TASK}/complete", REPORT),
    ("POST", f"/v1/tasks/{TASK}/fail", {**REPORT, "error": {"code": "E"}}),
]
IDS = [f"{m} {p}" for m, p, _ in OPERATIONS]


async def call(
    client: httpx.AsyncClient, op: tuple[str, str, Any], headers: dict[str, str]
) -> httpx.Response:
    method, path, body = op
    return await client.request(method, path, json=body, headers=headers)


@pytest.mark.parametrize("op", OPERATIONS, ids=IDS)
async def test_missing_key_is_401_with_www_authenticate(client: httpx.AsyncClient, acme: Tenant, op: Any):
    """Every /v1 operation without an Authorization header is a 401 problem with a Bearer challenge."""
    r = await call(client, op, {})
    assert_problem(r, 401, "unauthenticated")
    assert r.headers["www-authenticate"].lower().startswith("bearer")


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer lsk_not-a-real-key",
        "Bearer not-even-the-prefix",
        "Bearer ",
        "Basic dXNlcjpwYXNz",
        "lsk_without_scheme",
        "Bearer lsk_" + "x" * 300,
    ],
)
async def test_bad_key_is_401(client: httpx.AsyncClient, acme: Tenant, authorization: str):
    """A wrong, malformed, oversized or non-Bearer credential is a 401 problem, never a 403 or 500."""
    r = await client.get("/v1/runs", headers={"Authorization": authorization})
    body = assert_problem(r, 401, "unauthenticated")
    assert "www-authenticate" in r.headers
    assert "lsk_" not in body["detail"]  # the presented key is not echoed back


async def test_disabled_user_is_401_on_the_next_request(api: Api, acme: Tenant, principals: Principals):
    """Disabling a user takes effect on their very next request: their key becomes a 401."""
    r = await api.list_runs()
    assert r.status_code == 200
    principals.disable_user("acme", "viewer")
    assert_problem(await api.list_runs(), 401, "unauthenticated")
    principals.enable_user("acme", "viewer")
    assert (await api.list_runs()).status_code == 200


async def test_rotated_key_replaces_the_old_one(api: Api, acme: Tenant, principals: Principals):
    """After a key rotation the old key is a 401 and the new key works."""
    new = principals.rotate_key("acme", "viewer").api_key
    assert_problem(await api.list_runs(), 401)
    r = await api.c.get("/v1/runs", headers={"Authorization": f"Bearer {new}"})
    assert r.status_code == 200


FORBIDDEN = [
    ("viewer", ("POST", "/v1/runs", {"definition": "order-fulfilment", "input": order_input()})),
    ("viewer", ("POST", f"/v1/runs/{RUN}/cancel", {"reason": "r"})),
    ("viewer", ("POST", "/v1/definitions", {"name": "x", "steps": [{"id": "s", "wait": "1s"}]})),
    ("viewer", ("POST", "/v1/tasks/poll", {"activities": ["a"], "wait_seconds": 0})),
    ("operator", ("POST", "/v1/definitions", {"name": "x", "steps": [{"id": "s", "wait": "1s"}]})),
    ("operator", ("POST", "/v1/tasks/poll", {"activities": ["a"], "wait_seconds": 0})),
    ("admin", ("POST", f"/v1/tasks/{TASK}/complete", REPORT)),
    ("worker", ("GET", "/v1/runs", None)),
    ("worker", ("GET", f"/v1/runs/{RUN}", None)),
    ("worker", ("GET", f"/v1/runs/{RUN}/events", None)),
    ("worker", ("GET", "/v1/definitions", None)),
    ("worker", ("GET", "/v1/definitions/x/versions/1", None)),
    ("worker", ("POST", "/v1/runs", {"definition": "order-fulfilment"})),
    ("worker", ("POST", f"/v1/runs/{RUN}/cancel", {"reason": "r"})),
    ("approver", ("GET", "/v1/runs", None)),
    ("approver", ("GET", f"/v1/runs/{RUN}", None)),
    ("approver", ("GET", f"/v1/runs/{RUN}/events", None)),
    ("approver", ("POST", "/v1/runs", {"definition": "order-fulfilment"})),
    ("approver", ("POST", f"/v1/runs/{RUN}/cancel", {"reason": "r"})),
    ("approver", ("POST", "/v1/tasks/poll", {"activities": ["a"], "wait_seconds": 0})),
    ("approver", ("POST", f"/v1/tasks/{TASK}/heartbeat", {"fencing_token": 1})),
]


@pytest.mark.parametrize(("role", "op"), FORBIDDEN, ids=[f"{r}-{o[0]} {o[1]}" for r, o in FORBIDDEN])
async def test_role_not_allowed_is_403(client: httpx.AsyncClient, acme: Tenant, db: Db, role: str, op: Any):
    """A valid key whose role lacks the permission: 403 problem naming the role; nothing is written."""
    before = db.totals()
    r = await call(client, op, acme.auth(role))
    body = assert_problem(r, 403, "forbidden")
    assert role in body["detail"]
    assert db.totals() == before


async def test_allowed_roles_reach_the_operation(api: Api):
    """admin publishes, operator starts and cancels, viewer reads, worker polls: all pass the role check."""
    assert (await api.publish(role="admin")).status_code == 201
    run_id = await api.start_ok(role="operator")
    run_id2 = await api.start_ok(role="admin", input=order_input(2))
    assert (await api.run(run_id, role="viewer"))["status"] == "running"
    assert (await api.run(run_id, role="operator"))["run_id"] == run_id
    r = await api.c.post(f"/v1/runs/{run_id}/cancel", json={"reason": "x"}, headers=api.t.auth("operator"))
    assert r.status_code == 200, r.text
    r = await api.c.post(f"/v1/runs/{run_id2}/cancel", json={"reason": "x"}, headers=api.t.auth("admin"))
    assert r.status_code == 200, r.text
    assert await api.poll("inventory.reserve") == []


async def test_user_with_several_roles_gets_the_union(api: Api, principals: Principals):
    """A user holding viewer and worker may both read runs and poll tasks."""
    key = principals.create_user("acme", "both", ["viewer", "worker"], ["ops"]).api_key
    h = {"Authorization": f"Bearer {key}"}
    assert (await api.c.get("/v1/runs", headers=h)).status_code == 200
    r = await api.c.post("/v1/tasks/poll", json={"activities": ["a"], "wait_seconds": 0}, headers=h)
    assert r.status_code == 200
    assert_problem(await api.c.post("/v1/runs", json={"definition": "x"}, headers=h), 403)


async def test_unknown_route_and_method_are_problems(client: httpx.AsyncClient, acme: Tenant):
    """An unknown path is a 404 problem and a wrong method a 405 problem, not HTML or a bare JSON detail."""
    assert_problem(await client.get("/v1/nothing-here", headers=acme.auth("admin")), 404, "not_found")
    assert_problem(await client.delete("/v1/runs", headers=acme.auth("admin")), 405, "method_not_allowed")


async def test_malformed_json_body_is_a_422_problem(client: httpx.AsyncClient, acme: Tenant):
    """A body that is not JSON, or misses required fields, is a 422 problem naming the field."""
    h = {**acme.auth("operator"), "content-type": "application/json"}
    body = assert_problem(await client.post("/v1/runs", content=b"{not json", headers=h), 422)
    assert body["code"] == "invalid_request"
    body = assert_problem(await client.post("/v1/runs", json={}, headers=acme.auth("operator")), 422)
    assert "definition" in body["detail"]
    body = assert_problem(
        await client.post("/v1/runs", json={"definition": "x", "bogus": 1}, headers=acme.auth("operator")),
        422,
    )
    assert "bogus" in body["detail"]
