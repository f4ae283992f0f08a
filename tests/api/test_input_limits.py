"""Attacks on the API's inputs (issue 14, finding 3): huge and deep bodies, long lists, huge outputs, and
values stored before the limits existed. Each is refused with a problem document naming the limit, and
nothing it could store makes a listing or a view answer 500."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from lockstep.app.principals import Principals
from lockstep.app.service import new_run_id
from lockstep.core.commands import ReportSuccess, StartRun
from lockstep.engine import Engine

from .conftest import NAP, ORDER, Api, Db, Tenant, assert_problem, order_input

pytestmark = pytest.mark.anyio

MB = 1024 * 1024


def nested(depth: int, leaf: Any = 1) -> Any:
    """`leaf` inside `depth` arrays."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


@pytest.fixture
async def published(api: Api) -> None:
    assert (await api.publish()).status_code == 201
    assert (await api.publish(NAP)).status_code == 201


# --- the request body: size (413) and depth (422) before anything parses it ----------------------


@pytest.fixture
def server(app: FastAPI) -> Iterator[tuple[str, int]]:
    """The app behind a real uvicorn server on a free port (the size limit is about what a socket sends)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield "127.0.0.1", port
    finally:
        srv.should_exit = True
        thread.join(10)
        sock.close()


def _answer(conn: socket.socket, deadline: float) -> bytes:
    """Whatever the server sends until it has sent a whole response head and some body."""
    got = b""
    while b"\r\n\r\n" not in got or got.endswith(b"\r\n\r\n"):
        conn.settimeout(max(0.1, deadline - time.monotonic()))
        chunk = conn.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def _post_head(host: str, port: int, key: str, framing: str) -> bytes:
    return (
        f"POST /v1/runs HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\n{framing}\r\n"
    ).encode()


def test_50mb_body_is_413_before_it_is_sent_and_writes_nothing(
    server: tuple[str, int], acme: Tenant, engine: Engine, db: Db
) -> None:
    """A 50 MB POST /v1/runs (by Content-Length): 413 after 1 MB was sent, quickly, nothing written."""
    engine.service.publish("acme", NAP)
    before = db.totals()
    host, port = server
    started = time.monotonic()
    with socket.create_connection((host, port), timeout=10) as conn:
        conn.sendall(_post_head(host, port, acme.keys["operator"], f"Content-Length: {50 * MB}\r\n"))
        conn.sendall(b'{"definition": "nap", "input": {"blob": "' + b"x" * MB)  # 1 MB of the 50
        answer = _answer(conn, started + 10)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert b"application/problem+json" in answer, answer
    assert b"max_request_bytes" in answer
    assert time.monotonic() - started < 5
    assert db.totals() == before


def test_chunked_body_without_length_is_413_once_over_the_limit(
    server: tuple[str, int], acme: Tenant, db: Db
) -> None:
    """A chunked body (no Content-Length) is counted as it streams: 413 before its last chunk is sent."""
    before = db.totals()
    host, port = server
    started = time.monotonic()
    with socket.create_connection((host, port), timeout=10) as conn:
        conn.sendall(_post_head(host, port, acme.keys["operator"], "Transfer-Encoding: chunked\r\n"))
        chunk = b"x" * MB
        for _ in range(17):  # the limit is 16 MiB; the terminating chunk is never sent
            conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        answer = _answer(conn, started + 10)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert b"max_request_bytes" in answer
    assert db.totals() == before


async def test_streamed_body_is_not_read_past_the_limit(client: httpx.AsyncClient, api: Api) -> None:
    """The app stops reading a streamed body at the limit: the rest of a 64 MB stream is never pulled."""
    pulled = 0

    async def stream() -> AsyncIterator[bytes]:
        nonlocal pulled
        for _ in range(64):
            pulled += MB
            yield b"x" * MB

    r = await client.post("/v1/runs", content=stream(), headers=api.t.auth("operator"))
    assert_problem(r, 413, "too_large")
    assert pulled <= 18 * MB


@pytest.mark.parametrize("engine", [{"max_request_bytes": 2000, "max_request_depth": 4}], indirect=True)
async def test_the_server_limits_can_be_lowered_by_whoever_runs_the_app(
    client: httpx.AsyncClient, api: Api, published: None
) -> None:
    """Engine.open(server_limits=...) lowers max_request_bytes and max_request_depth for every route."""
    assert_problem(await api.start("nap", {"blob": "x" * 3000}), 413, "too_large")
    assert_problem(await api.start("nap", {"x": nested(4)}), 422, "too_deep")
    assert (await api.start("nap", {"x": nested(2)})).status_code == 201


async def test_500_deep_input_is_422_and_writes_nothing(api: Api, published: None, db: Db) -> None:
    """A 500-deep input (accepted before, then breaking every listing) is refused with 422 too_deep."""
    before = db.totals()
    started = time.monotonic()
    r = await api.start("nap", {"x": nested(500)})
    body = assert_problem(r, 422, "too_deep")
    assert "max_request_depth" in body["detail"]
    assert time.monotonic() - started < 2
    assert db.totals() == before
    r = await api.list_runs()
    assert r.status_code == 200, r.text


async def test_100000_deep_body_is_422_not_a_recursion_error(api: Api, published: None) -> None:
    """100,000 nested brackets (deeper than any JSON parser recurses) are a 422, not a 500."""
    body = b'{"definition": "nap", "input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    r = await api.c.post(
        "/v1/runs", content=body, headers={**api.t.auth("operator"), "content-type": "application/json"}
    )
    assert_problem(r, 422, "too_deep")


def _json_routes(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path) of every operation with a body in the OpenAPI document, path parameters filled."""
    out = []
    for path, ops in app.openapi()["paths"].items():
        for method in ops:
            if method in ("post", "put", "patch", "delete"):
                filled = re.sub(r"\{task_id\}", "r1/s/a1", path)
                out.append((method.upper(), re.sub(r"\{[a-z_]+\}", "1", filled)))
    return out


