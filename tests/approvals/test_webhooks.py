"""Approval webhooks: signed per Standard Webhooks (checked with its reference library), delivered to a
real HTTP receiver on loopback, the same webhook-id on every retry, and the destination policy (TLS
off loopback, no internal addresses, no redirects, no credentials in the URL, a secret required)."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from lab import clifork
from lockstep.errors import InvalidInput
from lockstep.runtime import webhook as webhook_module
from lockstep.runtime.notify import Notifier, OutboundPolicy, WebhookChannel, channel_from_spec
from lockstep.runtime.webhook import new_secret

from .conftest import TENANT, World
from .receiver import Receiver, receiver
from .tlscert import make_cert

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # noqa: S105 - the specification's test secret


@pytest.fixture
def hook() -> Receiver:
    with receiver() as rec:
        yield rec


def test_signature_matches_the_specification_test_vector() -> None:
    """The signature of the Standard Webhooks test vector is the one the specification publishes."""
    channel = WebhookChannel("http://127.0.0.1:9/hook", SECRET, wall_clock=lambda: 1614265330)
    headers = channel.headers("msg_p5jXN8AQM9LWM0D4loKWxJek", b'{"test": 2432232314}')
    assert headers["webhook-id"] == "msg_p5jXN8AQM9LWM0D4loKWxJek"
    assert headers["webhook-timestamp"] == "1614265330"
    assert headers["webhook-signature"] == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_delivered_approval_verifies_with_standardwebhooks(world: World, hook: Receiver) -> None:
    """Each approver's message reaches the receiver signed; standardwebhooks verifies it, and the link
    in the verified body decides; a tampered body or another secret fails verification."""
    secret = new_secret()
    run = world.start()
    channel = channel_from_spec(
        f"webhook:{hook.url}/approvals?src=lockstep", env={"LOCKSTEP_WEBHOOK_SECRET": secret}
    )
    assert Notifier(world.service, world.approvals, channel).tick() == 1
    assert sorted(json.loads(r.body)["approver"] for r in hook.requests) == ["alice", "bob", "carol", "dave"]
    verifier = Webhook(secret)
    for r in hook.requests:
        assert r.path == "/approvals?src=lockstep"
        body = verifier.verify(r.body, r.headers)
        assert (body["run_id"], body["tenant"]) == (run, TENANT)
        assert r.headers["webhook-id"] == body["message_id"]
        with pytest.raises(WebhookVerificationError):
            verifier.verify(r.body.replace(b"PO-1", b"PO-2"), r.headers)
        with pytest.raises(WebhookVerificationError):
            Webhook(new_secret()).verify(r.body, r.headers)
    assert len({r.headers["webhook-id"] for r in hook.requests}) == 4
    alice = next(json.loads(r.body) for r in hook.requests if json.loads(r.body)["approver"] == "alice")
    assert world.decide(alice["token"], "alice").status_code == 200


def test_https_verifies_the_receivers_certificate(world: World, tmp_path: Path) -> None:
    """Over https:// the certificate is checked against the host name (here against the test's CA); a
    certificate the client does not trust gets nothing."""
    cert = make_cert(tmp_path)
    secret = new_secret()
    with receiver(cert.server_context()) as hook:
        world.start()
        untrusting = WebhookChannel(f"{hook.url}/in", secret)  # system CAs only
        Notifier(world.service, world.approvals, untrusting).tick()
        assert hook.requests == []
        ((error,),) = world.sql("SELECT last_error FROM notifications")
        assert "CERTIFICATE_VERIFY_FAILED" in error
        world.clock.advance(seconds=5)
        trusting = WebhookChannel(f"{hook.url}/in", secret, ssl_context=cert.client_context())
        Notifier(world.service, world.approvals, trusting).tick()
    assert len(hook.requests) == 4
    Webhook(secret).verify(hook.requests[0].body, hook.requests[0].headers)


def test_an_old_timestamp_fails_verification(world: World, hook: Receiver) -> None:
    """A message whose timestamp is ten minutes old (a replay) is refused by the receiver's check."""
    secret = new_secret()
    world.start()
    channel = WebhookChannel(hook.url, secret, wall_clock=lambda: time.time() - 600)
    Notifier(world.service, world.approvals, channel).tick()
    assert hook.requests
    with pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(secret).verify(hook.requests[0].body, hook.requests[0].headers)


