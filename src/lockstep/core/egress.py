"""A tenant's egress policy: where its `http` steps may send requests (pure: parsing, URL and address checks).

The policy is a tenant admin's, and it is the whole of what the tenant may reach; the default (no
policy) allows nothing. A URL passes when it matches an allowed URL prefix or an allowed host:

- `allow: ["https://api.example.com/v1/"]`: same scheme, host and port, and a path under the prefix's
  (a prefix ends at a path segment: `/v1` admits `/v1` and `/v1/...`, never `/v10`);
- `allow_hosts: ["partner.example", "*.example.org"]`: that host (or any subdomain of the `*.` form)
  on its scheme's default port or any port named in the URL;
- HTTPS only, unless the policy says `allow_http: true`;
- never a URL with credentials (`user:pass@`), a fragment, a backslash, control characters or white
  space, or dot segments (`/a/../b`, also percent-encoded) that could climb out of an allowed prefix.

Addresses are checked after DNS resolution (by the worker: runtime/egress.py), with `refusal` here:
loopback, private, link-local (with the cloud metadata services 169.254.169.254 and fd00:ec2::254),
unique-local, shared, reserved, multicast and unspecified addresses are refused whatever the policy
says; loopback alone may pass, and only when the policy says `allow_loopback: true` *and* the server's
operator set `egress_allow_loopback=1` (a test fixture's switch: a tenant admin cannot set it alone).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import SplitResult, unquote, urlsplit

from .canonical import JSONObject

__all__ = [
    "MAX_RULES",
    "NO_POLICY",
    "EgressPolicy",
    "IPAddress",
    "PolicyError",
    "parse_policy",
    "refusal",
    "url_refusal",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_RULES = 100  # allowed prefixes and hosts together, per tenant
MAX_RULE_CHARS = 2048
_HOST_RE = re.compile(
    r"^(\*\.)?(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$"
)
_BAD_CHARS = re.compile(r"[\x00-\x20\x7f\\]")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
METADATA = (ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254"))


class PolicyError(ValueError):
    """A policy that cannot be stored: the message says which entry and how to fix it."""


@dataclass(frozen=True)
class EgressPolicy:
    allow: tuple[str, ...] = ()
    allow_hosts: tuple[str, ...] = ()
    allow_http: bool = False
    allow_loopback: bool = False

    @property
    def empty(self) -> bool:
        return not self.allow and not self.allow_hosts

    def to_json(self) -> JSONObject:
        return {
            "allow": list(self.allow),
            "allow_hosts": list(self.allow_hosts),
            "allow_http": self.allow_http,
            "allow_loopback": self.allow_loopback,
        }


NO_POLICY = EgressPolicy()


def parse_policy(raw: Mapping[str, object]) -> EgressPolicy:
    """The policy of a stored or submitted document; PolicyError names the first bad entry."""
    unknown = sorted(set(raw) - {"allow", "allow_hosts", "allow_http", "allow_loopback"})
    if unknown:
        raise PolicyError(
            f"unknown egress policy field(s) {', '.join(unknown)}: the fields are allow (URL prefixes), "
            "allow_hosts, allow_http and allow_loopback"
        )
    allow = _strings(raw.get("allow", []), "allow")
    hosts = _strings(raw.get("allow_hosts", []), "allow_hosts")
    if len(allow) + len(hosts) > MAX_RULES:
        raise PolicyError(f"an egress policy holds at most {MAX_RULES} prefixes and hosts together")
    flags = {}
    for name in ("allow_http", "allow_loopback"):
        value = raw.get(name, False)
        if not isinstance(value, bool):
            raise PolicyError(f"{name} must be true or false")
        flags[name] = value
    prefixes = []
    for prefix in allow:
        parts, why = _split(prefix)
        if parts is None:
            raise PolicyError(f"allowed prefix {prefix!r}: {why}")
        if parts.query:
            raise PolicyError(f"allowed prefix {prefix!r}: a prefix has no query (?...); end it at a path")
        prefixes.append(prefix)
    names = []
    for host in hosts:
        h = host.strip().lower().rstrip(".")
        if not _HOST_RE.match(h) and not _ip_literal(h):
            raise PolicyError(
                f"allowed host {host!r} is not a host name: give a name such as partner.example or "
                "*.example.org (no scheme, port or path: use `allow` for those)"
            )
        names.append(h)
    return EgressPolicy(
        tuple(dict.fromkeys(prefixes)),
        tuple(dict.fromkeys(names)),
        flags["allow_http"],
        flags["allow_loopback"],
    )


def _strings(value: object, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise PolicyError(f"{name} must be a list of non-empty strings")
    too_long = [v for v in value if len(v) > MAX_RULE_CHARS]
    if too_long:
        raise PolicyError(f"{name}: an entry is longer than {MAX_RULE_CHARS} characters")
    return list(value)


def _ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _split(url: str) -> tuple[SplitResult | None, str]:
    """The parts of an absolute http(s) URL, or None and why it is refused."""
    if _BAD_CHARS.search(url):
        return None, "it holds white space, a control character or a backslash"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return None, f"it is not a URL ({exc})"
    if parts.scheme not in ("https", "http"):
        return None, "it must start with https:// (or http:// where the policy allows it)"
    if not parts.hostname:
        return None, "it names no host"
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        return None, "it holds credentials (user:password@): give them as a secret (auth: {secret: NAME})"
    if parts.fragment or "#" in url:
        return None, "it holds a fragment (#...)"
    if port == 0:
        return None, "port 0 is not a port"
    segments = unquote(unquote(parts.path)).split("/")
    if any(s in (".", "..") for s in segments):
        return None, "its path holds a dot segment (. or ..), which could leave an allowed prefix"
    return parts, ""


def _port(parts: SplitResult) -> int:
    return parts.port or (443 if parts.scheme == "https" else 80)


def _normal(parts: SplitResult) -> str:
    host = parts.hostname or ""
    shown = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{shown}:{_port(parts)}{parts.path or '/'}"


def _host_matches(rule: str, host: str) -> bool:
    if rule.startswith("*."):
        return host.endswith(rule[1:]) and len(host) > len(rule) - 1
    return host == rule.strip("[]")


def url_refusal(policy: EgressPolicy, url: str) -> str | None:
    """Why `url` may not be requested under `policy` (None: it may, its addresses still to be checked)."""
    parts, why = _split(url)
    if parts is None:
        return f"the URL is refused: {why}"
    if parts.scheme == "http" and not policy.allow_http:
        return "the URL is http:// and the tenant's egress policy allows HTTPS only (allow_http is off)"
    if policy.empty:
        return (
            "the tenant has no egress policy, so no URL is allowed: a tenant admin allows URL prefixes or "
            "hosts with `lockstep tenants egress set TENANT --allow https://api.example.com/`"
        )
    host = (parts.hostname or "").lower().rstrip(".")
    for rule in policy.allow_hosts:
        if _host_matches(rule, host):
            return None
    normal = _normal(parts._replace(netloc=parts.netloc.lower()))
    for given in policy.allow:
        prefix = _normal(urlsplit(given))
        if normal == prefix or normal.startswith(prefix if prefix.endswith("/") else prefix + "/"):
            return None
    return (
        f"{parts.scheme}://{parts.netloc}{parts.path} is outside the tenant's egress policy (allowed: "
        + ", ".join([*policy.allow, *policy.allow_hosts])
        + ")"
    )


def refusal(address: IPAddress, policy: EgressPolicy, loopback_ok: bool) -> str | None:
    """Why a connection to `address` is refused (None: a public address, or loopback where both the
    policy and the server allow it). `loopback_ok`: the server's `egress_allow_loopback` setting."""
    if isinstance(address, ipaddress.IPv6Address):
        # An IPv4 address inside an IPv6 one reaches that IPv4 host: ::ffff:a.b.c.d (mapped), 6to4
        # 2002:a.b.c.d::, and NAT64 64:ff9b::a.b.c.d. Check the IPv4 address it carries.
        inner = address.ipv4_mapped or address.sixtofour
        if inner is None and address in _NAT64:
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if inner is not None:
            address = inner
    if address in METADATA:
        return f"{address} is a cloud metadata service"
    if address.is_loopback:
        if policy.allow_loopback and loopback_ok:
            return None
        return f"{address} is a loopback address"
    if address.is_unspecified:
        return f"{address} is the unspecified address"
    if address.is_multicast:
        return f"{address} is a multicast address"
    if address.is_link_local:
        return f"{address} is a link-local address"
    if address.is_private or not address.is_global:
        return f"{address} is a private or reserved address"
    return None