async def test_every_route_that_takes_json_refuses_a_deep_body(
    app: FastAPI, client: httpx.AsyncClient, api: Api
) -> None:
    """Every API operation with a body (walked from the OpenAPI document) and the UI's forms answer a
    100-deep JSON body with 422 too_deep, with or without a JSON content type."""
    routes = _json_routes(app)
    assert ("POST", "/v1/runs") in routes
    assert ("POST", "/v1/tasks/r1/s/a1/complete") in routes
    assert len(routes) >= 15
    routes += [("POST", "/ui/login"), ("POST", "/ui/runs/1/cancel")]
    deep = b'{"input": ' + b"[" * 100 + b"]" * 100 + b"}"
    for method, path in routes:
        for headers in ({"content-type": "application/json"}, {}):
            r = await client.request(method, path, content=deep, headers={**api.t.auth("admin"), **headers})
            assert_problem(r, 422, "too_deep")


async def test_utf16_json_is_refused_not_scanned_wrongly(api: Api, published: None) -> None:
    """JSON in UTF-16 (where a quote byte can hide brackets from a byte scan) is refused: UTF-8 only."""
    text = '{"definition": "nap", "input": {"a": 1}}'.encode("utf-16")
    r = await api.c.post(
        "/v1/runs", content=text, headers={**api.t.auth("operator"), "content-type": "application/json"}
    )
    assert_problem(r, 422, "invalid_request")


# --- the tenant's limits on values ----------------------------------------------------------------


async def test_input_deeper_than_the_tenant_limit_is_422_naming_it(
    api: Api, published: None, principals: Principals, db: Db
) -> None:
    """A 40-deep input passes the request scan but not max_json_depth=32: 422 naming the limit and path."""
    before = db.totals()
    body = assert_problem(await api.start("nap", {"x": nested(40)}), 422, "too_deep")
    assert "max_json_depth=32" in body["detail"]
    assert "input.x[0]" in body["detail"]
    assert "lockstep tenants set acme --max-json-depth" in body["detail"]
    assert body["limit"] == "max_json_depth"
    assert body["allowed"] == 32
    assert db.totals() == before
    principals.set_tenant("acme", max_json_depth=48)
    assert (await api.start("nap", {"x": nested(40)})).status_code == 201


