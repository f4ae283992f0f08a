"""Where the notifier may connect: the destination policy shared by the webhook and SMTP channels.

Approval messages carry working links, so the operator decides where they may go and how:
- a destination is vetted by the addresses its host resolves to, at startup and again before every
  connection (the connection then goes to the vetted address, so a DNS answer cannot change between
  the check and the connect);
- loopback is always allowed; public (globally routable) addresses are allowed; every other address
  (private networks, link-local and cloud metadata such as 169.254.169.254 or fd00:ec2::254, unique
  local fc00::/7, shared and reserved ranges, multicast, unspecified) is refused unless the operator
  names its network with `--allow-webhook-network CIDR`;
- clear text (http://, SMTP without TLS) is allowed only to loopback, unless the operator says
  `--allow-insecure-http` / `--allow-insecure-smtp`.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..app.resolve import resolve
from ..errors import InvalidInput

__all__ = ["IPAddress", "OutboundPolicy", "read_secret", "resolve"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class OutboundPolicy:
    """The operator's exceptions to the defaults above (all off by default)."""

    allow_insecure_http: bool = False
    allow_insecure_smtp: bool = False
    allowed_networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def from_options(
        cls, *, allow_insecure_http: bool, allow_insecure_smtp: bool, networks: tuple[str, ...]
    ) -> OutboundPolicy:
        parsed = []
        for n in networks:
            try:
                parsed.append(ipaddress.ip_network(n, strict=False))
            except ValueError:
                raise InvalidInput(
                    f"--allow-webhook-network {n!r} is not a network: give a CIDR such as 10.1.2.0/24"
                ) from None
        return cls(allow_insecure_http, allow_insecure_smtp, tuple(parsed))

    def kind(self, address: IPAddress) -> str:
        """loopback, allowed (named by the operator), public, or internal (refused)."""
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # ::ffff:169.254.169.254 is 169.254.169.254
        if address.is_loopback:
            return "loopback"
        if any(address in net for net in self.allowed_networks):
            return "allowed"
        if address.is_global and not address.is_multicast:
            return "public"
        return "internal"

    def vet(
        self,
        what: str,
        host: str,
        addresses: list[IPAddress],
        *,
        clear_text: bool,
        insecure_flag: str,
        refuse_internal: bool = True,
    ) -> None:
        """Refuse (InvalidInput, with the fix) unless every address of `host` may receive `what`;
        `clear_text` sends pass only to loopback unless the operator gave `insecure_flag`. SMTP passes
        `refuse_internal=False`: a mail relay on the private network is the usual case, and SMTP is no
        way to reach a metadata service's HTTP API."""
        insecure_ok = {
            "--allow-insecure-http": self.allow_insecure_http,
            "--allow-insecure-smtp": self.allow_insecure_smtp,
        }[insecure_flag]
        for address in addresses:
            kind = self.kind(address)
            if kind == "internal" and refuse_internal:
                raise InvalidInput(
                    f"{what} host {host} resolves to {address}, an internal address (private, link-local "
                    f"or cloud metadata: not a public host): to send there on purpose, start with "
                    f"--allow-webhook-network {address}/{address.max_prefixlen}"
                )
            if clear_text and kind != "loopback" and not insecure_ok:
                raise InvalidInput(
                    f"{what} to {host} ({address}) would carry working approval links in clear text: use "
                    f"TLS, a receiver on loopback, or start with {insecure_flag} (on a network you trust)"
                )


def read_secret(env: Mapping[str, str], name: str, what: str, how: str) -> str | None:
    """A secret from env var `name` or from the file named by `name`_FILE (never a command-line argument,
    which every user of the machine can read in the process list). None when neither is set."""
    value, path = env.get(name), env.get(f"{name}_FILE")
    if value and path:
        raise InvalidInput(f"set {name} or {name}_FILE, not both ({what})")
    if path:
        try:
            with open(os.path.expanduser(path), encoding="utf-8") as f:
                value = f.read().strip()
        except OSError as exc:
            raise InvalidInput(f"cannot read {what} from {name}_FILE={path}: {exc.strerror}; {how}") from None
        if not value:
            raise InvalidInput(f"{name}_FILE={path} is empty ({what}); {how}")
    return value or None
