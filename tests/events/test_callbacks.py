"""Per-wait callbacks on both backends, attacked as approval links are: a minted URL (token shown once,
only its sha256 stored) completes the step with its body; a replay is 409, an expired one 410, a forged
or malformed one 404, one whose run moved on 410, one replaced by a newer mint 410; with an integration,
a body without a valid Standard Webhooks signature (real `standardwebhooks` signer) is 401. None of the
refusals changes the run, and each is audited."""

from __future__ import annotations

import base64
import json
import secrets
from datetime import UTC, datetime
from typing import Any

import pytest
from eventkit import Client, FakeClock, Tenant
from standardwebhooks.webhooks import Webhook

from lockstep.engine import Engine

SIGNED: dict[str, Any] = {
    "name": "signed",
    "steps": [
        {
            "id": "settled",
            "wait_event": {
                "name": "payment-settled",
                "key": "${input.tracking_no}",
                "timeout": "1d",
                "callback": {"integration": "psp"},
            },
        }
    ],
}


def mint(c: Client, t: Tenant, run: str, step: str = "delivered", role: str = "operator") -> Any:
    return c.post(f"/v1/runs/{run}/callbacks", json={"step": step}, headers=t.auth(role))


def refusals(engine: Engine, tenant: str | None) -> list[str]:
    rows = engine.service.audit.page(tenant, limit=500).items
    return [
        str(r.detail.get("code")) for r in rows if r.action == "event.callback" and r.outcome == "refused"
    ]


def start(engine: Engine, name: str = "parcels", tracking: str = "CB1") -> str:
    return engine.service.start("acme", name, input={"tracking_no": tracking}).run_id


def test_a_minted_callback_completes_the_step_once(engine: Engine, client: Client, acme: Tenant) -> None:
    """201 with the URL; the body becomes the output; the token is nowhere in the database's history."""
    run = start(engine)
    r = mint(client, acme, run)
    assert r.status_code == 201, r.text
    m = r.json()
    assert m["url"] == f"https://lockstep.example/v1/callbacks/{m['token']}"
    assert len(m["token"]) == 43
    history = json.dumps([e.data for e in engine.service.events("acme", run)])
    assert m["token"] not in history
    ok = client.post(f"/v1/callbacks/{m['token']}", json={"at": "13:00"})
    assert ok.status_code == 200, ok.text
    assert engine.service.show("acme", run).output == {"at": "13:00"}
    again = client.post(f"/v1/callbacks/{m['token']}", json={"at": "14:00"})
    assert again.status_code == 409
    assert again.json()["code"] == "already_used"
    assert engine.service.show("acme", run).output == {"at": "13:00"}
    assert "already_used" in refusals(engine, "acme")


@pytest.mark.parametrize("token", ["x" * 43, "short", "a" * 500, "a.b,c;d"])
def test_forged_and_malformed_tokens_are_404_the_same(
    engine: Engine, client: Client, acme: Tenant, token: str
) -> None:
    """Unknown or malformed: one answer, and the run still waits."""
    run = start(engine)
    mint(client, acme, run)
    r = client.post(f"/v1/callbacks/{token}", json={"at": "x"})
    assert r.status_code == 404
    assert r.json()["code"] == "unknown_callback"
    assert engine.service.show("acme", run).status == "waiting"


def test_an_expired_callback_is_410(engine: Engine, client: Client, acme: Tenant, clock: FakeClock) -> None:
    """Past the step's timeout (before the timer fired): 410 expired, the run unchanged."""
    run = start(engine)
    token = mint(client, acme, run).json()["token"]
    clock.advance(days=7, seconds=1)
    r = client.post(f"/v1/callbacks/{token}", json={"at": "x"})
    assert r.status_code == 410
    assert r.json()["code"] == "expired"
    assert engine.service.show("acme", run).status == "waiting"


def test_a_callback_of_a_wait_the_run_left_is_410_stale(engine: Engine, client: Client, acme: Tenant) -> None:
    """The event came through the API first: the callback's wait generation is gone."""
    run = start(engine)
    token = mint(client, acme, run).json()["token"]
    body = {"name": "parcel-delivered", "key": "CB1", "id": "e1", "payload": {"at": "api"}}
    assert client.post("/v1/events", json=body, headers=acme.auth("publisher")).json()["delivered_to"] == [
        run
    ]
    r = client.post(f"/v1/callbacks/{token}", json={"at": "late"})
    assert r.status_code == 410
    assert r.json()["code"] == "stale"
    assert engine.service.show("acme", run).output == {"at": "api"}


