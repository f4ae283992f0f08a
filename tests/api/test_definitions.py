"""POST /v1/definitions (YAML or JSON body), GET /v1/definitions, GET /v1/definitions/{name}/versions/{v}."""

from __future__ import annotations

import copy
import json

import pytest

from lockstep.app.principals import Principals

from .conftest import NAP, ORDER, ORDER_DOC, ORDER_YAML, Api, Db, assert_problem

pytestmark = pytest.mark.anyio


async def test_publish_yaml_then_identical_content_is_200_same_version(api: Api):
    """YAML body: 201 v1; the same content again (YAML or JSON): 200, same version, created=false."""
    first = await api.publish(ORDER_YAML)
    assert first.status_code == 201, first.text
    body = first.json()
    assert body["name"] == ORDER
    assert body["version"] == 1
    assert body["created"] is True
    assert body["digest"].startswith("sha256:")

    again = await api.publish(ORDER_YAML)
    assert again.status_code == 200
    assert again.json() == {**body, "created": False}

    as_json = await api.c.post(
        "/v1/definitions",
        content=json.dumps(ORDER_DOC, indent=2).encode(),
        headers={**api.t.auth("admin"), "content-type": "application/json"},
    )
    assert as_json.status_code == 200, as_json.text
    assert as_json.json() == {**body, "created": False}


async def test_publish_json_body_and_changed_content_is_next_version(api: Api):
    """A JSON body publishes too; changed content is a new version, and both versions are listed."""
    r = await api.publish(NAP)
    assert (r.status_code, r.json()["version"]) == (201, 1)
    changed = copy.deepcopy(NAP)
    changed["steps"][0]["wait"] = "2h"
    r2 = await api.publish(changed)
    assert (r2.status_code, r2.json()["version"]) == (201, 2)
    assert r2.json()["digest"] != r.json()["digest"]
    single_line = await api.c.post(
        "/v1/definitions",
        content=json.dumps(NAP).encode(),
        headers={**api.t.auth("admin"), "content-type": "application/json"},
    )
    assert (single_line.status_code, single_line.json()["version"]) == (200, 1)

    listed = await api.c.get("/v1/definitions", headers=api.t.auth("viewer"))
    assert listed.status_code == 200
    versions = sorted((d["name"], d["version"], d["digest"]) for d in listed.json())
    assert versions == [("nap", 1, r.json()["digest"]), ("nap", 2, r2.json()["digest"])]


async def test_get_definition_version_returns_its_document(api: Api):
    """GET /v1/definitions/{name}/versions/{v} returns name, version, digest and the published document."""
    published = (await api.publish()).json()
    r = await api.c.get(f"/v1/definitions/{ORDER}/versions/1", headers=api.t.auth("viewer"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert {k: body[k] for k in ("name", "version", "digest")} == {
        k: published[k] for k in ("name", "version", "digest")
    }
    assert body["document"]["name"] == ORDER
    assert [s["id"] for s in body["document"]["steps"]] == [s["id"] for s in ORDER_DOC["steps"]]
    assert body["document"]["input_schema"] == ORDER_DOC["input_schema"]


@pytest.mark.parametrize(
    ("path", "status"),
    [
        (f"/v1/definitions/{ORDER}/versions/2", 404),
        ("/v1/definitions/nope/versions/1", 404),
        (f"/v1/definitions/{ORDER}/versions/0", 422),
        (f"/v1/definitions/{ORDER}/versions/abc", 422),
    ],
)
async def test_get_unknown_definition_version(api: Api, path: str, status: int):
    """An unknown name or version is a 404 problem; a version that is not a positive integer is a 422."""
    await api.publish()
    assert_problem(await api.c.get(path, headers=api.t.auth("viewer")), status)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("name: x\nsteps:\n  - id: s\n    activity: a.b\n", "steps[0](s).timeout"),
        ("name: x\nsteps:\n  - {id: s, wait: soon}\n", "steps[0](s).wait"),
        ("name: Bad Name\nsteps:\n  - {id: s, wait: 1s}\n", "name"),
        ("name: x\nsteps: []\n", "steps"),
        ("name: x\nsteps:\n  - {id: s, wait: 1s, bogus: 1}\n", "bogus"),
        ("name: x\nsteps:\n  - {id: s, wait: 1s}\ninput_schema: {type: 5}\n", "input_schema"),
        ("name: x\nsteps:\n  - {id: s, wait: 1s\n", "line"),
        ("- just\n- a list\n", "mapping"),
    ],
)
async def test_invalid_definition_is_422_naming_the_path(api: Api, db: Db, text: str, where: str):
    """An invalid definition is a 422 invalid_input naming the bad path (or YAML line); nothing is stored."""
    r = await api.publish(text)
    body = assert_problem(r, 422, "invalid_input")
    assert where in body["detail"], body["detail"]
    assert db.count("definitions") == 0


@pytest.mark.parametrize(
    "content", [b"", b"   \n", b"\xff\xfe\x00garbage", b"[1, 2, 3]", b'"a string"'], ids=repr
)
async def test_publish_body_that_is_not_a_definition_is_422(api: Api, content: bytes):
    """An empty, non-UTF-8 or non-mapping body is a 422 problem, not a 500."""
    r = await api.c.post(
        "/v1/definitions",
        content=content,
        headers={**api.t.auth("admin"), "content-type": "application/yaml"},
    )
    assert_problem(r, 422)


async def test_publish_respects_the_tenant_max_steps(api: Api, principals: Principals):
    """With tenant setting max_steps=2 a five-step definition is refused (422) and a one-step one accepted."""
    principals.set_tenant("acme", max_steps=2)
    body = assert_problem(await api.publish(), 422, "invalid_input")
    assert "2" in body["detail"]
    assert (await api.publish(NAP)).status_code == 201


async def test_publish_oversized_body_is_refused(api: Api):
    """A definition body over 1 MiB is refused with a 4xx problem before it is parsed."""
    big = "name: x\n" + "# padding\n" * 110_000 + "steps: [{id: s, wait: 1s}]\n"
    r = await api.publish(big)
    assert 400 <= r.status_code < 500
    assert_problem(r, r.status_code)
