"""The approval page /approve/{token} and the inbox, in process: login first, GET never acts, the POST
needs the session's CSRF token, and the responses keep the token out of referrers and caches."""

from __future__ import annotations

import html
import re
from urllib.parse import quote

from .conftest import STEP, World, csrf_of


def _private(r: object) -> None:
    headers = r.headers  # type: ignore[attr-defined]
    assert headers["referrer-policy"] == "no-referrer"
    assert headers["cache-control"] == "no-store"


def test_link_without_a_session_redirects_to_login(world: World) -> None:
    """Opening a link while logged out redirects to the login page (the link alone authorizes nothing)."""
    run = world.start()
    link = world.mint(run, "alice")
    before = world.totals()
    r = world.http.get(f"/approve/{link['token']}")
    assert r.status_code == 303
    assert r.headers["location"] == "/ui/login?next=" + quote(f"/approve/{link['token']}", safe="")
    r = world.http.post(f"/approve/{link['token']}", data={"decision": "approve", "csrf": "x"})
    assert r.status_code == 303
    assert r.headers["location"].startswith("/ui/login")
    assert world.totals() == before


def test_page_shows_the_request_and_get_never_acts(world: World) -> None:
    """The page shows process, run, step, details, decisions, quorum and expiry; GETs change nothing."""
    run = world.start()
    assert world.decide(world.mint(run, "bob")["token"], "bob").status_code == 200
    world.clock.advance(hours=1)
    link = world.mint(run, "alice")
    ui, _csrf = world.ui("alice")
    before = world.totals()
    for _ in range(3):
        r = ui.get(f"/approve/{link['token']}")
        assert r.status_code == 200, r.text
        _private(r)
    text = html.unescape(r.text)
    for shown in (
        "po",
        run,
        STEP,
        "Approve PO PO-1 for 1250.0 EUR",
        "2 approval(s) from alice, bob, finance",
    ):
        assert shown in text, shown
    # Relative times come from the service's clock (here the test's), as in `lockstep show`.
    assert re.search(r">bob</td><td [^>]*>1h ago</td><td [^>]*>approved</td>", text), "bob's decision"
    assert f"{link['expires_at']} (in 2d 23h)" in text
    assert world.totals() == before
    assert world.link_status(link["link_id"]) == "pending"


def test_post_without_the_csrf_token_is_refused(world: World) -> None:
    """A logged-in POST without, with a wrong or with another session's CSRF token: 403, nothing written."""
    run = world.start()
    link = world.mint(run, "alice")
    ui, csrf = world.ui("alice")
    _other, other_csrf = world.ui("bob")
    assert other_csrf != csrf
    before = world.totals()
    for form in (
        {"decision": "approve"},
        {"decision": "approve", "csrf": ""},
        {"decision": "approve", "csrf": "A" * 43},
        {"decision": "approve", "csrf": other_csrf},
    ):
        r = ui.post(f"/approve/{link['token']}", data=form)
        assert r.status_code == 403, (form, r.text)
        assert "CSRF" in r.text
    assert world.totals() == before
    assert [(a["actor"], a["outcome"], a["detail"]["code"]) for a in world.audit()] == [
        ("alice", "refused", "csrf")
    ] * 4
    assert world.link_status(link["link_id"]) == "pending"
    ok = ui.post(f"/approve/{link['token']}", data={"decision": "approve", "csrf": csrf})
    assert ok.status_code == 200, ok.text
    _private(ok)
    assert "still waits for more approvals" in ok.text


def test_page_refusals_mirror_the_api(world: World) -> None:
    """Through the page: someone else's link is 403, a replay 409 'Already handled', an unknown link 404."""
    run = world.start()
    link = world.mint(run, "alice")
    bob, bob_csrf = world.ui("bob")
    before = world.totals()
    r = bob.get(f"/approve/{link['token']}")
    assert r.status_code == 403
    assert "not yours" in r.text
    _private(r)
    r = bob.post(f"/approve/{link['token']}", data={"decision": "approve", "csrf": bob_csrf})
    assert r.status_code == 403
    assert world.totals() == before
    alice, csrf = world.ui("alice")
    assert (
        alice.post(f"/approve/{link['token']}", data={"decision": "approve", "csrf": csrf}).status_code == 200
    )
    again = alice.post(f"/approve/{link['token']}", data={"decision": "reject", "csrf": csrf})
    assert again.status_code == 409
    assert "Already handled" in again.text
    assert alice.get("/approve/nonsense").status_code == 404
    assert [d["decision"] for d in world.decisions(run)] == ["approve"]


def test_inbox_lists_what_each_person_may_decide(world: World) -> None:
    """The inbox lists a pending request for named users and group members, not for the initiator,
    someone who already decided, or someone the policy does not name."""
    run = world.start(actor="bob")
    assert world.decide(world.mint(run, "carol")["token"], "carol").status_code == 200

    def listed(user: str) -> list[str]:
        r = world.http.get("/v1/approvals/inbox", key=world.keys[user])
        assert r.status_code == 200, r.text
        return [i["run_id"] for i in r.json()]

    assert listed("alice") == [run]  # named
    assert listed("dave") == [run]  # through finance
    assert listed("bob") == []  # the initiator
    assert listed("carol") == []  # already decided
    assert listed("erin") == []  # not an approver of this request
    ui, _csrf = world.ui("dave")
    page = ui.get("/ui/approvals")
    assert "Approve PO PO-1 for 1250.0 EUR" in html.unescape(page.text)
    assert "1 of 2" in page.text
    # Review from the inbox opens the request for dave's session: no link is minted, nothing appended.
    seq = world.show(run)["seq"]
    opened = ui.post("/ui/approvals/open", data={"csrf": csrf_of(page.text), "run_id": run, "step": STEP})
    assert opened.status_code == 303
    assert opened.headers["location"] == f"/ui/approvals/{run}/{STEP}"
    review = ui.get(opened.headers["location"])
    assert "Approve PO PO-1 for 1250.0 EUR" in html.unescape(review.text)
    assert world.show(run)["seq"] == seq


def test_disabled_users_session_stops_working(world: World) -> None:
    """Disabling a logged-in approver ends their session at once: the page and the POST go to login."""
    run = world.start()
    link = world.mint(run, "alice")
    ui, csrf = world.ui("alice")
    assert ui.get(f"/approve/{link['token']}").status_code == 200
    world.principals.disable_user("acme", "alice")
    before = world.totals()
    assert ui.get(f"/approve/{link['token']}").status_code == 303
    r = ui.post(f"/approve/{link['token']}", data={"decision": "approve", "csrf": csrf})
    assert r.status_code == 303
    assert r.headers["location"].startswith("/ui/login")
    assert world.totals() == before
    assert world.link_status(link["link_id"]) == "pending"