def test_retries_keep_the_webhook_id(world: World, hook: Receiver) -> None:
    """A delivery the receiver answered 500 is retried with the same webhook-id (a new, valid signature)."""
    secret = new_secret()
    world.start()
    hook.script = [(500, {})]
    notifier = Notifier(world.service, world.approvals, WebhookChannel(hook.url, secret))
    assert notifier.tick() == 1
    (failed,) = hook.requests
    assert world.sql("SELECT status, last_error FROM notifications") == [
        ("ready", "OSError: webhook answered 500")
    ]
    world.clock.advance(seconds=5)  # past the backoff
    assert notifier.tick() == 1
    retried = hook.requests[1:]
    assert len(retried) == 4
    same = [r for r in retried if r.headers["webhook-id"] == failed.headers["webhook-id"]]
    assert len(same) == 1
    assert json.loads(same[0].body)["approver"] == json.loads(failed.body)["approver"]
    Webhook(secret).verify(same[0].body, same[0].headers)
    assert world.sql("SELECT status FROM notifications") == [("done",)]


def test_redirects_are_not_followed(world: World, hook: Receiver) -> None:
    """A 302 from the receiver is a failed delivery: nothing is sent to the Location it names."""
    with receiver() as elsewhere:
        world.start()
        hook.script = [(302, {"Location": f"{elsewhere.url}/steal"})]
        Notifier(world.service, world.approvals, WebhookChannel(hook.url, new_secret())).tick()
        assert len(hook.requests) == 1
        assert elsewhere.requests == []
    ((status, error),) = world.sql("SELECT status, last_error FROM notifications")
    assert status == "ready"
    assert "redirects are not followed" in error


