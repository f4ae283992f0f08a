"""The audit log holds no secret: after a session of every kind of audited event (password logins right
and wrong until throttled, API-key logins, wrong keys, refused roles, minted and used approval links,
repairs, an export), no password, API key, session cookie, CSRF token or link token (nor a 12-character
piece of one) is in any audit row, in the chain heads, or in the export."""

from __future__ import annotations

import json
import secrets

import httpx

from .conftest import PASSWORD, TENANT, Http, World, csrf_of

WRONG = [f"wrong-{secrets.token_urlsafe(12)}" for _ in range(7)]


def _login(world: World, **form: str) -> tuple[httpx.Response, httpx.AsyncClient]:
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=world.app), base_url="http://test")
    world.stack.callback(world.http.portal.call, client.aclose)
    ui = Http(world.http.portal, client)
    csrf = csrf_of(ui.get("/ui/login").text)
    return ui.post("/ui/login", data={"csrf": csrf, "next": "/ui/", **form}), client


def test_no_secret_of_a_whole_session_reaches_the_audit_log(world: World) -> None:
    """Every secret the session used is searched for, whole and in pieces, in the raw audit rows, the
    chain heads and the export; the rows that should be there are there."""
    used: list[str] = [PASSWORD, *WRONG, *world.keys.values()]
    # Password logins: right (alice), wrong until bob is locked out (throttled), unknown tenant.
    ui, csrf = world.ui("alice")
    used += [csrf, *(c.value for c in ui.client.cookies.jar)]
    world.principals.set_password(TENANT, "bob", PASSWORD)
    for wrong in WRONG:
        r, _ = _login(world, tenant=TENANT, user="bob", password=wrong)
        assert r.status_code in (303, 429), r.text
    r, _ = _login(world, tenant="no-such-tenant", user="bob", password=WRONG[0])
    # API-key logins to the UI: a good key, and one that matches nobody.
    r, client = _login(world, api_key=world.keys["op"])
    assert r.status_code == 303
    used += [c.value for c in client.cookies.jar]
    forged = "lsk_" + secrets.token_urlsafe(32)
    used.append(forged)
    r, _ = _login(world, api_key=forged)
    # The API: a wrong key, a role without the permission.
    assert world.http.get("/v1/runs", key=forged).status_code == 401
    assert world.http.get("/v1/audit", key=world.keys["viewer"]).status_code == 403
    # Approval links: minted, used, replayed, guessed; a page decision without its CSRF token.
    run = world.start()
    alice, carol = world.mint(run, "alice"), world.mint(run, "carol")
    guessed = secrets.token_urlsafe(32)
    used += [alice["token"], carol["token"], guessed]
    assert world.decide(alice["token"], "alice").status_code == 200
    assert world.decide(alice["token"], "alice").status_code == 409
    assert world.decide(guessed, "bob").status_code == 404
    assert (
        ui.post(f"/approve/{carol['token']}", data={"decision": "approve", "csrf": "A" * 43}).status_code
        == 403
    )
    # Operator repairs and an export by the admin.
    for verb in ("pause", "resume"):
        r = world.http.post(
            f"/v1/runs/{run}/{verb}", json={"reason": f"{verb} for the audit"}, key=world.keys["op"]
        )
        assert r.status_code == 200, r.text
    export = world.http.get("/v1/audit/export", key=world.keys["admin"])
    assert export.status_code == 200

    rows = world.sql("SELECT * FROM audit")
    heads = world.sql("SELECT * FROM audit_chains")
    blob = json.dumps([rows, heads]) + export.text
    assert len(set(used)) == len(used)
    for secret in used:
        assert secret not in blob, f"a secret ({secret[:4]}...) is in the audit log"
        for i in range(0, len(secret) - 12, 4):
            piece = secret[i : i + 12]
            assert piece not in blob, f"12 characters of a secret ({secret[:4]}...) are in the audit log"
    seen = {(r[4], r[6]) for r in rows}
    assert {
        ("ui.login", "ok"),
        ("ui.login", "refused"),
        ("ui.login", "throttled"),
        ("api.request", "refused"),
        ("approval.link_mint", "ok"),
        ("approval.decide", "ok"),
        ("approval.decide", "refused"),
        ("repair.pause", "ok"),
        ("repair.resume", "ok"),
        ("audit.export", "ok"),
    } <= seen, seen
    assert world.service.verify_audit().ok
