"""Migrations that need approval over HTTP and in the UI: the operator's `POST /v1/runs/{id}/migrate`
answers with a pending request and changes nothing; the approvers find it in `GET /v1/approvals/inbox`
and the UI inbox (what it is: run, versions, reason) and decide it with `POST /v1/approvals/{id}/decide`
or the CSRF-protected review page; the operator who asked is 403 `requester`, another tenant's approver
404, an approver outside the policy 403, a forged UI post 403; a quorum migrates the run."""

from __future__ import annotations

import html
from typing import Any

from .conftest import TENANT, World, assert_problem, csrf_of

MIG_V1: dict[str, Any] = {"name": "mig", "steps": [{"id": "hold", "wait": "1h"}]}
MIG_V2: dict[str, Any] = {
    **MIG_V1,
    "migration": {
        "requires_approval": {
            "approvers": {"users": ["alice", "olga"], "groups": ["finance"]},
            "quorum": 2,
            "timeout": "2d",
        }
    },
    "steps": [{"id": "hold", "wait": "1h"}, {"id": "notify", "succeed": True}],
}


def test_a_migration_request_is_decided_over_the_api_and_the_ui(world: World) -> None:
    """The whole path, with each refusal tried as the attack it is."""
    world.publish(MIG_V1)
    world.publish(MIG_V2)
    olga = world.principals.create_user(TENANT, "olga", ["operator", "approver"], []).api_key
    world.principals.create_tenant("globex")
    gina = world.principals.create_user("globex", "gina", ["approver"], ["finance"]).api_key
    run = world.service.start(TENANT, "mig", version=1).run_id

    r = world.http.post(f"/v1/runs/{run}/migrate", json={"to_version": 2, "reason": "notify"}, key=olga)
    assert r.status_code == 200, r.text
    request = r.json()["request"]
    rid = request["request_id"]
    assert request["status"] == "pending"
    assert world.show(run)["definition"]["version"] == 1
    assert "status" not in r.json()

    inbox = world.http.get("/v1/approvals/inbox", key=world.keys["alice"]).json()
    (item,) = [i for i in inbox if i["kind"] == "migration"]
    assert item["request_id"] == rid
    assert item["migration"]["runs"] == [run]
    assert (item["migration"]["from_version"], item["migration"]["to_version"]) == (1, 2)
    assert item["migration"]["reason"] == "notify"
    assert world.http.get("/v1/approvals/inbox", key=olga).json() == []

    for key, status, code in (
        (olga, 403, "requester"),  # the operator who asked, though an approver named by the policy
        (gina, 404, "unknown_request"),  # another tenant's approver, in a group of the same name
        (world.keys["erin"], 403, "not_an_approver"),  # an approver the policy does not name
        (world.keys["op"], 403, None),  # an operator without the approver role
    ):
        refused = world.http.post(f"/v1/approvals/{rid}/decide", json={"decision": "approve"}, key=key)
        assert_problem(refused, status, code)
    assert world.http.get("/v1/migrations", key=world.keys["viewer"]).status_code == 403
    listed = world.http.get("/v1/migrations?status=pending", key=world.keys["op"]).json()
    assert [m["request_id"] for m in listed] == [rid]
    assert listed[0]["decisions"] == []
    assert world.http.get(f"/v1/migrations/{rid}", key=gina).status_code == 403  # not an operator

    ui, _csrf = world.ui("alice")
    page = html.unescape(ui.get("/ui/approvals").text)
    assert "migration to v2" in page
    review = ui.get(f"/ui/migrations/{rid}")
    assert review.status_code == 200, review.text
    text = html.unescape(review.text)
    assert "version 1 → 2" in text
    assert run in text
    assert "notify" in text
    forged = ui.post(f"/ui/migrations/{rid}", data={"decision": "approve", "csrf": "A" * 43})
    assert forged.status_code == 403
    decided = ui.post(f"/ui/migrations/{rid}", data={"decision": "approve", "csrf": csrf_of(review.text)})
    assert decided.status_code == 200, decided.text
    assert "still waits for more approvals" in decided.text

    again = world.http.post(
        f"/v1/approvals/{rid}/decide", json={"decision": "reject"}, key=world.keys["alice"]
    )
    assert_problem(again, 409, "already_decided")
    done = world.http.post(
        f"/v1/approvals/{rid}/decide", json={"decision": "approve"}, key=world.keys["dave"]
    )
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "applied"
    assert done.json()["runs"] == [{"run_id": run, "outcome": "migrated", "detail": None}]
    assert world.show(run)["definition"]["version"] == 2
    (migrated,) = [e["data"] for e in world.events(run) if e["type"] == "WorkflowMigrated"]
    assert migrated["request_id"] == rid
    assert [d["approver"] for d in migrated["decisions"]] == ["alice", "dave"]
    assert ui.get(f"/ui/migrations/{rid}").status_code == 409  # no longer waiting


def test_the_run_pages_migrate_form_asks_for_approval_and_says_so(world: World) -> None:
    """An operator's migrate on the run page makes the request and says it waits for approvers (and
    that they may not decide it); the run stays on version 1."""
    world.publish(MIG_V1)
    world.publish(MIG_V2)
    run = world.service.start(TENANT, "mig", version=1).run_id
    ui, _csrf = world.ui("op")
    page = ui.get(f"/ui/runs/{run}")
    form = {"csrf": csrf_of(page.text), "action": "migrate", "version": "2", "reason": "notify"}
    r = ui.post(f"/ui/runs/{run}/action", data=form)
    assert r.status_code == 303, r.text
    shown = html.unescape(ui.get(f"/ui/runs/{run}").text)
    assert "Not migrated yet: migration request mig_" in shown
    assert "you may not decide it yourself" in shown
    assert world.show(run)["definition"]["version"] == 1
    (pending,) = world.service.migrations.requests(TENANT, "pending")
    assert pending.requested_by == "op"
