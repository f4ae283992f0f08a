"""Attacks on the http step's egress (SSRF): each one is refused, the server never sees it, and the
refusal is audited. On both backends (the policy is stored per tenant)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from httpworld import TENANT, World, backend_url, definition, open_world  # tests/http: on sys.path

from lockstep.core.definition import HTTP_ACTIVITY
from lockstep.errors import Refused


def _refused(w: World, doc: dict, why: str) -> dict:
    shown = w.run(doc)
    assert shown["status"] == "failed", shown
    assert shown["error"]["code"] == "EgressRefused", shown["error"]
    assert why in shown["error"]["message"], shown["error"]["message"]
    rows = w.audit("egress.refuse")
    assert rows, "the refusal is audited"
    assert rows[-1]["outcome"] == "refused"
    assert rows[-1]["detail"]["run"] == shown["run_id"]
    return shown


def _resolve_to(w: World, table: dict[str, str]) -> None:
    """Patch the worker's resolver seam: these names resolve to these addresses, others fail."""
    assert w.worker is not None
    guard = w.worker.builtins[HTTP_ACTIVITY].guard  # type: ignore[attr-defined]

    def resolve(host: str, _port: int) -> list:
        if host in table:
            return [ipaddress.ip_address(table[host])]
        try:
            return [ipaddress.ip_address(host.strip("[]"))]
        except ValueError:
            raise OSError(f"{host}: unknown in this test") from None

    guard.resolver = resolve


@pytest.fixture
def strict(backend: str, tmp_path: Path, key_file: Path, request: pytest.FixtureRequest) -> Iterator[World]:
    """A server whose operator did not set egress_allow_loopback (every production server)."""
    with ExitStack() as stack:
        w = open_world(backend_url(backend, tmp_path, request), key_file, stack, loopback=False)
        w.start_worker()
        try:
            yield w
        finally:
            if w.worker is not None:
                w.worker.stop()


def test_loopback_is_refused_without_the_servers_switch_even_when_the_policy_allows_it(strict: World) -> None:
    """A tenant admin cannot turn on allow_loopback; a policy naming 127.0.0.1 still cannot reach it."""
    with pytest.raises(Refused, match="egress_allow_loopback=1"):
        strict.allow_loopback()
    strict.service.egress.set(TENANT, {"allow": [strict.server.url("/")], "allow_http": True}, actor="admin")
    _refused(strict, definition("lo", {"url": strict.server.url("/ok")}), "127.0.0.1 is a loopback address")
    assert strict.server.seen == []


def test_the_policy_flag_alone_does_not_open_loopback_on_a_worker_without_the_switch(world: World) -> None:
    """Stored allow_loopback is honoured only by a worker whose server setting allows it too."""
    world.allow_loopback()
    assert world.worker is not None
    world.worker.builtins[HTTP_ACTIVITY].guard.loopback_ok = False  # type: ignore[attr-defined]
    _refused(world, definition("lo2", {"url": world.server.url("/ok")}), "loopback")
    assert world.server.seen == []


@pytest.mark.parametrize("address", ["169.254.169.254", "[fd00:ec2::254]", "[::ffff:169.254.169.254]"])
def test_the_cloud_metadata_service_is_refused_whatever_the_policy(world: World, address: str) -> None:
    """169.254.169.254 (and its IPv6 and mapped forms) is refused even when the policy names it."""
    host = address.strip("[]")
    world.service.egress.set(TENANT, {"allow_hosts": [host], "allow_http": True}, actor="admin")
    doc = definition("meta", {"url": f"http://{address}/latest/meta-data/", "retry": {"max_attempts": 1}})
    _refused(world, doc, "resolves to")


def test_a_redirect_to_a_private_address_is_refused_at_that_hop(world: World) -> None:
    """The allowed server redirects to 10.0.0.1 and to the metadata service: each hop is checked."""
    world.allow_loopback(allow_hosts=["10.0.0.1", "169.254.169.254"])
    for target in ("http://10.0.0.1/admin", "http://169.254.169.254/latest/meta-data/"):
        url = world.server.url(f"/redirect?to={target}")
        _refused(world, definition(f"redir-{len(world.server.seen)}", {"url": url}), "resolves to")
    assert [s.path.split("?")[0] for s in world.server.seen] == ["/redirect", "/redirect"]


