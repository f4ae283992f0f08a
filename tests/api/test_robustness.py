"""Hostile but well-formed requests: the API answers with a 4xx problem, never a 500, and writes nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from lockstep.engine import Engine

from .conftest import ORDER, Api, Db, assert_problem, order_input

pytestmark = pytest.mark.anyio

JSON = "application/json"


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """Like the shared client, but an unhandled error reaches the test as the 500 the caller would see."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        yield c


@pytest.fixture
async def published(api: Api) -> None:
    assert (await api.publish()).status_code == 201


async def post_raw(api: Api, path: str, text: str, role: str, content_type: str = JSON):
    return await api.c.post(
        path, content=text.encode(), headers={**api.t.auth(role), "content-type": content_type}
    )


@pytest.mark.parametrize(
    "text",
    [
        "!!python/object/apply:os.system ['true']\n",
        pytest.param("a: &a [*a, *a]\nname: x\n", id="recursive-alias"),
        "name: x\nsteps:\n  - {id: s, wait: 1s}\ndescription: !!binary aGVsbG8=\n",
        "name: x\nsteps:\n  - {id: s, wait: 1s}\ndescription: 2020-01-01\n",
        "\x00",
        "{1: 2}",
        "name: x\nsteps:\n  - {id: s, activity: a, timeout: 1s, input: {v: '${'}}\n",
        "name: x\nsteps:\n  - {id: s, choice: [{if: '1 +', next: s}]}\n",
    ],
)
async def test_hostile_yaml_definitions_are_422(api: Api, db: Db, text: str):
    """Python tags, aliases, odd scalars, NUL, bad keys or expressions in a definition: 422, none stored."""
    r = await post_raw(api, "/v1/definitions", text, "admin", "application/yaml")
    assert_problem(r, 422)
    assert db.count("definitions") == 0


async def test_non_json_activity_output_is_422_and_records_nothing(api: Api, published: None, db: Db):
    """An HTTP worker's complete with a non-JSON output (1e400) is a 422 invalid_input and records nothing:
    the attempt stays running, so the worker can fix the output and send it again."""
    await api.start_ok()
    (task,) = await api.poll("inventory.reserve")
    body = json.dumps({"attempt": task["attempt"], "fencing_token": task["fencing_token"], "output": "X"})
    before = db.totals()
    r = await post_raw(api, f"/v1/tasks/{task['task_id']}/complete", body.replace('"X"', "1e400"), "worker")
    problem = assert_problem(r, 422, "invalid_input")
    assert "output is not valid JSON" in problem["detail"]
    assert db.totals() == before
    run = await api.run(task["run_id"])
    assert run["status"] == "running"
    assert run["steps"]["reserve"]["status"] == "running"
    assert run["steps"]["reserve"]["error"] is None
    fixed = await api.report(task, output={"reserved": True})
    assert fixed.status_code == 200, fixed.text


async def test_in_process_non_json_output_fails_the_attempt(api: Api, published: None, engine: Engine):
    """An in-process worker (Service.complete without strict) cannot resend: its attempt fails visibly."""
    await api.start_ok()
    (task,) = await api.poll("inventory.reserve")
    verdict = engine.service.complete(
        task["task_id"], task["attempt"], task["fencing_token"], {"n": float("inf")}, tenant=api.t.name
    )
    assert verdict == "accepted"
    run = await api.run(task["run_id"])
    assert run["steps"]["reserve"]["error"]["code"] == "InvalidOutput"


@pytest.mark.parametrize("number", ["1e400", "-1e400"])
async def test_start_with_an_overflowing_number_is_422(api: Api, published: None, db: Db, number: str):
    """A start whose input holds a number that overflows to infinity is a 422 problem and writes nothing."""
    body = json.dumps({"definition": ORDER, "input": order_input(amount="X")}).replace('"X"', number)
    before = db.totals()
    r = await post_raw(api, "/v1/runs", body, "operator")
    assert_problem(r, 422, "invalid_input")
    assert db.totals() == before


async def test_start_with_a_lone_surrogate_is_422(api: Api, published: None, db: Db):
    """A start whose input holds an unpaired UTF-16 surrogate escape is a 422 problem and writes nothing."""
    body = json.dumps({"definition": ORDER, "input": order_input(sku="X")}).replace('"X"', '"\\ud800"')
    before = db.totals()
    assert_problem(await post_raw(api, "/v1/runs", body, "operator"), 422, "invalid_input")
    assert db.totals() == before


@pytest.mark.parametrize("stale", [False, True], ids=["current", "stale"])
async def test_complete_with_a_lone_surrogate_is_422(api: Api, published: None, db: Db, stale: bool):
    """A complete (current or stale) whose output holds a lone surrogate is a 422 and records nothing."""
    await api.start_ok()
    (task,) = await api.poll("inventory.reserve")
    fencing = task["fencing_token"] + (1 if stale else 0)
    body = json.dumps({"attempt": task["attempt"], "fencing_token": fencing, "output": "X"})
    before = db.totals()
    r = await post_raw(
        api, f"/v1/tasks/{task['task_id']}/complete", body.replace('"X"', '"\\ud800"'), "worker"
    )
    assert "output is not valid JSON" in assert_problem(r, 422, "invalid_input")["detail"]
    assert db.totals() == before


async def test_publish_with_a_lone_surrogate_is_422(api: Api, db: Db):
    """A JSON definition containing an unpaired surrogate escape is a 422 problem naming the path."""
    text = '{"name": "s", "description": "\\ud800", "steps": [{"id": "s", "wait": "1s"}]}'
    body = assert_problem(await post_raw(api, "/v1/definitions", text, "admin"), 422, "invalid_input")
    assert "description" in body["detail"]
    assert "surrogate" in body["detail"]
    assert db.count("definitions") == 0


