"""GET /v1/audit and /v1/audit/export: admins read their own tenant's log only (other roles 403, audited;
no key 401), filters by actor, action (exact or prefix), outcome and time, a cursor that stays put while
rows are added, the JSON-lines export streamed in pages; bad filters are refused and change nothing;
operator commands and refused requests leave their rows."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from lockstep.app.audit import Audit
from lockstep.app.principals import Principals
from lockstep.engine import Engine

from .conftest import NAP, Api, Db, FakeClock, Tenant, assert_problem

pytestmark = pytest.mark.anyio
FIELDS = ("id", "at", "tenant", "actor", "action", "target", "outcome", "detail")


@pytest.fixture
def log(engine: Engine) -> Audit:
    return engine.service.audit


async def page(api: Api, role: str = "admin", **params: Any) -> dict[str, Any]:
    r = await api.c.get("/v1/audit", params=params, headers=api.t.auth(role))
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def actions(body: dict[str, Any]) -> list[str]:
    return [row["action"] for row in body["items"]]


async def test_an_admin_reads_their_own_tenant_only(api: Api, other: Api, log: Audit) -> None:
    """Attack: an admin of acme asks for the log and sees acme's rows only: never globex's, never the
    rows without a tenant; globex's admin likewise."""
    log.record("acme", "admin", "run.cancel", "r-1", "ok", reason="a")
    log.record("globex", "admin", "run.cancel", "r-2", "ok", reason="g")
    log.record(None, None, "ui.login", None, "refused", address="10.0.0.1")
    mine = await page(api)
    assert {r["tenant"] for r in mine["items"]} == {"acme"}
    assert [r["target"] for r in mine["items"] if r["action"] == "run.cancel"] == ["r-1"]
    theirs = await page(other)
    assert {r["tenant"] for r in theirs["items"]} == {"globex"}
    assert [r["target"] for r in theirs["items"] if r["action"] == "run.cancel"] == ["r-2"]
    row = mine["items"][0]
    assert set(row) == {*FIELDS, "seq", "prev_hash", "hash"}
    assert (row["action"], len(row["hash"])) == ("run.cancel", 64)
    assert row["seq"] == len(mine["items"])  # the tenant's chain: tenant.create, user.create..., this


@pytest.mark.parametrize("role", ["operator", "viewer", "approver", "worker"])
async def test_other_roles_get_403_and_the_refusal_is_audited(api: Api, db: Db, role: str) -> None:
    """Attack: every role but admin is refused (403) on the list and the export, and each refusal is an
    audit row: who, api.request, the route, the missing permission."""
    for path in ("/v1/audit", "/v1/audit/export"):
        assert_problem(await api.c.get(path, headers=api.t.auth(role)), 403, "forbidden")
    body = await page(api, action="api.request")
    assert [(r["actor"], r["target"], r["detail"]) for r in body["items"]] == [
        (role, "GET /v1/audit/export", {"code": "forbidden", "permission": "audit"}),
        (role, "GET /v1/audit", {"code": "forbidden", "permission": "audit"}),
    ]


async def test_anonymous_callers_get_401_and_a_wrong_key_is_audited_without_the_key(
    client: httpx.AsyncClient, acme: Tenant, log: Audit, db: Db
) -> None:
    """No key: 401 and nothing written (no attempt was made). A key that matches nobody: 401 and a row
    without a tenant that names the route, never the key."""
    before = db.count("audit")
    assert_problem(await client.get("/v1/audit"), 401, "unauthenticated")
    assert db.count("audit") == before
    wrong = "lsk_" + "w" * 43
    r = await client.get("/v1/audit/export", headers={"Authorization": f"Bearer {wrong}"})
    assert_problem(r, 401, "unauthenticated")
    rows = log.page(None).items
    assert [(r.tenant, r.actor, r.action, r.target, r.outcome) for r in rows] == [
        (None, None, "api.request", "GET /v1/audit/export", "refused")
    ]
    assert wrong not in json.dumps([r.plain() for r in rows])