async def test_1001_item_list_is_refused_with_the_limit_name(
    api: Api, published: None, principals: Principals, db: Db
) -> None:
    """A 1001-item array in an input (or an object of 1001 members) is refused naming max_list_items."""
    before = db.totals()
    body = assert_problem(await api.start("nap", {"items": list(range(1001))}), 422, "too_many_items")
    assert "max_list_items=1000" in body["detail"]
    assert "input.items" in body["detail"]
    wide = {f"k{i}": i for i in range(1001)}
    assert_problem(await api.start("nap", {"m": wide}), 422, "too_many_items")
    assert db.totals() == before
    assert (await api.start("nap", {"items": list(range(1000))})).status_code == 201
    principals.set_tenant("acme", max_list_items=2000)
    assert (await api.start("nap", {"items": list(range(1001))})).status_code == 201


async def test_input_over_max_input_bytes_is_refused(
    api: Api, published: None, principals: Principals, db: Db
) -> None:
    """A 300 KB input (under the request limit, over max_input_bytes) is 422 too_large; nothing written."""
    before = db.totals()
    body = assert_problem(await api.start("nap", {"blob": "x" * 300_000}), 422, "too_large")
    assert "max_input_bytes=262144" in body["detail"]
    assert "300" in body["detail"]
    assert db.totals() == before
    principals.set_tenant("acme", max_input_bytes=512 * 1024)
    assert (await api.start("nap", {"blob": "x" * 300_000})).status_code == 201


async def test_huge_activity_output_fails_the_attempt_and_the_run_does_not_loop(
    api: Api, published: None
) -> None:
    """A 300 KB output from an HTTP worker: 422 output_too_large, the attempt failed, never retried."""
    run_id = await api.start_ok(ORDER, order_input())
    [task] = await api.poll("inventory.reserve")
    r = await api.report(task, output={"blob": "x" * 300_000})
    body = assert_problem(r, 422, "output_too_large")
    assert "max_output_bytes" in body["detail"]
    assert "not retried" in body["detail"]
    run = await api.run(run_id)
    assert run["steps"]["reserve"]["attempts"] == 1
    assert run["steps"]["reserve"]["error"]["code"] == "output_too_large"
    assert run["status"] == "failed"
    assert await api.poll("inventory.reserve") == []
    assert_problem(await api.report(task, output={"ok": True}), 409, "stale_result")


async def test_deep_activity_output_is_refused_the_same_way(api: Api, published: None) -> None:
    """An output 40 levels deep (over max_json_depth) is recorded as a non-retried output_too_large."""
    run_id = await api.start_ok(ORDER, order_input())
    [task] = await api.poll("inventory.reserve")
    body = assert_problem(await api.report(task, output=nested(40)), 422, "output_too_large")
    assert "max_json_depth" in body["detail"]
    assert (await api.run(run_id))["steps"]["reserve"]["error"]["code"] == "output_too_large"


async def test_operator_payloads_are_bounded(api: Api, published: None, db: Db) -> None:
    """edit-input and a cancel reason over their limits are refused naming the limit; nothing written."""
    run_id = await api.start_ok("nap", {"a": 1})
    before = db.totals()
    r = await api.c.post(
        f"/v1/runs/{run_id}/edit-input",
        json={"input": {"items": list(range(1001))}, "reason": "fix"},
        headers=api.t.auth("operator"),
    )
    assert "max_list_items" in assert_problem(r, 422, "too_many_items")["detail"]
    assert db.totals() == before


# --- values stored before the limits: every view still answers ----------------------------------


