"""The approval e-mail: SMTP with STARTTLS (`smtp://`) or implicit TLS (`smtps://`), and AUTH when
credentials are configured.

`smtp://[USER@]HOST[:PORT]?from=ADDR[&tls=starttls|none][&cafile=PATH]` and `smtps://...` (port 465).
STARTTLS is required (a server that does not offer it fails the delivery) except to a loopback relay,
where clear text is the default; `tls=none` to any other host needs `--allow-insecure-smtp`. The
certificate is verified against the system's CAs, or `cafile`. The password comes from
LOCKSTEP_SMTP_PASSWORD or the file named by LOCKSTEP_SMTP_PASSWORD_FILE, never from the URL (which is on
the command line and in logs); the user from the URL or LOCKSTEP_SMTP_USER.
"""

from __future__ import annotations

import contextlib
import smtplib
import socket
import ssl
from collections.abc import Mapping
from email.message import EmailMessage
from urllib.parse import parse_qs, unquote, urlsplit

from ..core.canonical import JSONObject
from ..errors import InvalidInput, LockstepError
from .outbound import IPAddress, OutboundPolicy, read_secret, resolve

__all__ = ["SmtpChannel", "smtp_channel"]

PASSWORD_ENV = "LOCKSTEP_SMTP_PASSWORD"  # noqa: S105 - the name of the variable, not a password
USER_ENV = "LOCKSTEP_SMTP_USER"
SPEC_HELP = "smtp://[USER@]HOST[:PORT]?from=ADDR[&tls=starttls|none][&cafile=PATH] or smtps://..."


class _Pinned(smtplib.SMTP):
    """Connects to the address the policy vetted, while TLS still checks the certificate's host name."""

    address = ""

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        self._host = host  # the name TLS verifies (smtplib sets it only when the constructor connects)
        return socket.create_connection((self.address, port), timeout, self.source_address)


class _PinnedSSL(smtplib.SMTP_SSL, _Pinned):
    """SMTP_SSL wraps what _Pinned connected (MRO: SMTP_SSL -> _Pinned -> SMTP)."""


class SmtpChannel:
    def __init__(
        self,
        host: str,
        port: int,
        sender: str,
        *,
        tls: str = "starttls",
        user: str | None = None,
        password: str | None = None,
        cafile: str | None = None,
        policy: OutboundPolicy | None = None,
        timeout: float = 15.0,
    ) -> None:
        if tls not in ("starttls", "implicit", "none"):
            raise InvalidInput(f"tls must be starttls or none, not {tls!r} ({SPEC_HELP})")
        if (user is None) != (password is None):
            raise InvalidInput(
                f"SMTP AUTH needs a user and a password: set {USER_ENV} (or USER@ in the URL) and "
                f"{PASSWORD_ENV} (or {PASSWORD_ENV}_FILE)"
            )
        self.host, self.port, self.sender, self.tls = host, port, sender, tls
        self.user, self.password = user, password
        self.policy = policy or OutboundPolicy()
        self.timeout = timeout
        try:
            self.context = ssl.create_default_context(cafile=cafile)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidInput(f"cannot load the SMTP CA file {cafile}: {exc}") from None
        with contextlib.suppress(OSError):  # not resolvable now: checked again before each delivery
            self._vetted()

    def _vetted(self) -> list[IPAddress]:
        addresses = resolve(self.host, self.port)
        self.policy.vet(
            "SMTP",
            self.host,
            addresses,
            clear_text=self.tls == "none",
            insecure_flag="--allow-insecure-smtp",
            refuse_internal=False,
        )
        return addresses

    def send(self, message: JSONObject) -> None:
        to = message.get("email")
        if not to:
            raise LockstepError(f"no e-mail address for {message['approver']} (lockstep users set-email)")
        mail = EmailMessage()
        mail["From"], mail["To"] = self.sender, to
        mail["Subject"] = f"Approval needed: {message['definition']} / {message['step']}"
        if message.get("message_id"):  # the same for every retry: mail systems drop the duplicate
            mail["Message-ID"] = f"<{message['message_id']}@lockstep>"
        mail.set_content(
            f"{message['details']}\n\nDecide here (log in first): {message['url']}\n"
            f"This link is for you only, works once, and expires at {message['expires_at']}.\n"
        )
        try:
            addresses = self._vetted()
        except InvalidInput as exc:
            raise OSError(str(exc)) from None
        smtp = self._connect(addresses)
        with smtp:
            if self.tls == "starttls":
                smtp.ehlo()
                if not smtp.has_extn("starttls"):
                    raise OSError(f"SMTP server {self.host} does not offer STARTTLS; the link stays unsent")
                smtp.starttls(context=self.context)
            if self.user is not None and self.password is not None:
                smtp.login(self.user, self.password)
            smtp.send_message(mail)

    def _connect(self, addresses: list[IPAddress]) -> _Pinned:
        """Connected (and greeted) over the first vetted address that answers."""
        last: OSError = OSError(f"SMTP host {self.host} has no address")
        for address in addresses:
            smtp: _Pinned = (
                _PinnedSSL(timeout=self.timeout, context=self.context)
                if self.tls == "implicit"
                else _Pinned(timeout=self.timeout)
            )
            smtp.address = str(address)
            try:
                smtp.connect(self.host, self.port)
                return smtp
            except OSError as exc:
                smtp.close()
                last = exc
        raise last


def smtp_channel(spec: str, env: Mapping[str, str], policy: OutboundPolicy) -> SmtpChannel:
    """The channel for an smtp:// or smtps:// spec, with credentials from `env`."""
    u = urlsplit(spec)
    if u.password is not None:
        raise InvalidInput(
            f"put no password in the SMTP URL (it is on the command line and in logs): set {PASSWORD_ENV} "
            f"or {PASSWORD_ENV}_FILE"
        )
    if not u.hostname:
        raise InvalidInput(f"SMTP URL needs a host: {SPEC_HELP}")
    query = {k: v[-1] for k, v in parse_qs(u.query).items()}
    unknown = set(query) - {"from", "tls", "cafile"}
    if unknown:
        raise InvalidInput(f"unknown SMTP URL parameter(s) {', '.join(sorted(unknown))}: {SPEC_HELP}")
    implicit = u.scheme == "smtps"
    port = u.port or (465 if implicit else 25)
    if implicit:
        if "tls" in query:
            raise InvalidInput("smtps:// is implicit TLS: drop the tls parameter")
        tls = "implicit"
    else:
        tls = query.get("tls") or _default_tls(u.hostname, port)
    user = unquote(u.username) if u.username else env.get(USER_ENV) or None
    how = f"set {PASSWORD_ENV} or {PASSWORD_ENV}_FILE"
    password = read_secret(env, PASSWORD_ENV, "the SMTP password", how)
    return SmtpChannel(
        u.hostname,
        port,
        query.get("from", "lockstep@localhost"),
        tls=tls,
        user=user,
        password=password,
        cafile=query.get("cafile"),
        policy=policy,
    )


def _default_tls(host: str, port: int) -> str:
    """Clear text only to a relay on this machine; STARTTLS to every other host."""
    try:
        addresses = resolve(host, port)
    except OSError:
        return "starttls"
    return "none" if all(OutboundPolicy().kind(a) == "loopback" for a in addresses) else "starttls"