def test_a_replaced_callback_is_410(engine: Engine, client: Client, acme: Tenant) -> None:
    """Minting again replaces the first URL; the new one works."""
    run = start(engine)
    old = mint(client, acme, run).json()["token"]
    new = mint(client, acme, run).json()["token"]
    assert client.post(f"/v1/callbacks/{old}", json={"at": "x"}).json()["code"] == "replaced"
    assert client.post(f"/v1/callbacks/{new}", json={"at": "y"}).status_code == 200


def test_a_body_failing_the_schema_is_422_and_the_callback_stays_usable(
    engine: Engine, client: Client, acme: Tenant
) -> None:
    """Nothing is consumed by a refused body."""
    run = start(engine)
    token = mint(client, acme, run).json()["token"]
    assert client.post(f"/v1/callbacks/{token}", json={"nope": 1}).status_code == 422
    assert client.post(f"/v1/callbacks/{token}", content=b"not json").status_code == 422
    assert client.post(f"/v1/callbacks/{token}", json={"at": "ok"}).status_code == 200


def test_who_may_mint_and_see(engine: Engine, client: Client, acme: Tenant, globex: Tenant) -> None:
    """Operators mint; viewers see waits and callback ids but no token; publishers, workers and other
    tenants may not mint (403, 404)."""
    run = start(engine)
    for role in ("viewer", "publisher", "worker", "approver"):
        assert mint(client, acme, run, role=role).status_code == 403, role
    assert mint(client, globex, run, role="operator").status_code == 404
    m = mint(client, acme, run).json()
    seen = client.get(f"/v1/runs/{run}/event-waits", headers=acme.auth("viewer"))
    assert seen.status_code == 200
    assert seen.json()["callbacks"][0]["callback_id"] == m["callback_id"]
    assert m["token"] not in seen.text
    assert mint(client, acme, run, step="nope").status_code == 409


def signer(secret: str, body: bytes, *, at: datetime | None = None, msg: str = "msg_1") -> dict[str, str]:
    when = at or datetime.now(UTC)
    return {
        "webhook-id": msg,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg, when, body.decode()),
        "content-type": "application/json",
    }


def test_a_signed_callback_needs_the_integrations_signature(
    engine: Engine, client: Client, acme: Tenant
) -> None:
    """A valid signature: 200. Unsigned, wrong secret, old timestamp, tampered body: 401, run unchanged.
    The secret is stored sealed (never in clear in the database)."""
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    engine.service.callbacks.set_integration("acme", "psp", secret, "admin")
    engine.service.publish("acme", SIGNED)
    run = start(engine, "signed", "PAY1")
    token = mint(client, acme, run, step="settled").json()["token"]
    body = json.dumps({"amount": 5}).encode()
    url = f"/v1/callbacks/{token}"
    other = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    attempts = [
        {"content-type": "application/json"},
        signer(other, body),
        signer(secret, body, at=datetime(2020, 1, 1, tzinfo=UTC)),
        {**signer(secret, body), "webhook-signature": "v1,garbage"},
    ]
    for headers in attempts:
        r = client.post(url, content=body, headers=headers)
        assert r.status_code == 401, (headers, r.text)
        assert r.json()["code"] == "bad_signature"
    tampered = client.post(url, content=b'{"amount": 500}', headers=signer(secret, body))
    assert tampered.status_code == 401
    assert engine.service.show("acme", run).status == "waiting"
    assert refusals(engine, "acme").count("bad_signature") == 5
    ok = client.post(url, content=body, headers=signer(secret, body))
    assert ok.status_code == 200, ok.text
    assert engine.service.show("acme", run).output == {"amount": 5}
    with engine.service.read() as tx:
        stored = json.dumps(tx.integration_get("acme", "psp"))
    assert secret not in stored
    assert secret[6:] not in stored


def test_a_bad_integration_secret_is_refused(engine: Engine, acme: Tenant) -> None:
    """Not a whsec_ secret of at least 24 bytes: refused with the fix."""
    from lockstep.errors import InvalidInput

    with pytest.raises(InvalidInput, match="whsec_"):
        engine.service.callbacks.set_integration("acme", "psp", "hunter2", "admin")