def legacy_run(engine: Engine, tenant: str, input: Any) -> str:
    """A run whose input no limit accepts today, written as the code before the limits did (the start
    command applied directly, below Service.start's checks)."""
    svc = engine.service
    now = svc.clock()
    with svc.write() as tx:
        row = tx.definition(tenant, "nap", None)
        assert row is not None
        d = svc.definition_for(tx, tenant, "nap", row.version)
        run_id = new_run_id(now)
        svc.apply(tx, None, StartRun(run_id, tenant, row.version, input), now, d)
    return run_id


MARKER = "[not shown: nested deeper than 64 levels]"


def _leaf(value: Any) -> tuple[int, Any]:
    depth = 0
    while isinstance(value, list):
        value, depth = value[0], depth + 1
    return depth, value


async def test_a_stored_500_deep_input_still_lists_shows_and_streams(
    api: Api, published: None, engine: Engine
) -> None:
    """A run stored 500 deep: GET /v1/runs, the run and its events are 200; the depth past 64 a marker."""
    run_id = legacy_run(engine, "acme", {"x": nested(500)})
    await api.start_ok("nap", {"fine": True})
    r = await api.list_runs()
    assert r.status_code == 200, r.text
    [item] = [i for i in r.json()["items"] if i["run_id"] == run_id]
    assert _leaf(item["input"]["x"]) == (63, MARKER)
    run = await api.run(run_id)
    assert _leaf(run["input"]["x"]) == (63, MARKER)
    events = await api.events(run_id)
    assert events[0]["type"] == "RunStarted"
    assert _leaf(events[0]["data"]["input"]["x"])[1] == MARKER
    # The stored history is untouched: only the views clip.
    assert engine.service.verify(run_id)[0].ok
    assert _leaf(engine.service.state("acme", run_id).input["x"]) == (500, 1)


@pytest.mark.parametrize("depth", [240, 243, 244, 253, 900])
async def test_stored_values_at_the_serialisers_edge_still_answer(
    api: Api, published: None, engine: Engine, depth: int
) -> None:
    """Around the depth where pydantic and orjson give up (254), every API view of a run still answers 200."""
    run_id = legacy_run(engine, "acme", {"x": nested(depth)})
    assert (await api.list_runs()).status_code == 200
    assert (await api.run(run_id))["run_id"] == run_id
    assert (await api.events(run_id))[0]["type"] == "RunStarted"


@pytest.mark.parametrize("depth", [243, 900])
async def test_a_stored_deep_value_renders_in_the_ui(
    api: Api, published: None, engine: Engine, principals: Principals, client: httpx.AsyncClient, depth: int
) -> None:
    """The UI's run list and run page (input, events) answer 200 for a run stored with a deep input."""
    run_id = legacy_run(engine, "acme", {"x": nested(depth)})
    password = "legacy-deep-values-7391"  # noqa: S105
    principals.set_password("acme", "viewer", password)
    form = await client.get("/ui/login")
    csrf = form.text.split('name="csrf" value="')[1].split('"')[0]
    r = await client.post(
        "/ui/login",
        data={"csrf": csrf, "tenant": "acme", "user": "viewer", "password": password, "next": "/ui/"},
    )
    assert r.status_code == 303, r.text
    for page in ("/ui/", f"/ui/runs/{run_id}"):
        r = await client.get(page)
        assert r.status_code == 200, (page, r.text[:500])
    assert "not shown: nested deeper than 64 levels" in r.text or depth < 244


async def test_a_stored_deep_output_still_shows(api: Api, published: None, engine: Engine) -> None:
    """A step output stored 300 deep (before the limits) shows as a marker in the run and its events."""
    run_id = await api.start_ok(ORDER, order_input())
    [task] = await api.poll("inventory.reserve")
    engine.service.command(
        run_id, ReportSuccess(task["task_id"], task["attempt"], task["fencing_token"], nested(300))
    )
    run = await api.run(run_id)
    assert _leaf(run["steps"]["reserve"]["output"]) == (64, MARKER)
    events = await api.events(run_id)
    assert "ActivitySucceeded" in [e["type"] for e in events], [e["type"] for e in events]
    assert (await api.list_runs()).status_code == 200