def test_a_redirect_outside_the_allow_list_is_refused(world: World) -> None:
    """A redirect to a host the policy does not allow is refused like a first request to it."""
    world.allow_loopback()
    url = world.server.url("/redirect?to=https://elsewhere.example/")
    _refused(world, definition("away", {"url": url}), "outside the tenant's egress policy")


def test_a_name_that_resolves_to_loopback_is_refused(world: World) -> None:
    """`localhost` (resolved by the system: 127.0.0.1) is refused when loopback is not allowed."""
    policy = {"allow_hosts": ["localhost"], "allow_http": True}
    world.service.egress.set(TENANT, policy, actor="admin")
    _refused(world, definition("name", {"url": world.server.url("/ok", host="localhost")}), "loopback")
    assert world.server.seen == []


def test_a_public_looking_name_that_resolves_to_a_private_address_is_refused(world: World) -> None:
    """A name resolving to 10.1.2.3 or 192.168.0.1 (the resolver seam) is refused after resolution."""
    world.service.egress.set(TENANT, {"allow_hosts": ["*.partner.example"]}, actor="admin")
    _resolve_to(world, {"a.partner.example": "10.1.2.3", "b.partner.example": "192.168.0.1"})
    for host in ("a", "b"):
        doc = definition(f"private-{host}", {"url": f"https://{host}.partner.example/x"})
        _refused(world, doc, "private or reserved address")


def test_the_connection_goes_to_the_checked_address_never_a_second_lookup(world: World) -> None:
    """`rebind.example` resolves (once, through the seam) to the loopback server: the request reaches
    it although the system resolver knows no such name, so nothing resolved it again."""
    world.allow_loopback(allow_hosts=["rebind.example"])
    _resolve_to(world, {"rebind.example": "127.0.0.1"})
    shown = world.run(definition("pinned", {"url": world.server.url("/ok", host="rebind.example")}))
    assert shown["status"] == "completed", shown
    assert world.server.seen[0].headers["Host"] == f"rebind.example:{world.server.port}"


def test_http_without_allow_http_and_urls_outside_the_list_are_refused(world: World) -> None:
    """http:// needs allow_http; a URL outside the prefixes, with credentials or dot segments is refused."""
    world.service.egress.set(
        TENANT, {"allow": [world.server.url("/ok")], "allow_loopback": True}, actor="admin"
    )
    _refused(world, definition("clear", {"url": world.server.url("/ok")}), "HTTPS only")
    world.allow_loopback()
    world.service.egress.set(
        TENANT,
        {"allow": [world.server.url("/ok")], "allow_http": True, "allow_loopback": True},
        actor="admin",
    )
    port = world.server.port
    cases = [
        (world.server.url("/status/200"), "outside"),
        (world.server.url("/okx"), "outside"),
        (f"http://u:p@127.0.0.1:{port}/ok", "credentials"),
        (world.server.url("/ok/../status/200"), "dot segment"),
        (world.server.url("/ok/%2e%2e/status/200"), "dot segment"),
    ]
    for i, (url, why) in enumerate(cases):
        _refused(world, definition(f"out-{i}", {"url": url, "retry": {"max_attempts": 1}}), why)
    assert world.server.seen == []


def test_no_policy_allows_nothing(world: World) -> None:
    """A tenant without a policy reaches nothing, and publishing says so (a warning, not a refusal)."""
    doc = definition("none", {"url": "https://api.example.com/x"})
    published = world.engine.publish(doc, tenant=TENANT)
    assert any("no egress policy" in w["message"] for w in published["warnings"]), published
    _refused(world, doc, "no egress policy")


def test_another_tenants_policy_does_not_apply(world: World) -> None:
    """Tenant other's run is checked against other's policy (none), not acme's."""
    world.allow_loopback()
    shown = world.run(definition("mine", {"url": world.server.url("/ok")}), tenant="other")
    assert shown["error"]["code"] == "EgressRefused"
    assert world.server.seen == []
