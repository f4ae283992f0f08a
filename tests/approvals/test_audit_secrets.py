"""The audit trail of decisions (every attempt, with identity, time and outcome) and the secrecy of
tokens: no raw token in the audit rows, and none anywhere in the database file."""

from __future__ import annotations

import hashlib
import json
import secrets

from lockstep.core.timeutil import iso
from lockstep.runtime.notify import Notifier

from .conftest import (
    TENANT,
    Capture,
    World,
    assert_no_tokens_in,
    assert_problem,
    csrf_of,
    db_bytes,
)


def test_every_attempt_is_audited_without_the_token(world: World) -> None:
    """Accepted and refused decisions each leave one audit row: who, when, outcome, code; never the token."""
    run = world.start()
    alice, carol, bob = (
        world.mint(run, "alice"),
        world.mint(run, "carol"),
        world.mint(run, "bob", expires_in="1h"),
    )
    attempts: list[tuple[str, str, str, str | None]] = []  # (user, token, outcome, code)

    def attempt(user: str, token: str, outcome: str, code: str | None, status: int) -> None:
        world.clock.advance(minutes=7)  # each attempt at its own time
        r = world.decide(token, user)
        assert r.status_code == status, r.text
        attempts.append((user, token, outcome, code, iso(world.clock.now)))

    attempt("alice", alice["token"], "ok", None, 200)
    attempt("alice", alice["token"], "refused", "already_decided", 409)
    attempt("bob", carol["token"], "refused", "not_bound", 403)
    unknown = secrets.token_urlsafe(32)
    attempt("bob", unknown, "refused", "unknown_link", 404)
    attempt("bob", "garbage", "refused", "unknown_link", 404)
    world.principals.set_membership(TENANT, "carol", groups=[])
    attempt("carol", carol["token"], "refused", "not_an_approver", 403)
    world.clock.advance(hours=1)
    attempt("bob", bob["token"], "refused", "expired", 410)

    rows = world.audit()
    assert len(rows) == len(attempts)
    for row, (user, token, outcome, code, at) in zip(rows, attempts, strict=True):
        assert (row["tenant"], row["actor"], row["outcome"], row["at"]) == (TENANT, user, outcome, at)
        assert row["detail"].get("code") == code
        assert row["detail"]["decision"] == "approve"
        assert row["detail"]["channel"] == "api"
        if outcome == "ok":
            assert row["target"] == alice["link_id"]
            assert row["detail"]["request_id"] == alice["request_id"]
        else:  # a refused attempt is traceable by a short prefix of the token's hash, not the token
            assert row["detail"]["token_sha256_prefix"] == hashlib.sha256(token.encode()).hexdigest()[:12]
    everything = json.dumps(world.sql("SELECT * FROM audit"))
    for token in [*world.minted, unknown]:
        assert token not in everything


def test_refusals_at_authentication_or_for_a_role_are_audited(world: World) -> None:
    """A decide refused before the link is read, with no key or a wrong key (401) or without the approver
    role (403), is audited too: action approval.decide, outcome refused, the code, the caller if known."""
    run = world.start()
    link = world.mint(run, "alice")
    body = {"token": link["token"], "decision": "approve"}
    before = world.totals()
    codes = [
        assert_problem(world.http.post("/v1/approvals/decide", json=body), 401, "unauthenticated")["code"],
        assert_problem(
            world.http.post("/v1/approvals/decide", json=body, key="not-a-key"), 401, "unauthenticated"
        )["code"],
        assert_problem(world.decide(link["token"], "viewer"), 403)["code"],
    ]
    rows = world.audit()
    assert [(a["tenant"], a["actor"], a["action"], a["outcome"], a["detail"].get("code")) for a in rows] == [
        (None, None, "approval.decide", "refused", codes[0]),
        (None, None, "approval.decide", "refused", codes[1]),
        (TENANT, "viewer", "approval.decide", "refused", codes[2]),
    ]
    assert world.totals() == before
    assert world.link_status(link["link_id"]) == "pending"
    assert link["token"] not in json.dumps(world.sql("SELECT * FROM audit"))


def test_ui_decision_refused_for_csrf_is_audited(world: World) -> None:
    """A decision POST through the page without the session's CSRF token is refused (403) and audited
    with code csrf and channel ui; nothing else is written."""
    run = world.start()
    link = world.mint(run, "alice")
    ui, _csrf = world.ui("alice")
    before = world.totals()
    r = ui.post(f"/approve/{link['token']}", data={"decision": "approve", "csrf": "A" * 43})
    assert r.status_code == 403, r.text
    rows = world.audit()
    assert [(a["tenant"], a["actor"], a["outcome"], a["detail"]) for a in rows] == [
        (TENANT, "alice", "refused", {"code": "csrf", "channel": "ui"})
    ]
    assert world.totals() == before
    assert link["token"] not in json.dumps(world.sql("SELECT * FROM audit"))


def test_ui_decisions_are_audited_with_their_channel(world: World) -> None:
    """A decision through the approval page is audited like an API one, with channel ui."""
    run = world.start()
    link = world.mint(run, "carol")
    ui, csrf = world.ui("carol")
    r = ui.post(f"/approve/{link['token']}", data={"csrf": csrf, "decision": "reject", "comment": "no"})
    assert r.status_code == 200, r.text
    rows = world.audit()
    assert [(a["actor"], a["outcome"], a["detail"]["channel"], a["detail"]["decision"]) for a in rows] == [
        ("carol", "ok", "ui", "reject")
    ]
    assert link["token"] not in json.dumps(world.sql("SELECT * FROM audit"))


def test_no_raw_token_anywhere_in_the_database_file(world: World) -> None:
    """After links minted by the API and the notifier, a decision from the inbox page, and decisions of
    every outcome, the database file and its WAL hold token hashes only."""
    run = world.start()
    channel = Capture()
    Notifier(world.service, world.approvals, channel).tick()
    notified = [m["token"] for m in channel.messages]
    assert len(notified) == 4  # alice, bob, carol, dave
    by_api = [world.mint(run, "alice")["token"], world.mint(run, "carol")["token"]]
    # The inbox's Review opens the request for the logged-in approver (no link) and decides there.
    ui, csrf = world.ui("dave")
    opened = ui.post("/ui/approvals/open", data={"csrf": csrf, "run_id": run, "step": "manager-approval"})
    assert opened.status_code == 303, opened.text
    page = ui.get(opened.headers["location"])
    assert page.status_code == 200
    decided = ui.post(opened.headers["location"], data={"csrf": csrf_of(page.text), "decision": "approve"})
    assert decided.status_code == 200
    # Decisions: misdirected, accepted (meets the quorum), replayed, unknown.
    assert world.decide(by_api[1], "bob").status_code == 403
    assert world.decide(by_api[0], "alice").status_code == 200
    assert world.decide(by_api[0], "alice").status_code == 409
    unknown = secrets.token_urlsafe(32)
    assert world.decide(unknown, "bob").status_code == 404
    tokens = [*notified, *by_api, unknown]
    assert len(set(tokens)) == len(tokens)

    blob = db_bytes(world.db_path)
    assert_no_tokens_in(blob, tokens)
    # Sanity: this is the right database, and what it keeps of a minted token is its hash.
    for token in [*notified, *by_api]:
        assert hashlib.sha256(token.encode()).hexdigest().encode() in blob
    assert world.show(run)["current_step"] == "pay"  # dave and alice approved: the quorum was met