async def test_publish_with_infinity_is_422(api: Api, db: Db):
    """A definition holding an infinite number is a 422 problem."""
    text = "name: t\ninput_schema: {type: number, maximum: .inf}\nsteps: [{id: s, wait: 1s}]\n"
    assert_problem(await post_raw(api, "/v1/definitions", text, "admin", "application/yaml"), 422)
    assert db.count("definitions") == 0


@pytest.mark.parametrize(
    "step",
    [
        "{id: s, wait: 99999999999999999999999d}",
        "{id: s, activity: a, timeout: 99999999999999999s}",
        "{id: s, activity: a, timeout: 1s, retry: {max_attempts: 2, initial_interval: 99999999999999999d}}",
    ],
)
async def test_publish_with_a_huge_duration_is_422(api: Api, db: Db, step: str):
    """A definition with an absurdly long duration is a 422 problem naming the step."""
    r = await post_raw(api, "/v1/definitions", f"name: x\nsteps:\n  - {step}\n", "admin", "application/yaml")
    body = assert_problem(r, 422)
    assert "steps[0]" in body["detail"]
    assert db.count("definitions") == 0


@pytest.mark.parametrize("content_type", ["application/yaml", JSON])
async def test_publish_deeply_nested_body_is_422(api: Api, content_type: str):
    """A 5 kB body of nested brackets is a 422 problem, not a 500."""
    assert_problem(await post_raw(api, "/v1/definitions", "[" * 5000, "admin", content_type), 422)


async def test_publish_json_numbers_in_exponent_form_stay_numbers(api: Api):
    """A definition published as JSON with `1e3` in a step input hands the worker the number 1000."""
    doc = '{"name": "n", "steps": [{"id": "s", "activity": "a", "timeout": "5s", "input": {"k": 1e3}}]}'
    assert (await post_raw(api, "/v1/definitions", doc, "admin")).status_code == 201
    await api.start_ok("n", {})
    (task,) = await api.poll("a")
    assert task["input"] == {"k": 1000}


async def test_publish_json_with_an_escaped_emoji(api: Api):
    """A definition published as ASCII-escaped JSON (json.dumps default) with an emoji is 201 and keeps it."""
    doc = {"name": "emoji", "description": "ship it \U0001f680", "steps": [{"id": "s", "wait": "1s"}]}
    r = await post_raw(api, "/v1/definitions", json.dumps(doc), "admin")
    assert r.status_code == 201, r.text
    got = await api.c.get("/v1/definitions/emoji/versions/1", headers=api.t.auth("viewer"))
    assert got.json()["document"]["description"] == doc["description"]


@pytest.mark.parametrize("path", ["/v1/runs", "/v1/tasks/poll"])
async def test_non_utf8_json_body_is_a_documented_422(api: Api, path: str):
    """A JSON request body that is not UTF-8 gets the same 422 invalid_request as any malformed JSON."""
    r = await api.c.post(
        path,
        content=b'{"a": "\xf1\x80"}',
        headers={**api.t.auth("admin"), "content-type": "application/json"},
    )
    assert_problem(r, 422, "invalid_request")


# --- known bugs (strict xfails: they start failing, i.e. passing, once src is fixed) ----------------


@pytest.mark.parametrize(
    ("content_type", "text"),
    [
        (
            JSON,
            '{"name": "k", "steps": [{"id": "s", "activity": "a", "timeout": "1s", '
            '"input": {"\\ud800": 1}}]}',
        ),
        (
            JSON,
            '{"name": "k", "input_schema": {"properties": {"\\ud800": {}}}, '
            '"steps": [{"id": "s", "wait": "1s"}]}',
        ),
        (
            "application/yaml",
            'name: k\nsteps:\n  - {id: s, activity: a, timeout: 1s, input: {"\\ud800": 1}}\n',
        ),
    ],
    ids=["json-step-input", "json-input-schema", "yaml-step-input"],
)
async def test_publish_with_a_lone_surrogate_in_a_key_is_422(api: Api, db: Db, content_type: str, text: str):
    """A definition with an unpaired surrogate in a mapping key is a 422 problem, like one in a value."""
    assert_problem(await post_raw(api, "/v1/definitions", text, "admin", content_type), 422, "invalid_input")
    assert db.count("definitions") == 0


@pytest.mark.parametrize(
    ("content_type", "template"),
    [
        (JSON, '{"name": "b", "description": %s, "steps": [{"id": "s", "wait": "1s"}]}'),
        ("application/yaml", "name: b\ndescription: %s\nsteps:\n  - {id: s, wait: 1s}\n"),
    ],
    ids=["json", "yaml"],
)
async def test_publish_with_a_5000_digit_integer_is_422(api: Api, db: Db, content_type: str, template: str):
    """A definition body holding a 5000-digit integer is a 422 problem and stores nothing."""
    text = template % ("9" * 5000)
    assert_problem(await post_raw(api, "/v1/definitions", text, "admin", content_type), 422)
    assert db.count("definitions") == 0


async def test_start_with_a_5000_digit_integer_is_422(api: Api, published: None, db: Db):
    """The same 5000-digit integer in a run's input is a 422 invalid_request and writes nothing."""
    body = json.dumps({"definition": ORDER, "input": order_input(qty="X")}).replace('"X"', "9" * 5000)
    before = db.totals()
    assert_problem(await post_raw(api, "/v1/runs", body, "operator"), 422, "invalid_request")
    assert db.totals() == before
