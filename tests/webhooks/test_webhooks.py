"""Run webhooks on both backends: a subscription's deliveries are written by the transition that makes
the event, posted signed per Standard Webhooks (verified by the receiver with the library), retried with
the same webhook-id while the receiver is down (nothing lost, the runs not held up), in order per run;
the log, replay, and the boundary (admins only, HTTPS and public addresses only, another tenant's id)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lockstep import Engine
from lockstep.app.keys import create_key_file
from lockstep.app.webhooks import webhook_url_allowed
from lockstep.errors import InvalidInput, NotFound
from lockstep.runtime.webhooks_out import WebhookSender

from .hookkit import APPROVE, FAIL, Receiver

EVENTS = ["run.completed", "run.failed", "run.needs_attention", "approval.requested"]


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    url = (
        f"sqlite:///{tmp_path}/db.sqlite" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    )
    key = tmp_path / "lockstep.key"
    create_key_file(key)
    e = Engine.open(str(url), keys=key)
    e.service.webhooks.allow_loopback = True
    e.service.webhooks.retry_base_ms = 20
    e.service.webhooks.retry_cap_ms = 100
    p = e.service.principals
    p.create_tenant("acme")
    p.create_user("acme", "alice", ["approver"], [])
    e.publish(APPROVE, tenant="acme")
    e.publish(FAIL, tenant="acme")
    try:
        yield e
    finally:
        e.close()


def deliver_until(sender: WebhookSender, done: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "deliveries did not arrive"
        if not sender.pass_once():
            time.sleep(0.02)


def approve(engine: Engine, run_id: str) -> None:
    alice = engine.service.principals.principal("acme", "alice")
    (item,) = [i for i in engine.service.approvals.inbox(alice) if i.run_id == run_id]
    engine.service.approvals.decide_by_request(alice, item.request_id, "approve")


def test_deliveries_are_signed_ordered_and_logged(engine: Engine) -> None:
    """approval.requested then run.completed of one run, run.failed of another: each verified by the
    receiver; the log says delivered, one attempt; the secret is stored sealed."""
    rec = Receiver()
    sub = engine.service.webhooks.subscribe("acme", rec.url, EVENTS, "admin")
    rec.secret = sub.secret
    rec.up()
    sender = WebhookSender(engine.service.webhooks)
    try:
        run = engine.start("hooked", tenant="acme")
        approve(engine, run)
        failed = engine.start("failing", tenant="acme")
        deliver_until(sender, lambda: len(rec.verified) == 3)
    finally:
        rec.down()
        sender.close()
    assert rec.events(run) == ["approval.requested", "run.completed"]
    assert rec.events(failed) == ["run.failed"]
    assert rec.forged == 0
    body = next(v["body"] for v in rec.verified if v["body"]["type"] == "run.failed")
    assert body["data"]["error_code"] == "Nope"
    assert body["data"]["definition"] == "failing"
    log = engine.service.webhooks.deliveries("acme", sub.id)
    assert {(d["status"], d["attempts"]) for d in log} == {("delivered", 1)}
    (row,) = engine.service.webhooks.subscriptions("acme")
    assert sub.secret not in str(row)
    assert "$sealed" in str(row["secret"])


def test_receiver_down_then_up_loses_nothing_and_blocks_no_run(engine: Engine) -> None:
    """While the receiver refuses connections the runs go on to their end; the deliveries are retried
    and, once it is back, each arrives in order per run, every attempt with the same webhook-id."""
    rec = Receiver()
    sub = engine.service.webhooks.subscribe("acme", rec.url, EVENTS, "admin")
    rec.secret = sub.secret
    sender = WebhookSender(engine.service.webhooks)
    runs = [engine.start("hooked", tenant="acme") for _ in range(3)]
    for _ in range(5):
        sender.pass_once()
        time.sleep(0.03)
    for r in runs:
        approve(engine, r)
        assert engine.show(r, tenant="acme")["status"] == "completed"
    log = engine.service.webhooks.deliveries("acme", sub.id)
    assert all(d["status"] == "pending" for d in log)
    assert max(d["attempts"] for d in log) >= 2
    assert all(d["last_error"] for d in log if d["attempts"])
    rec.up()
    try:
        deliver_until(sender, lambda: len(set(rec.ids())) == 6)
    finally:
        rec.down()
        sender.close()
    for r in runs:
        assert rec.events(r) == ["approval.requested", "run.completed"]
    assert sorted(set(rec.ids())) == sorted(d["id"] for d in log)


def test_replay_delivers_again_with_the_same_id(engine: Engine) -> None:
    """A replayed delivery is posted again with its webhook-id; another tenant cannot see or replay it."""
    rec = Receiver()
    sub = engine.service.webhooks.subscribe("acme", rec.url, ["run.failed"], "admin")
    rec.secret = sub.secret
    rec.up()
    sender = WebhookSender(engine.service.webhooks)
    try:
        engine.start("failing", tenant="acme")
        deliver_until(sender, lambda: len(rec.verified) == 1)
        (d,) = engine.service.webhooks.deliveries("acme", sub.id)
        engine.service.principals.create_tenant("other")
        with pytest.raises(NotFound):
            engine.service.webhooks.deliveries("other", sub.id)
        with pytest.raises(NotFound):
            engine.service.webhooks.replay("other", sub.id, d["id"], "mallory")
        engine.service.webhooks.replay("acme", sub.id, d["id"], "admin")
        deliver_until(sender, lambda: len(rec.verified) == 2)
    finally:
        rec.down()
        sender.close()
    assert rec.ids() == [d["id"], d["id"]]


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/hook",
        "https://127.0.0.1/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://10.0.0.5/hook",
        "https://[::1]/hook",
        "https://[fd00:ec2::254]/hook",
        "https://user:pw@example.com/hook",
        "ftp://example.com/hook",
    ],
)
def test_attack_a_url_that_is_not_public_https_is_refused(url: str) -> None:
    """Clear text, loopback, metadata, private and unique-local addresses, credentials: refused."""
    assert webhook_url_allowed("acme", url) is not None


def test_subscribe_refuses_bad_urls_and_events(engine: Engine) -> None:
    """Without the loopback test setting a loopback URL is refused; unknown events are refused."""
    engine.service.webhooks.allow_loopback = False
    with pytest.raises(InvalidInput, match="not a public address"):
        engine.service.webhooks.subscribe("acme", "https://127.0.0.1:9/hook", EVENTS, "admin")
    engine.service.webhooks.allow_loopback = True
    with pytest.raises(InvalidInput, match=r"unknown run\.exploded"):
        engine.service.webhooks.subscribe("acme", "http://127.0.0.1:9/hook", ["run.exploded"], "admin")
    assert engine.service.webhooks.subscriptions("acme") == []