def test_connection_goes_to_the_vetted_address(
    world: World, hook: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name is resolved and vetted before each delivery and the socket goes to that address (the
    Host header keeps the name); when the name later resolves to a metadata address, nothing is sent."""
    answers = {"hooks.example": [ipaddress.ip_address("127.0.0.1")]}
    monkeypatch.setattr(webhook_module, "resolve", lambda host, port: answers[host])
    port = hook.url.rsplit(":", 1)[1]
    channel = WebhookChannel(f"http://hooks.example:{port}/in", new_secret())
    world.start()
    notifier = Notifier(world.service, world.approvals, channel)
    notifier.tick()
    assert len(hook.requests) == 4
    assert hook.requests[0].headers["host"] == f"hooks.example:{port}"
    world.start()
    answers["hooks.example"] = [ipaddress.ip_address("169.254.169.254")]  # DNS rebinding
    notifier.tick()
    assert len(hook.requests) == 4
    errors = [e for (e,) in world.sql("SELECT last_error FROM notifications") if e]
    assert len(errors) == 1
    assert "169.254.169.254, an internal address" in errors[0]


@pytest.mark.parametrize(
    ("url", "policy", "fix"),
    [
        ("http://93.184.215.14/hook", OutboundPolicy(), "--allow-insecure-http"),
        (
            "http://10.1.2.3/hook",
            OutboundPolicy(allow_insecure_http=True),
            "--allow-webhook-network 10.1.2.3/32",
        ),
        ("https://169.254.169.254/latest/meta-data", OutboundPolicy(), "--allow-webhook-network"),
        ("https://[fd00:ec2::254]/", OutboundPolicy(), "--allow-webhook-network fd00:ec2::254/128"),
        ("https://[::ffff:169.254.169.254]/", OutboundPolicy(), "169.254.169.254"),
        ("https://192.168.1.10/", OutboundPolicy(), "--allow-webhook-network"),
        ("https://0.0.0.0/", OutboundPolicy(), "internal address"),
        ("https://user:pw@93.184.215.14/hook", OutboundPolicy(), "no credentials"),
        ("ftp://93.184.215.14/hook", OutboundPolicy(), "https://host/path"),
    ],
)
def test_destination_policy_refuses_at_startup(url: str, policy: OutboundPolicy, fix: str) -> None:
    """Clear text off loopback, internal and metadata addresses, credentials in the URL and other
    schemes are refused when the channel is made, with the flag or change that fixes it."""
    with pytest.raises(InvalidInput, match=fix.replace("[", r"\[").replace("?", r"\?")):
        WebhookChannel(url, new_secret(), policy)


@pytest.mark.parametrize(
    ("url", "policy"),
    [
        ("http://127.0.0.1:9/hook", OutboundPolicy()),
        ("http://localhost:9/hook", OutboundPolicy()),
        ("http://[::1]:9/hook", OutboundPolicy()),
        ("https://93.184.215.14/hook", OutboundPolicy()),
        ("http://93.184.215.14/hook", OutboundPolicy(allow_insecure_http=True)),
        (
            "https://10.1.2.3/hook",
            OutboundPolicy.from_options(
                allow_insecure_http=False, allow_insecure_smtp=False, networks=("10.0.0.0/8",)
            ),
        ),
    ],
)
def test_destination_policy_allows(url: str, policy: OutboundPolicy) -> None:
    """Loopback over http, public hosts over https, and what the operator allowed by flag are accepted."""
    WebhookChannel(url, new_secret(), policy)


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({}, "no secret is set"),
        ({"LOCKSTEP_WEBHOOK_SECRET": "hunter2"}, "must start with whsec_"),
        ({"LOCKSTEP_WEBHOOK_SECRET": "whsec_!!!"}, "not whsec_ \\+ base64"),
        ({"LOCKSTEP_WEBHOOK_SECRET": "whsec_c2hvcnQ="}, "24 to 64 bytes"),
        ({"LOCKSTEP_WEBHOOK_SECRET_FILE": "/nonexistent/secret"}, "cannot read"),
    ],
)
def test_a_channel_without_a_good_secret_is_refused(env: dict[str, str], problem: str) -> None:
    """A webhook channel without a usable whsec_ secret is refused, saying how to create one."""
    with pytest.raises(InvalidInput, match=problem) as err:
        channel_from_spec("webhook:http://127.0.0.1:9/hook", env=env)
    assert "lockstep webhooks secret" in str(err.value)


def test_the_secret_can_come_from_a_file(tmp_path: Path, hook: Receiver, world: World) -> None:
    """LOCKSTEP_WEBHOOK_SECRET_FILE names a file holding the secret (kept out of the process list)."""
    secret = new_secret()
    (tmp_path / "secret").write_text(secret + "\n")
    channel = channel_from_spec(
        f"webhook:{hook.url}", env={"LOCKSTEP_WEBHOOK_SECRET_FILE": str(tmp_path / "secret")}
    )
    world.start()
    Notifier(world.service, world.approvals, channel).tick()
    Webhook(secret).verify(hook.requests[0].body, hook.requests[0].headers)


def _lockstep(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return clifork.run(
        [sys.executable, "-m", "lockstep", "--db", f"sqlite:///{tmp_path / 'cli.db'}", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_cli_secret_helper_and_serve_refusals(tmp_path: Path) -> None:
    """`lockstep webhooks secret` prints a usable secret; `serve` refuses a webhook without a secret and
    an http:// one off loopback, before serving, with the fix in one line and no traceback."""
    made = _lockstep(tmp_path, "webhooks", "secret")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    Webhook(secret)  # the reference library accepts it
    assert secret.startswith("whsec_")
    base = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    no_secret = _lockstep(
        tmp_path, "serve", "--port", "0", "--notify", "webhook:http://127.0.0.1:9/x", env=base
    )
    assert no_secret.returncode == 2
    assert "lockstep webhooks secret" in no_secret.stderr
    assert "Traceback" not in no_secret.stderr
    insecure = _lockstep(
        tmp_path,
        "serve",
        "--port",
        "0",
        "--notify",
        "webhook:http://93.184.215.14/x",
        env={**base, "LOCKSTEP_WEBHOOK_SECRET": secret},
    )
    assert insecure.returncode == 2
    assert "--allow-insecure-http" in insecure.stderr
    assert "serving" not in insecure.stderr
