"""Run webhooks on both backends: a subscription's deliveries are written by the transition that makes
the event, posted signed per Standard Webhooks (verified by the receiver with the library), retried with
the same webhook-id while the receiver is down (nothing lost, the runs not held up), in order per run;
the log, replay, and the boundary (admins only, receivers under the tenant's egress policy and on public
addresses only, connections pinned to the checked address, another tenant's id)."""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lockstep import Engine
from lockstep.app.keys import create_key_file
from lockstep.app.webhooks import webhook_url_refusal
from lockstep.core.egress import NO_POLICY, EgressPolicy, IPAddress, parse_policy
from lockstep.errors import InvalidInput, NotFound
from lockstep.runtime.webhooks_out import WebhookSender

from .hookkit import APPROVE, FAIL, Receiver

# The test-only path to a receiver on loopback: the server's egress_allow_loopback and this policy.
LOOPBACK_RECEIVERS = {"allow_hosts": ["127.0.0.1"], "allow_http": True, "allow_loopback": True}
EVENTS = ["run.completed", "run.failed", "run.needs_attention", "approval.requested"]


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    url = (
        f"sqlite:///{tmp_path}/db.sqlite" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    )
    key = tmp_path / "lockstep.key"
    create_key_file(key)
    e = Engine.open(str(url), keys=key, server_limits={"egress_allow_loopback": 1})
    e.service.webhooks.retry_base_ms = 20
    e.service.webhooks.retry_cap_ms = 100
    p = e.service.principals
    p.create_tenant("acme")
    e.service.egress.set("acme", LOOPBACK_RECEIVERS, actor="admin")
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


def test_attack_dns_rebinding_reaches_only_the_checked_address(engine: Engine) -> None:
    """The sender resolves the receiver's name once per post and connects to that address only: a name
    unknown to the system's DNS reaches the receiver through the checked address, and once it resolves
    to a private address the post is refused (logged as a failure, retried) and nothing is sent."""
    rec = Receiver()
    rec.up()
    answers = {"hooks.test": "127.0.0.1"}

    def rebinding(host: str, port: int) -> list[IPAddress]:
        return [ipaddress.ip_address(answers[host])]

    engine.service.egress.set(
        "acme", {"allow_hosts": ["hooks.test"], "allow_http": True, "allow_loopback": True}, actor="admin"
    )
    engine.service.webhooks.resolver = rebinding
    sub = engine.service.webhooks.subscribe("acme", f"http://hooks.test:{rec.port}/hook", ["run.failed"], "a")
    rec.secret = sub.secret
    sender = WebhookSender(engine.service.webhooks)
    try:
        first = engine.start("failing", tenant="acme")
        deliver_until(sender, lambda: len(rec.verified) == 1)
        answers["hooks.test"] = "10.20.30.40"
        engine.start("failing", tenant="acme")
        for _ in range(3):
            sender.pass_once()
            time.sleep(0.12)
    finally:
        rec.down()
        sender.close()
    assert rec.events(first) == ["run.failed"]
    assert len(rec.ids()) == 1
    refused = [d for d in engine.service.webhooks.deliveries("acme", sub.id) if d["status"] == "pending"]
    assert len(refused) == 1
    assert "10.20.30.40 is a private" in str(refused[0]["last_error"])


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


PUBLIC = parse_policy({"allow_hosts": ["hooks.example.com", "10.0.0.5", "127.0.0.1"]})


def public_dns(host: str, port: int) -> list[IPAddress]:
    """A resolver for the policy tests: hooks.example.com is public; rebind.example.com is private."""
    table = {"hooks.example.com": "93.184.215.14", "rebind.example.com": "10.1.2.3"}
    return [ipaddress.ip_address(table.get(host, host.strip("[]")))]


@pytest.mark.parametrize(
    ("policy", "url", "why"),
    [
        (PUBLIC, "http://hooks.example.com/hook", "HTTPS only"),
        (PUBLIC, "https://127.0.0.1/hook", "loopback"),
        (PUBLIC, "https://10.0.0.5/hook", "private"),
        (PUBLIC, "https://user:pw@hooks.example.com/hook", "credentials"),
        (PUBLIC, "ftp://hooks.example.com/hook", "https://"),
        (PUBLIC, "https://elsewhere.example.net/hook", "outside the tenant's egress policy"),
        (NO_POLICY, "https://hooks.example.com/hook", "no egress policy"),
        (parse_policy({"allow_hosts": ["169.254.169.254"]}), "https://169.254.169.254/x", "metadata"),
        (parse_policy({"allow_hosts": ["::1"]}), "https://[::1]/hook", "loopback"),
        (parse_policy({"allow_hosts": ["fd00:ec2::254"]}), "https://[fd00:ec2::254]/hook", "metadata"),
        (parse_policy({"allow_hosts": ["rebind.example.com"]}), "https://rebind.example.com/h", "private"),
    ],
)
def test_attack_a_receiver_outside_the_egress_policy_or_not_public_is_refused(
    policy: EgressPolicy, url: str, why: str
) -> None:
    """A receiver is an egress: under the tenant's policy, HTTPS, and every address it resolves to public."""
    refused = webhook_url_refusal(policy, url, resolver=public_dns)
    assert refused is not None
    assert why in refused, refused
    assert webhook_url_refusal(PUBLIC, "https://hooks.example.com/hook", resolver=public_dns) is None


def test_subscribe_refuses_bad_urls_and_events(engine: Engine) -> None:
    """Without the server's loopback setting a loopback URL is refused; unknown events are refused."""
    engine.service.webhooks.loopback_ok = False
    with pytest.raises(InvalidInput, match="loopback address"):
        engine.service.webhooks.subscribe("acme", "http://127.0.0.1:9/hook", EVENTS, "admin")
    engine.service.webhooks.loopback_ok = True
    with pytest.raises(InvalidInput, match="outside the tenant's egress policy"):
        engine.service.webhooks.subscribe("acme", "http://localhost.example:9/hook", EVENTS, "admin")
    with pytest.raises(InvalidInput, match=r"unknown run\.exploded"):
        engine.service.webhooks.subscribe("acme", "http://127.0.0.1:9/hook", ["run.exploded"], "admin")
    assert engine.service.webhooks.subscriptions("acme") == []
