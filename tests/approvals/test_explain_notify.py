"""How a waiting approval is explained (show / the API), and the notifier that mints one link per
eligible approver at delivery time."""

from __future__ import annotations

from datetime import timedelta

from lockstep.app.approvals import TOKEN_RE
from lockstep.core.timeutil import iso
from lockstep.runtime.notify import Notifier

from .conftest import STEP, T0, TENANT, Capture, World, assert_no_tokens_in, db_bytes


def test_show_explains_the_wait(world: World) -> None:
    """show() says how many approvals are missing, from whom, who decided when, and when it expires."""
    run = world.start()
    shown = world.show(run)
    assert shown["status"] == "waiting"
    assert (
        shown["wait_reason"] == "waiting for 2 more approvals of 2 from {alice, bob, finance}; expires in 3d"
    )
    world.clock.advance(hours=1)
    assert world.decide(world.mint(run, "alice")["token"], "alice").status_code == 200
    world.clock.advance(hours=2)
    shown = world.show(run)
    assert (shown["status"], shown["wait_kind"], shown["current_step"]) == ("waiting", "approval", STEP)
    assert shown["wait_reason"] == (
        "waiting for 1 more approval of 2 from {alice, bob, finance}; "
        "alice approved 2h ago; expires in 2d 21h"
    )
    assert shown["waiting_since"] == iso(T0)
    assert shown["waiting_until"] == iso(T0 + timedelta(days=3))
    assert "1 rejection(s) reject it" in shown["next_action"]
    assert "it counts as rejected" in shown["next_action"]
    # The API shows the same explanation to a viewer.
    r = world.http.get(f"/v1/runs/{run}", key=world.keys["viewer"])
    assert r.status_code == 200, r.text
    assert r.json()["wait_reason"] == shown["wait_reason"]


def test_waiting_is_never_failed(world: World) -> None:
    """Refused decisions and an overdue (not yet fired) timeout leave the run waiting, never failed."""
    run = world.start()
    link = world.mint(run, "alice")
    assert world.decide(link["token"], "bob").status_code == 403
    assert world.decide("nonsense", "alice").status_code == 404
    world.clock.advance(days=3, minutes=5)  # past the deadline; the scheduler has not run yet
    shown = world.show(run)
    assert shown["status"] == "waiting"
    assert shown["wait_reason"].endswith("expired 5m ago; its timeout is being applied")
    assert "expires in" not in shown["wait_reason"]
    assert shown["error"] is None


def test_notifier_mints_one_working_link_per_eligible_approver(world: World) -> None:
    """One link per eligible approver (named users and enabled approver-role members of named groups, not
    the initiator); each message's url carries a working token, and no token reaches the database."""
    world.principals.disable_user(TENANT, "dave")  # in finance, but disabled
    run = world.start(actor="alice")  # alice started it: allow_initiator is false
    channel = Capture()
    notifier = Notifier(world.service, world.approvals, channel)
    assert notifier.tick() == 1
    messages = channel.messages
    # frank is in finance without the approver role; erin is named by nobody; admin/op are not approvers.
    assert sorted(m["approver"] for m in messages) == ["bob", "carol"]
    for m in messages:
        assert TOKEN_RE.match(m["token"])
        assert m["url"] == f"http://test/approve/{m['token']}"
        assert (m["run_id"], m["step"], m["tenant"], m["definition"]) == (run, STEP, TENANT, "po")
        assert m["details"] == "Approve PO PO-1 for 1250.0 EUR"
        assert m["expires_at"] == iso(T0 + timedelta(days=3))
    issued = [e["data"] for e in world.events(run) if e["type"] == "ApprovalLinkIssued"]
    assert sorted((i["approver"], i["by"]) for i in issued) == [("bob", "notifier"), ("carol", "notifier")]
    assert notifier.tick() == 0  # delivered once
    assert len(messages) == 2
    assert world.sql("SELECT status FROM notifications") == [("done",)]

    assert_no_tokens_in(db_bytes(world.db_path), [m["token"] for m in messages])
    by = {m["approver"]: m["url"].rsplit("/", 1)[1] for m in messages}
    first = world.decide(by["bob"], "bob")
    assert first.status_code == 200, first.text
    assert first.json()["request_status"] == "pending"
    second = world.decide(by["carol"], "carol")
    assert second.status_code == 200, second.text
    assert second.json()["request_status"] == "approved"
    assert world.show(run)["current_step"] == "pay"


def test_notifier_sends_the_new_approver_a_link_after_reassignment(world: World) -> None:
    """After a reassignment the notifier delivers one link, to the new approver only."""
    run = world.start()
    channel = Capture()
    notifier = Notifier(world.service, world.approvals, channel)
    notifier.tick()
    assert sorted(m["approver"] for m in channel.messages) == ["alice", "bob", "carol", "dave"]
    world.approvals.reassign(TENANT, run, STEP, "alice", "dave", "alice left", actor="op")
    channel.messages.clear()
    assert notifier.tick() == 1
    assert [m["approver"] for m in channel.messages] == ["dave"]
    r = world.decide(channel.messages[0]["token"], "dave")
    assert r.status_code == 200, r.text


def test_notifier_skips_requests_that_are_no_longer_pending(world: World) -> None:
    """A request cancelled before delivery gets no links at all."""
    run = world.start()
    world.engine.cancel(run, reason="withdrawn", tenant=TENANT, actor="op")
    channel = Capture()
    assert Notifier(world.service, world.approvals, channel).tick() == 1
    assert channel.messages == []
    assert world.sql("SELECT COUNT(*) FROM approval_links") == [(0,)]
