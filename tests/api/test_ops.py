"""/metrics (Prometheus), /openapi.json (every endpoint and its errors) and database outages (503)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from lockstep.api.app import create_app
from lockstep.engine import Engine
from lockstep.store import StoreUnavailable

from .conftest import ORDER, PROBLEM, Api, Db, assert_problem, order_input

pytestmark = pytest.mark.anyio


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


# --- metrics ---------------------------------------------------------------------------------------
# Who may scrape what is pinned in test_metrics_access.py; these tests read everything with the token.

METRICS_TOKEN = "s3cret-token"  # noqa: S105 - a test value
EVERYTHING = {"Authorization": f"Bearer {METRICS_TOKEN}"}


@pytest.fixture
def app(engine: Engine) -> FastAPI:
    return create_app(engine.service, metrics_token=METRICS_TOKEN)


async def test_metrics_count_runs_by_tenant_and_status(api: Api, other: Api):
    """/metrics is Prometheus text with lockstep_runs{tenant,status} and the ready-task queue depth."""
    assert (await api.publish()).status_code == 201
    assert (await other.publish()).status_code == 201
    first = await api.start_ok(input=order_input(1))
    await api.start_ok(input=order_input(2))
    await other.start_ok()
    r = await api.c.post(f"/v1/runs/{first}/cancel", json={"reason": "x"}, headers=api.t.auth("operator"))
    assert r.status_code == 200
    m = await api.c.get("/metrics", headers=EVERYTHING)
    assert m.status_code == 200
    assert m.headers["content-type"].startswith("text/plain")
    runs = samples(m.text, "lockstep_runs")
    assert runs == {
        (("status", "cancelled"), ("tenant", "acme")): 1.0,
        (("status", "running"), ("tenant", "acme")): 1.0,
        (("status", "running"), ("tenant", "globex")): 1.0,
    }
    ready = samples(m.text, "lockstep_tasks_ready")
    assert ready[(("activity", "inventory.reserve"), ("tenant", "acme"))] == 1.0
    assert ready[(("activity", "inventory.reserve"), ("tenant", "globex"))] == 1.0


async def test_metrics_count_attempts_and_ignored_results(api: Api):
    """Attempts started over the API and an ignored duplicate result show up in the counters."""
    assert (await api.publish()).status_code == 201
    await api.start_ok()
    (task,) = await api.poll("inventory.reserve")
    assert (await api.report(task, "complete")).status_code == 200
    assert (await api.report(task, "complete")).status_code == 409
    text = (await api.c.get("/metrics", headers=EVERYTHING)).text
    attempts = samples(text, "lockstep_activity_attempts_total")
    assert attempts[(("activity", "inventory.reserve"), ("tenant", "acme"))] == 1.0
    assert samples(text, "lockstep_results_ignored_total")[(("tenant", "acme"),)] == 1.0


@pytest.fixture
async def guarded(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(engine.service, metrics_token=METRICS_TOKEN, ui=False)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        yield c


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", "s3cret-token", "Bearer s3cret-tokenX"])
async def test_metrics_token_is_required_when_set(guarded: httpx.AsyncClient, authorization: Any):
    """With metrics_token set, /metrics without it (or with a wrong or malformed one) is a 401 problem."""
    headers = {} if authorization is None else {"Authorization": authorization}
    assert_problem(await guarded.get("/metrics", headers=headers), 401, "unauthenticated")


async def test_metrics_token_grants_access(guarded: httpx.AsyncClient):
    """With the right metrics token /metrics answers with Prometheus text."""
    r = await guarded.get("/metrics", headers={"Authorization": "Bearer s3cret-token"})
    assert r.status_code == 200
    assert "lockstep_runs" in r.text


# --- OpenAPI ---------------------------------------------------------------------------------------

V1 = {
    ("get", "/v1/definitions"): set(),
    ("post", "/v1/definitions"): set(),
    ("get", "/v1/definitions/{name}/versions/{version}"): {404},
    ("post", "/v1/runs"): {404, 429},
    ("get", "/v1/runs"): set(),
    ("get", "/v1/runs/{run_id}"): {404},
    ("get", "/v1/runs/{run_id}/events"): {404},
    ("post", "/v1/runs/{run_id}/cancel"): {404, 409},
    ("post", "/v1/runs/{run_id}/retry"): {404, 409},
    ("get", "/v1/dead-letters"): set(),
    ("post", "/v1/tasks/poll"): set(),
    ("post", "/v1/tasks/{task_id}/heartbeat"): {404, 409},
    ("post", "/v1/tasks/{task_id}/complete"): {404, 409},
    ("post", "/v1/tasks/{task_id}/fail"): {404, 409},
}


@pytest.fixture
async def openapi(client: httpx.AsyncClient) -> dict[str, Any]:
    r = await client.get("/openapi.json")
    assert r.status_code == 200
    doc: dict[str, Any] = r.json()
    return doc


async def test_openapi_lists_every_v1_operation(openapi: dict[str, Any]):
    """/openapi.json lists every /v1 operation of this API, each with a summary, behind the Bearer scheme."""
    ops = {(m, p) for p, item in openapi["paths"].items() if p.startswith("/v1") for m in item}
    assert set(V1) <= ops
    assert all(not p.startswith(("/ui", "/metrics")) for p in openapi["paths"])
    schemes = openapi["components"]["securitySchemes"]
    bearer = [n for n, s in schemes.items() if s.get("scheme") == "bearer"]
    assert bearer
    # A callback URL is its own credential (a 256-bit token, and a signature where the wait asks for
    # one): the partner that posts it holds no API key (docs/security.md, External events).
    by_token = {("post", "/v1/callbacks/{token}")}
    for method, path in ops:
        op = openapi["paths"][path][method]
        assert op.get("summary"), (method, path)
        if (method, path) in by_token:
            assert not op.get("security"), (method, path)
            continue
        assert any(bearer[0] in req for req in op.get("security", [])), (method, path)


@pytest.mark.parametrize(("method", "path"), list(V1), ids=[f"{m} {p}" for m, p in V1])
async def test_openapi_documents_each_operations_errors(openapi: dict[str, Any], method: str, path: str):
    """Each operation documents 401/403/422/503 and its own 404/409/429 as Problem documents."""
    responses = openapi["paths"][path][method]["responses"]
    documented = {int(code) for code in responses if code[0] in "45"}
    assert {401, 403, 422, 503} | V1[(method, path)] <= documented
    for code in documented:
        resp = responses[str(code)]
        assert resp["description"]
        assert PROBLEM in resp["content"], (code, resp)
        refs = [c.get("schema", {}).get("$ref", "") for c in resp["content"].values()]
        assert any(r.endswith("/Problem") for r in refs), (code, resp)


async def test_openapi_problem_schema_is_under_the_served_media_type(openapi: dict[str, Any]):
    """Error responses document the Problem schema under application/problem+json, the type actually sent,
    and the schema they refer to is in the document."""
    problem = openapi["components"]["schemas"]["Problem"]
    assert {"type", "title", "status", "detail", "code"} <= set(problem["properties"])
    for path, item in openapi["paths"].items():
        for method, op in item.items():
            for code, resp in op["responses"].items():
                if code[0] not in "45":
                    continue
                content = resp["content"]
                assert content[PROBLEM].get("schema", {}).get("$ref", "").endswith("/Problem"), (method, path)
                assert "application/json" not in content, (method, path, code)


async def test_openapi_publish_accepts_yaml_and_json(openapi: dict[str, Any]):
    """POST /v1/definitions documents both application/yaml and application/json request bodies."""
    body = openapi["paths"]["/v1/definitions"]["post"]["requestBody"]
    assert body["required"] is True
    assert {"application/yaml", "application/json"} <= set(body["content"])


# --- database outage -------------------------------------------------------------------------------


def _down(*_: Any, **__: Any) -> Any:
    raise StoreUnavailable("database is busy or unavailable: simulated outage")


@pytest.fixture
async def started(api: Api) -> str:
    assert (await api.publish()).status_code == 201
    return await api.start_ok()


async def test_database_down_is_503_with_retry_after(
    api: Api, started: str, engine: Engine, monkeypatch: pytest.MonkeyPatch
):
    """With the store down every request is a 503 problem with Retry-After (not 401/500), then recovers."""
    monkeypatch.setattr(engine.service.store, "read", _down)
    monkeypatch.setattr(engine.service.store, "write", _down)
    h = api.t.auth("admin")
    for method, path, body in (
        ("GET", "/v1/runs", None),
        ("GET", f"/v1/runs/{started}", None),
        ("GET", f"/v1/runs/{started}/events", None),
        ("GET", "/v1/definitions", None),
        ("POST", "/v1/runs", {"definition": ORDER, "input": order_input(2)}),
        ("POST", f"/v1/runs/{started}/cancel", {"reason": "x"}),
    ):
        r = await api.c.request(method, path, json=body, headers=h)
        assert_problem(r, 503, "unavailable")
        assert int(r.headers["retry-after"]) >= 1
    r = await api.c.post(
        "/v1/tasks/poll",
        json={"activities": ["inventory.reserve"], "wait_seconds": 0},
        headers=api.t.auth("worker"),
    )
    assert_problem(r, 503, "unavailable")
    assert (await api.c.get("/healthz")).status_code == 503
    monkeypatch.undo()
    assert (await api.run(started))["status"] == "running"
    assert (await api.c.get("/healthz")).status_code == 200


async def test_writes_down_reads_up(
    api: Api, started: str, engine: Engine, db: Db, monkeypatch: pytest.MonkeyPatch
):
    """With only writes failing, reads answer 200 while every write is a 503 that writes nothing."""
    (task,) = await api.poll("inventory.reserve")
    totals = db.totals()
    monkeypatch.setattr(engine.service.store, "write", _down)
    assert (await api.run(started))["status"] == "running"
    assert (await api.list_runs()).status_code == 200
    assert_problem(await api.start(ORDER, order_input(2)), 503, "unavailable")
    r = await api.c.post(f"/v1/runs/{started}/cancel", json={"reason": "x"}, headers=api.t.auth("operator"))
    assert_problem(r, 503)
    assert_problem(await api.report(task, "complete"), 503)
    assert_problem(await api.report(task, "heartbeat"), 503)
    assert_problem(await api.publish({"name": "x", "steps": [{"id": "s", "wait": "1s"}]}), 503)
    assert db.totals() == totals
    monkeypatch.undo()
    assert (await api.report(task, "complete")).status_code == 200
