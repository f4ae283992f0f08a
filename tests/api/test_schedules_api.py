"""Schedules over HTTP, written as the attacks they must refuse: a viewer, an approver or a worker cannot
create, change, pause, resume, delete or trigger a schedule (403, audited, nothing written); another
tenant cannot see, change or fire one (404, as if it did not exist); bad requests are one problem
document each and write nothing; a trigger with the same Idempotency-Key starts one run."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from lockstep.engine import Engine

from .conftest import NAP, Api, Db, FakeClock, assert_problem

pytestmark = pytest.mark.anyio

NIGHTLY: dict[str, Any] = {
    "name": "nightly",
    "definition": "nap",
    "cron": "30 2 * * *",
    "timezone": "Europe/Berlin",
}


@pytest.fixture
async def published(api: Api, other: Api) -> None:
    for a in (api, other):
        assert (await a.publish(NAP)).status_code == 201


async def create(api: Api, role: str = "admin", **body: Any) -> httpx.Response:
    return await api.c.post("/v1/schedules", json={**NIGHTLY, **body}, headers=api.t.auth(role))


async def test_admins_and_operators_create_and_everyone_reading_sees(api: Api, published: None) -> None:
    """201 with the next fire times (UTC and local); operators may too; viewers list and show."""
    r = await create(api)
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["next_fire_times_local"][0].endswith("02:30:00+01:00")  # 2025-01-01 is winter time
    assert body["next_fire_at"] == "2025-01-01T01:30:00.000Z"
    assert (await create(api, "operator", name="hourly", cron="0 * * * *")).status_code == 201
    shown = await api.c.get("/v1/schedules/nightly", headers=api.t.auth("viewer"))
    assert shown.status_code == 200
    assert shown.json()["description"] == "At 02:30 every day (Europe/Berlin)"
    listed = await api.c.get("/v1/schedules", headers=api.t.auth("viewer"))
    assert [s["name"] for s in listed.json()] == ["hourly", "nightly"]


CHANGES = [
    ("post", "/v1/schedules", NIGHTLY | {"name": "sneaky"}),
    ("patch", "/v1/schedules/nightly", {"cron": "* * * * *"}),
    ("post", "/v1/schedules/nightly/pause", {"reason": "x"}),
    ("post", "/v1/schedules/nightly/resume", None),
    ("delete", "/v1/schedules/nightly", None),
    ("post", "/v1/schedules/nightly/trigger", None),
]


@pytest.mark.parametrize("role", ["viewer", "approver", "worker"])
async def test_roles_without_schedule_cannot_change_or_fire(
    api: Api, published: None, db: Db, role: str
) -> None:
    """Every changing route answers 403 to viewers, approvers and workers, audits the refusal, and leaves
    the schedule as it was (no run started, no change, no new schedule)."""
    assert (await create(api)).status_code == 201
    before = (await api.c.get("/v1/schedules/nightly", headers=api.t.auth("admin"))).json()
    for method, path, body in CHANGES:
        kw: dict[str, Any] = {"headers": api.t.auth(role)}
        if body is not None:
            kw["json"] = body
        r = await api.c.request(method.upper(), path, **kw)
        assert_problem(r, 403, "forbidden")
    after = (await api.c.get("/v1/schedules/nightly", headers=api.t.auth("admin"))).json()
    assert after == before
    assert db.count("schedules") == 1
    assert db.count("runs") == 0
    refused = db.count("audit", "action = 'api.request' AND outcome = 'refused' AND actor = ?", role)
    assert refused == len(CHANGES)


async def test_another_tenant_cannot_see_change_or_fire(
    api: Api, other: Api, published: None, db: Db
) -> None:
    """globex's admin gets 404 for acme's schedule on every route, an empty list, and fires nothing."""
    assert (await create(api)).status_code == 201
    listed = await other.c.get("/v1/schedules", headers=other.t.auth("admin"))
    assert listed.json() == []
    r = await other.c.get("/v1/schedules/nightly", headers=other.t.auth("admin"))
    assert_problem(r, 404, "schedule_not_found")
    for method, path, body in CHANGES[1:]:
        kw: dict[str, Any] = {"headers": other.t.auth("admin")}
        if body is not None:
            kw["json"] = body
        assert_problem(await other.c.request(method.upper(), path, **kw), 404, "schedule_not_found")
    assert db.count("runs") == 0
    own = (await api.c.get("/v1/schedules/nightly", headers=api.t.auth("admin"))).json()
    assert own["status"] == "active"
    # The same name in globex is globex's own schedule, unrelated to acme's.
    assert (await create(other)).status_code == 201
    assert db.count("schedules") == 2


BAD = [
    ({"cron": "61 * * * *"}, 422, "bad_cron", "bad minute"),
    ({"cron": "* * *"}, 422, "bad_cron", "field(s)"),
    ({"timezone": "Europe/Berln"}, 422, "bad_timezone", "unknown time zone"),
    ({"definition": "missing"}, 404, "not_found", "no definition missing"),
    ({"cron": "* * * * * *"}, 422, "schedule_too_frequent", "max_schedule_rate=60"),
    ({"input": {"$sealed": "ls1.x.y"}}, 422, "reserved_key", "reserved"),
    ({"catch_up": "all", "catch_up_limit": 101}, 422, "bad_catch_up", "max_catch_up_slots=100"),
    ({"overlap": "sometimes"}, 422, "invalid_request", "overlap"),
    ({"name": "Has Spaces"}, 422, "invalid_input", "is invalid"),
]


@pytest.mark.parametrize(("change", "status", "code", "text"), BAD)
async def test_a_bad_schedule_is_one_problem_and_writes_nothing(
    api: Api, published: None, db: Db, change: dict[str, Any], status: int, code: str, text: str
) -> None:
    audit_before = db.count("audit")
    body = assert_problem(await create(api, **change), status, code)
    assert text in body["detail"]
    assert db.count("schedules") == 0
    assert db.count("audit") == audit_before


async def test_input_against_the_schema(api: Api, published: None, db: Db) -> None:
    doc = {
        "name": "typed",
        "input_schema": {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}},
        "steps": [{"id": "nap", "wait": "1h"}],
    }
    assert (await api.publish(doc)).status_code == 201
    body = assert_problem(await create(api, definition="typed", input={"n": "x"}), 422, "invalid_input")
    assert "input.n" in body["detail"]
    assert body["field"] == "input"
    assert db.count("schedules") == 0
    assert (await create(api, definition="typed", input={"n": 3})).status_code == 201


async def test_trigger_is_idempotent_and_changes_are_audited(
    api: Api, published: None, engine: Engine, clock: FakeClock
) -> None:
    """The same Idempotency-Key answers the same run (200); the run is the schedule's; pause, resume,
    patch and delete each leave an audit row naming the caller."""
    assert (await create(api)).status_code == 201
    headers = {**api.t.auth("operator"), "Idempotency-Key": "k-1"}
    first = await api.c.post("/v1/schedules/nightly/trigger", headers=headers)
    again = await api.c.post("/v1/schedules/nightly/trigger", headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["run_id"] == again.json()["run_id"]
    run = await api.run(first.json()["run_id"])
    assert run["start_key"] == "nightly:trigger:k-1"
    auth = api.t.auth("operator")
    r = await api.c.patch("/v1/schedules/nightly", json={"overlap": "allow"}, headers=auth)
    assert r.json()["overlap"] == "allow"
    assert (await api.c.post("/v1/schedules/nightly/pause", json={"reason": "freeze"}, headers=auth)).json()[
        "status"
    ] == "paused"
    assert_problem(
        await api.c.post("/v1/schedules/nightly/pause", json={}, headers=auth), 409, "schedule_paused"
    )
    assert (await api.c.post("/v1/schedules/nightly/resume", headers=auth)).json()["status"] == "active"
    gone = await api.c.delete("/v1/schedules/nightly", headers=auth)
    assert gone.json() == {"name": "nightly", "deleted": True, "runs_started": 1, "last_run": run["run_id"]}
    rows = [e for e in engine.service.audit.export("acme") if e.action.startswith("schedule.")]
    assert [(e.action, e.actor) for e in reversed(rows)] == [
        ("schedule.create", "admin"),
        ("schedule.trigger", "operator"),
        ("schedule.update", "operator"),
        ("schedule.pause", "operator"),
        ("schedule.resume", "operator"),
        ("schedule.delete", "operator"),
    ]
    assert (await api.run(run["run_id"]))["status"] == "waiting"  # the run outlives its schedule