async def test_filters_by_actor_action_outcome_and_time(api: Api, log: Audit, clock: FakeClock) -> None:
    """Each filter narrows the page: actor; action exact or a prefix ending in '.'; outcome; since
    (inclusive) and until (exclusive), with or without an offset."""
    clock.advance(minutes=1)  # after the fixture's rows (tenant.create, user.create) at 00:00
    log.record("acme", "ann", "repair.pause", "r-1", "ok", reason="x")
    clock.advance(hours=1)  # 01:01
    log.record("acme", "bob", "repair.resume", "r-1", "refused", code="not_paused")
    clock.advance(hours=1)  # 02:01
    log.record("acme", "bob", "run.cancel", "r-2", "ok", reason="y")
    log.record("acme", "ann", "ui.login", None, "ok")
    assert actions(await page(api, actor="bob")) == ["run.cancel", "repair.resume"]
    assert actions(await page(api, action="repair.pause")) == ["repair.pause"]
    assert actions(await page(api, action="repair.")) == ["repair.resume", "repair.pause"]
    assert actions(await page(api, action="repair.*")) == ["repair.resume", "repair.pause"]
    assert actions(await page(api, action="repair")) == []  # exact: no action is called just "repair"
    assert actions(await page(api, outcome="refused")) == ["repair.resume"]
    assert actions(await page(api, since="2025-01-01T01:00:00Z")) == [
        "ui.login",
        "run.cancel",
        "repair.resume",
    ]
    assert actions(await page(api, since="2025-01-01T00:00:30Z", until="2025-01-01T01:00:00Z")) == [
        "repair.pause"
    ]
    assert actions(await page(api, since="2025-01-01T02:00:00+01:00", until="2025-01-01T01:30")) == [
        "repair.resume"
    ]
    assert actions(await page(api, actor="ann", action="ui.")) == ["ui.login"]


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"action": "repair pause"}, "action: 'repair pause' is neither an action name nor a prefix"),
        ({"action": "Repair."}, "action:"),
        ({"outcome": "maybe"}, "outcome: 'maybe' is not an outcome; use one of ok, refused"),
        ({"since": "yesterday"}, "since: 'yesterday' is not a time; write an RFC 3339 timestamp"),
        ({"until": "2025-13-01T00:00:00Z"}, "until: '2025-13-01T00:00:00Z' is not a time"),
        ({"since": "2025-02-01T00:00:00Z", "until": "2025-01-01T00:00:00Z"}, "is not before until"),
        ({"cursor": "not-a-cursor"}, "cursor: 'not-a-cursor' is not a cursor this server gave out"),
        ({"cursor": "YXVkaXQ6LTE"}, "is not a cursor this server gave out"),  # "audit:-1"
    ],
)
async def test_a_bad_filter_is_refused_with_what_where_and_how(
    api: Api, db: Db, log: Audit, params: dict[str, str], says: str
) -> None:
    """A malformed filter or cursor: 422 naming the filter, what is wrong and what to write; nothing is
    written (not even an export's own audit row)."""
    log.record("acme", "ann", "ui.login", None, "ok")
    before = db.count("audit")
    for path in ("/v1/audit", "/v1/audit/export"):
        if path.endswith("export") and "cursor" in params:
            continue
        r = await api.c.get(path, params=params, headers=api.t.auth("admin"))
        body = assert_problem(r, 422)
        assert says in body["detail"], body
    assert db.count("audit") == before


@pytest.mark.parametrize("limit", [0, -1, 501, "many"])
async def test_the_page_size_is_bounded(api: Api, limit: Any) -> None:
    """`limit` is 1 to 500: anything else is a 422, not a huge or empty read."""
    r = await api.c.get("/v1/audit", params={"limit": limit}, headers=api.t.auth("admin"))
    assert_problem(r, 422)


async def test_the_cursor_pages_newest_first_and_holds_while_rows_are_added(api: Api, log: Audit) -> None:
    """Pages of 50 over 120 rows: newest first, no row twice, none missed; rows written between two
    pages do not shift the later pages (they are newer than the cursor), and a fresh first page has them."""
    for i in range(120):
        log.record("acme", "ann", "ui.login", None, "ok", n=i)
    first = await page(api, limit=50, action="ui.login")
    for i in range(30):
        log.record("acme", "ann", "ui.login", None, "ok", n=1000 + i)
    second = await page(api, limit=50, action="ui.login", cursor=first["next"])
    third = await page(api, limit=50, action="ui.login", cursor=second["next"])
    seen = [r["detail"]["n"] for p in (first, second, third) for r in p["items"]]
    assert seen == list(range(119, -1, -1))
    assert third["next"] is None
    fresh = await page(api, limit=50, action="ui.login")
    assert fresh["items"][0]["detail"]["n"] == 1029


