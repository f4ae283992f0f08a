"""/v1/webhooks as an attack surface: only a tenant admin subscribes, reads the log or replays; the secret
is in the creation's answer only; another tenant's subscription id is 404; a URL that is not public
HTTPS is 422 and nothing is stored; the CLI creates and lists the same way."""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from anyio.from_thread import start_blocking_portal
from click.testing import CliRunner

from lab import clifork
from lockstep import Engine
from lockstep.api.app import create_app
from lockstep.app.keys import create_key_file
from lockstep.cli.root import cli

from .hookkit import FAIL


class Api:
    """Blocking calls into the app over httpx.ASGITransport (no server, no sockets)."""

    def __init__(self, app: Any, portal: Any) -> None:
        self.portal = portal
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")

    def get(self, url: str, **kw: Any) -> httpx.Response:
        return self.portal.call(functools.partial(self.client.get, url, **kw))

    def post(self, url: str, **kw: Any) -> httpx.Response:
        return self.portal.call(functools.partial(self.client.post, url, **kw))


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Engine, Api, dict[str, str]]]:
    key = tmp_path / "lockstep.key"
    create_key_file(key)
    e = Engine.open(f"sqlite:///{tmp_path}/db.sqlite", keys=key, server_limits={"egress_allow_loopback": 1})
    p = e.service.principals
    keys = {}
    for tenant in ("acme", "other"):
        p.create_tenant(tenant)
        e.service.egress.set(
            tenant, {"allow_hosts": ["127.0.0.1"], "allow_http": True, "allow_loopback": True}, actor="admin"
        )
        for name, role in (("admin", "admin"), ("op", "operator"), ("viewer", "viewer")):
            keys[f"{tenant}/{name}"] = p.create_user(tenant, name, [role], []).api_key
    e.publish(FAIL, tenant="acme")
    with start_blocking_portal() as portal:
        client = Api(create_app(e.service, public_url="http://test"), portal)
        yield e, client, keys
        portal.call(client.client.aclose)
    e.close()


def auth(keys: dict[str, str], who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {keys[who]}"}


def test_attack_only_the_tenants_admin_manages_its_webhooks(
    world: tuple[Engine, Api, dict[str, str]],
) -> None:
    """Operator and viewer: 403 on every route; the admin: 201 with the secret, then lists without it;
    another tenant's admin: 404 on the log and the replay of acme's subscription."""
    engine, client, keys = world
    body = {"url": "http://127.0.0.1:9/hook", "events": ["run.failed"]}
    for who in ("acme/op", "acme/viewer"):
        assert client.post("/v1/webhooks", json=body, headers=auth(keys, who)).status_code == 403
        assert client.get("/v1/webhooks", headers=auth(keys, who)).status_code == 403
    r = client.post("/v1/webhooks", json=body, headers=auth(keys, "acme/admin"))
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["secret"].startswith("whsec_")
    listed = client.get("/v1/webhooks", headers=auth(keys, "acme/admin")).json()
    assert [s["id"] for s in listed] == [made["id"]]
    assert made["secret"] not in str(listed)
    engine.start("failing", tenant="acme")
    log = client.get(f"/v1/webhooks/{made['id']}/deliveries", headers=auth(keys, "acme/admin")).json()
    assert [(d["event"], d["status"]) for d in log] == [("run.failed", "pending")]
    other = auth(keys, "other/admin")
    assert client.get(f"/v1/webhooks/{made['id']}/deliveries", headers=other).status_code == 404
    replay = f"/v1/webhooks/{made['id']}/deliveries/{log[0]['id']}/replay"
    assert client.post(replay, headers=other).status_code == 404
    assert client.post(replay, headers=auth(keys, "acme/op")).status_code == 403
    assert client.post(replay, headers=auth(keys, "acme/admin")).status_code == 200
    assert client.get("/v1/webhooks", headers=other).json() == []


@pytest.mark.parametrize(
    "url", ["http://example.com/h", "https://169.254.169.254/latest/meta-data", "https://10.1.2.3/h"]
)
def test_attack_a_url_off_the_public_internet_is_refused(
    world: tuple[Engine, Api, dict[str, str]], url: str
) -> None:
    """Clear text to a public host, the metadata service, a private address: 422, nothing stored."""
    engine, client, keys = world
    engine.service.webhooks.allow_loopback = False
    r = client.post(
        "/v1/webhooks", json={"url": url, "events": ["run.failed"]}, headers=auth(keys, "acme/admin")
    )
    assert r.status_code == 422, r.text
    assert r.json()["code"] == "url_not_allowed"
    assert engine.service.webhooks.subscriptions("acme") == []


def test_the_cli_creates_lists_and_shows_deliveries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`lockstep webhooks create --tenant T --url U --events ...` prints the secret once; list omits it."""
    key = tmp_path / "lockstep.key"
    create_key_file(key)
    monkeypatch.setenv("LOCKSTEP_KEY_FILE", str(key))
    monkeypatch.setenv("LOCKSTEP_LIMITS", "egress_allow_loopback=1")
    db = f"sqlite:///{tmp_path}/cli.sqlite"
    runner = CliRunner()
    assert runner.invoke(cli, ["--db", db, "tenants", "create", "acme"]).exit_code == 0
    egress = [
        "tenants",
        "egress",
        "set",
        "acme",
        "--allow-host",
        "127.0.0.1",
        "--allow-http",
        "--allow-loopback",
    ]
    assert runner.invoke(cli, ["--db", db, *egress]).exit_code == 0
    args = ["--db", db, "webhooks", "create", "--tenant", "acme", "--url", "http://127.0.0.1:9/h"]
    made = runner.invoke(cli, [*args, "--events", "run.completed,run.failed"])
    assert made.exit_code == 0, made.output
    assert "whsec_" in made.output
    listed = runner.invoke(cli, ["--db", db, "webhooks", "list", "--tenant", "acme"])
    assert listed.exit_code == 0, listed.output
    assert "run.completed" in listed.output
    assert "whsec_" not in listed.output
    bad = clifork.run(
        [sys.executable, "-m", "lockstep", *args, "--events", "run.exploded"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2, bad.stderr
    assert "unknown run.exploded" in bad.stderr
    assert "Traceback" not in bad.stderr
