"""Where an `http` step's request may go, checked in the worker at the moment it connects (SSRF defence).

Each hop (the first request and every redirect) is checked the same way, in this order:
1. the URL against the tenant's egress policy (core/egress.py: allowed prefixes and hosts, HTTPS only
   unless allow_http, no credentials or dot segments);
2. the host is resolved here, once, and *every* address it resolves to is checked (loopback, private,
   link-local, metadata, multicast, unspecified and reserved addresses are refused; an IPv4 address
   inside an IPv6 one is checked as itself);
3. the connection goes to the address that was checked: `PinnedTransport` hands httpx's connection
   pool a network backend that connects to that address whatever name it is asked for, while TLS
   still verifies the certificate against the host name (SNI and hostname checks use the URL's host).
   Nothing resolves the name a second time, so a DNS answer that changes between the check and the
   connect (DNS rebinding) changes nothing.

No proxy is used (trust_env is off: HTTP(S)_PROXY would send the request somewhere unchecked).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpcore
import httpx

from ..core.egress import EgressPolicy, IPAddress, refusal, url_refusal
from .outbound import resolve

__all__ = ["EgressGuard", "EgressRefused", "Hop", "PinnedTransport", "Resolver", "Unresolved"]

# (host, port) -> every address the host resolves to; OSError when it does not resolve.
Resolver = Callable[[str, int], list[IPAddress]]


class EgressRefused(Exception):
    """The policy or the address checks refuse this hop; the message says why (never retried)."""


class Unresolved(Exception):
    """The host did not resolve (perhaps for now: retried)."""


@dataclass(frozen=True)
class Hop:
    url: str
    host: str
    port: int
    addresses: tuple[IPAddress, ...]


class EgressGuard:
    def __init__(self, resolver: Resolver = resolve, *, loopback_ok: bool = False) -> None:
        self.resolver = resolver
        # The server operator's `egress_allow_loopback` (a test switch; a tenant's policy alone cannot).
        self.loopback_ok = loopback_ok

    def vet(self, policy: EgressPolicy, url: str) -> Hop:
        """The checked hop to `url`, or EgressRefused / Unresolved."""
        why = url_refusal(policy, url)
        if why is not None:
            raise EgressRefused(why)
        parts = urlsplit(url)
        host = (parts.hostname or "").rstrip(".")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            addresses = self.resolver(host, port)
        except (OSError, UnicodeError) as exc:
            raise Unresolved(f"{host} does not resolve: {exc}") from None
        if not addresses:
            raise Unresolved(f"{host} resolves to no address")
        for address in addresses:
            why = refusal(address, policy, self.loopback_ok)
            if why is not None:
                raise EgressRefused(
                    f"{host} resolves to a refused address ({why}): requests go only to public addresses "
                    "(SSRF protection)"
                )
        return Hop(url, host, port, tuple(addresses))


class _PinnedBackend(httpcore.NetworkBackend):
    """Connects to the checked addresses (the first that accepts), whatever host httpcore names."""

    def __init__(self, addresses: Iterable[IPAddress]) -> None:
        self.addresses = tuple(addresses)
        self.inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        last: Exception = httpcore.ConnectError(f"{host} has no checked address")
        for address in self.addresses:
            try:
                return self.inner.connect_tcp(str(address), port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        raise last

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:  # pragma: no cover - never a unix socket
        raise httpcore.ConnectError("no unix sockets")

    def sleep(self, seconds: float) -> None:  # pragma: no cover - httpcore's retries are off
        self.inner.sleep(seconds)


class PinnedTransport(httpx.HTTPTransport):
    """httpx's transport with one connection pool whose connections go to the hop's checked addresses
    (TLS verified against the URL's host name with `ssl_context`)."""

    def __init__(self, hop: Hop, ssl_context: ssl.SSLContext) -> None:
        super().__init__(verify=ssl_context, trust_env=False, retries=0)
        # The pool httpx builds connects by name; this one connects to the checked addresses only.
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=1,
            keepalive_expiry=0,
            retries=0,
            network_backend=_PinnedBackend(hop.addresses),
        )