async def test_export_streams_every_matching_row_as_json_lines(api: Api, log: Audit, db: Db) -> None:
    """The export is application/x-ndjson, one row per line, newest first, every match (more rows than a
    page), with the list's filters; the export itself is audited, with its filters."""
    for i in range(1100):
        log.record("acme", "ann" if i % 2 else "bob", "ui.login", None, "ok", n=i)
    r = await api.c.get("/v1/audit/export", params={"actor": "bob"}, headers=api.t.auth("admin"))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert [x["detail"]["n"] for x in lines] == list(range(1098, -1, -2))
    assert all(x["actor"] == "bob" and x["tenant"] == "acme" for x in lines)
    everything = await api.c.get("/v1/audit/export", headers=api.t.auth("admin"))
    rows = [json.loads(line) for line in everything.text.splitlines()]
    assert len(rows) == db.count("audit", "tenant = 'acme'")
    assert [(x["action"], x["actor"], x["detail"]) for x in rows[:2]] == [
        ("audit.export", "admin", {"channel": "api"}),
        ("audit.export", "admin", {"actor": "bob", "channel": "api"}),
    ]


async def test_operator_commands_are_audited_with_their_outcome(api: Api, other: Api) -> None:
    """Pause, resume and cancel through the API each leave a row (actor, action, run, reason); a repair the
    state machine refuses and one aimed at another tenant's run are rows with outcome refused."""
    assert (await api.publish(NAP)).status_code == 201
    run = await api.start_ok("nap", {})
    hdr = api.t.auth("operator")

    async def post(verb: str, reason: str) -> httpx.Response:
        return await api.c.post(f"/v1/runs/{run}/{verb}", json={"reason": reason}, headers=hdr)

    assert (await post("pause", "hold")).status_code == 200
    again = await post("pause", "again")
    assert again.status_code == 409, again.text
    assert (await post("resume", "go")).status_code == 200
    assert (await post("cancel", "done")).status_code == 200
    r = await other.c.post(f"/v1/runs/{run}/pause", json={"reason": "x"}, headers=other.t.auth("operator"))
    assert r.status_code == 404
    rows = [x for x in (await page(api))["items"] if x["action"].startswith(("run.", "repair."))]
    assert [
        (x["actor"], x["action"], x["target"], x["outcome"], x["detail"].get("reason")) for x in rows
    ] == [
        ("operator", "run.cancel", run, "ok", "done"),
        ("operator", "repair.resume", run, "ok", "go"),
        ("operator", "repair.pause", run, "refused", "again"),
        ("operator", "repair.pause", run, "ok", "hold"),
    ]
    assert rows[2]["detail"]["code"] == again.json()["code"] == "already_paused"
    elsewhere = (await page(other, action="repair."))["items"]
    assert [(x["action"], x["target"], x["outcome"], x["detail"]["code"]) for x in elsewhere] == [
        ("repair.pause", run, "refused", "not_found")
    ]


async def test_changes_of_tenants_and_users_are_audited_without_their_secrets(
    api: Api, principals: Principals, log: Audit
) -> None:
    """The platform operator's changes (CLI, Python API) are rows of the tenant concerned: new roles
    shown, a new password or key named but never recorded; no actor (nobody is logged in)."""
    principals.set_membership("acme", "viewer", roles=["viewer", "operator"])
    password = "a long unguessable passphrase 1793"  # noqa: S105 - the test's
    principals.set_password("acme", "viewer", password)
    key = principals.rotate_key("acme", "viewer").api_key
    principals.disable_user("acme", "viewer")
    principals.enable_user("acme", "viewer")
    principals.set_tenant("acme", max_active_runs=10)
    rows = (await page(api, action="user."))["items"]
    assert [(x["actor"], x["action"], x["target"]) for x in rows[:5]] == [
        (None, "user.enable", "viewer"),
        (None, "user.disable", "viewer"),
        (None, "user.key_rotate", "viewer"),
        (None, "user.password", "viewer"),
        (None, "user.membership", "viewer"),
    ]
    assert rows[4]["detail"] == {"changed": ["roles"], "roles": ["viewer", "operator"]}
    assert rows[2]["detail"] == {"changed": ["key_hash"]}
    tenant = (await page(api, action="tenant."))["items"]
    assert [(x["action"], x["detail"]) for x in tenant] == [
        ("tenant.settings", {"changed": ["max_active_runs"]}),
        ("tenant.create", {}),
    ]
    everything = json.dumps([r.plain() for r in log.export("acme")])
    assert password not in everything
    assert key not in everything
