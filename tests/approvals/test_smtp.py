"""Approval e-mail over a real SMTP server on loopback (aiosmtpd): STARTTLS or implicit TLS with a
certificate made in the test, AUTH checked by the server, and the policy against clear text."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from lockstep.errors import InvalidInput
from lockstep.runtime.mail import SmtpChannel
from lockstep.runtime.notify import Notifier, OutboundPolicy, channel_from_spec

from .conftest import TENANT, World
from .tlscert import Cert, make_cert

USER, PASSWORD = "lockstep", "mail-pass-1"  # test credentials
CREDENTIALS = {"LOCKSTEP_SMTP_USER": USER, "LOCKSTEP_SMTP_PASSWORD": PASSWORD}


@dataclass
class MailServer:
    port: int
    mails: list[dict[str, Any]] = field(default_factory=list)
    logins: list[tuple[str, str, bool]] = field(default_factory=list)  # (user, password, over TLS)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _over_tls(server: Any, session: Any) -> bool:
    return session.ssl is not None or server.transport.get_extra_info("ssl_object") is not None


@contextmanager
def mail_server(cert: Cert | None, *, implicit: bool = False, auth: bool = True) -> Iterator[MailServer]:
    box = MailServer(_free_port())

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            box.mails.append(
                {
                    "to": list(envelope.rcpt_tos),
                    "message": message_from_bytes(envelope.content, policy=policy.default),
                    "tls": _over_tls(server, session),
                    "authenticated": bool(session.authenticated),
                }
            )
            return "250 OK"

    def authenticator(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        assert isinstance(data, LoginPassword)
        login, password = data.login.decode(), data.password.decode()
        box.logins.append((login, password, _over_tls(server, session)))
        return AuthResult(success=(login, password) == (USER, PASSWORD), handled=False)

    kwargs: dict[str, Any] = {}
    if auth:  # aiosmtpd counts only STARTTLS as TLS; under implicit TLS the test checks AUTH happened
        strict = not implicit
        kwargs.update(authenticator=authenticator, auth_required=strict, auth_require_tls=strict)
    if cert is not None and implicit:
        kwargs["ssl_context"] = cert.server_context()
    elif cert is not None:
        kwargs.update(tls_context=cert.server_context(), require_starttls=True)
    controller = Controller(Handler(), hostname="127.0.0.1", port=box.port, **kwargs)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()


@pytest.fixture
def cert(tmp_path: Path) -> Cert:
    return make_cert(tmp_path)


def _emails(world: World) -> None:
    for name in ("alice", "bob", "carol", "dave"):
        world.principals.set_email(TENANT, name, f"{name}@example.com")


def _deliver(world: World, channel: Any) -> list[tuple[str, str]]:
    _emails(world)
    world.start()
    Notifier(world.service, world.approvals, channel).tick()
    return world.sql("SELECT status, COALESCE(last_error, '') FROM notifications")


def test_starttls_and_auth_deliver_the_approval_mail(world: World, cert: Cert) -> None:
    """Over STARTTLS (certificate verified against the test's CA) with AUTH: each approver's mail arrives
    over TLS, the server checked the configured credentials, and the link in the mail decides."""
    with mail_server(cert) as box:
        spec = f"smtp://127.0.0.1:{box.port}?from=lockstep@example.com&tls=starttls&cafile={cert.cert}"
        assert _deliver(world, channel_from_spec(spec, env=CREDENTIALS)) == [("done", "")]
    assert sorted(m["to"][0] for m in box.mails) == [
        f"{n}@example.com" for n in ("alice", "bob", "carol", "dave")
    ]
    assert all(m["tls"] and m["authenticated"] for m in box.mails)
    assert box.logins
    assert all(login == (USER, PASSWORD, True) for login in box.logins)
    alice = next(m["message"] for m in box.mails if m["to"] == ["alice@example.com"])
    assert alice["Subject"] == "Approval needed: po / manager-approval"
    assert alice["Message-ID"].startswith("<msg_")
    token = alice.get_content().split("/approve/", 1)[1].split()[0]
    assert world.decide(token, "alice").status_code == 200


def test_implicit_tls_with_smtps(world: World, cert: Cert) -> None:
    """smtps:// speaks TLS from the first byte (port 465 style); the mail arrives over TLS, authenticated."""
    with mail_server(cert, implicit=True) as box:
        spec = f"smtps://127.0.0.1:{box.port}?from=lockstep@example.com&cafile={cert.cert}"
        assert _deliver(world, channel_from_spec(spec, env=CREDENTIALS)) == [("done", "")]
    assert len(box.mails) == 4
    assert all(m["tls"] and m["authenticated"] for m in box.mails)


def test_wrong_password_delivers_nothing(world: World, cert: Cert) -> None:
    """The server refuses wrong credentials: no mail, the delivery is retried later, the password is not
    in the recorded error."""
    with mail_server(cert) as box:
        spec = f"smtp://127.0.0.1:{box.port}?from=lockstep@example.com&tls=starttls&cafile={cert.cert}"
        channel = channel_from_spec(spec, env={**CREDENTIALS, "LOCKSTEP_SMTP_PASSWORD": "wrong-pass"})
        ((status, error),) = _deliver(world, channel)
    assert box.mails == []
    assert set(box.logins) == {(USER, "wrong-pass", True)}  # PLAIN, then LOGIN: both refused
    assert status == "ready"
    assert "SMTPAuthenticationError" in error
    assert "wrong-pass" not in error


def test_server_without_starttls_gets_no_credentials_and_no_mail(world: World) -> None:
    """A server that does not offer STARTTLS (a downgrade) fails the delivery before AUTH or DATA."""
    with mail_server(None, auth=False) as box:
        spec = f"smtp://127.0.0.1:{box.port}?from=lockstep@example.com&tls=starttls"
        ((status, error),) = _deliver(world, channel_from_spec(spec, env=CREDENTIALS))
    assert (box.mails, box.logins) == ([], [])
    assert status == "ready"
    assert "does not offer STARTTLS" in error


def test_a_certificate_that_does_not_verify_fails(world: World, cert: Cert, tmp_path: Path) -> None:
    """Without the test CA (cafile), the self-signed certificate does not verify: nothing is sent."""
    with mail_server(cert) as box:
        spec = f"smtp://127.0.0.1:{box.port}?from=lockstep@example.com&tls=starttls"
        ((status, error),) = _deliver(world, channel_from_spec(spec, env=CREDENTIALS))
    assert (box.mails, box.logins) == ([], [])
    assert status == "ready"
    assert "CERTIFICATE_VERIFY_FAILED" in error


def test_clear_text_to_a_loopback_relay(world: World) -> None:
    """A relay on loopback gets clear text by default (it never leaves the machine)."""
    with mail_server(None, auth=False) as box:
        spec = f"smtp://localhost:{box.port}?from=lockstep@example.com"
        assert _deliver(world, channel_from_spec(spec, env={})) == [("done", "")]
    assert len(box.mails) == 4
    assert not any(m["tls"] for m in box.mails)


def test_password_from_a_file(tmp_path: Path) -> None:
    """LOCKSTEP_SMTP_PASSWORD_FILE names a file holding the password (kept out of the process list)."""
    (tmp_path / "pw").write_text(PASSWORD + "\n")
    env = {"LOCKSTEP_SMTP_USER": USER, "LOCKSTEP_SMTP_PASSWORD_FILE": str(tmp_path / "pw")}
    channel = channel_from_spec("smtp://127.0.0.1:2525?from=a@example.com", env=env)
    assert isinstance(channel, SmtpChannel)
    assert (channel.user, channel.password) == (USER, PASSWORD)


@pytest.mark.parametrize(
    ("spec", "env", "policy", "problem"),
    [
        (
            "smtp://93.184.215.14:25?from=a@example.com&tls=none",
            {},
            OutboundPolicy(),
            "--allow-insecure-smtp",
        ),
        ("smtp://10.0.0.25:25?from=a@example.com&tls=none", {}, OutboundPolicy(), "--allow-insecure-smtp"),
        (
            "smtp://u:secret@93.184.215.14?from=a@example.com",
            {},
            OutboundPolicy(),
            "no password in the SMTP URL",
        ),
        (
            "smtp://93.184.215.14?from=a@example.com",
            {"LOCKSTEP_SMTP_USER": "u"},
            OutboundPolicy(),
            "needs a user and a password",
        ),
        (
            "smtp://93.184.215.14?from=a@example.com&tls=maybe",
            {},
            OutboundPolicy(),
            "tls must be starttls or none",
        ),
        (
            "smtp://93.184.215.14?from=a@example.com&password=x",
            {},
            OutboundPolicy(),
            "unknown SMTP URL parameter",
        ),
        ("smtps://93.184.215.14?from=a@example.com&tls=none", {}, OutboundPolicy(), "implicit TLS"),
    ],
)
def test_smtp_configuration_refused(
    spec: str, env: dict[str, str], policy: OutboundPolicy, problem: str
) -> None:
    """Clear text off loopback, a password in the URL, half credentials and unknown options are refused."""
    with pytest.raises(InvalidInput, match=problem):
        channel_from_spec(spec, policy, env=env)


def test_starttls_is_the_default_off_loopback_and_the_flag_allows_clear_text() -> None:
    """smtp:// to another host means STARTTLS; tls=none there passes only with --allow-insecure-smtp."""
    channel = channel_from_spec("smtp://93.184.215.14:587?from=a@example.com", env={})
    assert isinstance(channel, SmtpChannel)
    assert channel.tls == "starttls"
    allowed = OutboundPolicy(allow_insecure_smtp=True)
    channel = channel_from_spec("smtp://93.184.215.14:25?from=a@example.com&tls=none", allowed, env={})
    assert isinstance(channel, SmtpChannel)
    assert channel.tls == "none"
