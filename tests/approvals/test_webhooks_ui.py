"""The run-webhooks pages: a tenant admin sees the subscription's deliveries with status and attempts and
replays one (CSRF-checked, audited); an operator is refused (403, audited) and sees no link to them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from lockstep.app.keys import create_key_file

from .conftest import TENANT, FakeClock, World, open_world

FAIL = {"name": "failing", "steps": [{"id": "no", "fail": {"error": "Nope", "message": "no"}}]}


@pytest.fixture
def kworld(tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """The approvals world with a key (a subscription's secret is sealed) and the loopback setting."""
    key = tmp_path / "lockstep.key"
    create_key_file(key)
    monkeypatch.setenv("LOCKSTEP_KEY_FILE", str(key))
    with ExitStack() as stack:
        w = open_world(tmp_path / "db.sqlite", clock, stack, server_limits={"egress_allow_loopback": 1})
        w.service.egress.set(
            TENANT, {"allow_hosts": ["127.0.0.1"], "allow_http": True, "allow_loopback": True}, actor="admin"
        )
        w.publish(FAIL)
        yield w


def test_an_admin_reads_the_delivery_log_and_replays(kworld: World) -> None:
    """The list links to the subscription; its page lists the run.failed delivery (pending, 0 attempts);
    Replay without the CSRF token is refused; with it the flash says it will be sent again."""
    sub = kworld.service.webhooks.subscribe(TENANT, "http://127.0.0.1:9/hook", ["run.failed"], "admin")
    run = kworld.engine.start("failing", tenant=TENANT)
    ui, csrf = kworld.ui("admin")
    listing = ui.get("/ui/webhooks")
    assert listing.status_code == 200
    assert f'href="/ui/webhooks/{sub.id}"' in listing.text
    assert sub.secret not in listing.text
    page = ui.get(f"/ui/webhooks/{sub.id}")
    assert page.status_code == 200
    assert "run.failed" in page.text
    assert run[:12] in page.text
    assert '<td class="status">pending</td>' in page.text
    (d,) = kworld.service.webhooks.deliveries(TENANT, sub.id)
    action = f"/ui/webhooks/{sub.id}/deliveries/{d['id']}/replay"
    assert ui.post(action, data={"csrf": "forged"}).status_code == 403
    r = ui.post(action, data={"csrf": csrf})
    assert r.status_code == 303, r.text
    assert [a["action"] for a in kworld.audit("webhook.replay")] == ["webhook.replay"]


def test_attack_an_operator_cannot_open_or_replay(kworld: World) -> None:
    """An operator: no nav link, 403 on the list and on a subscription, replay refused; audited."""
    sub = kworld.service.webhooks.subscribe(TENANT, "http://127.0.0.1:9/hook", ["run.failed"], "admin")
    ui, csrf = kworld.ui("op")
    assert 'href="/ui/webhooks"' not in ui.get("/ui/approvals").text
    assert ui.get("/ui/webhooks").status_code == 403
    assert ui.get(f"/ui/webhooks/{sub.id}").status_code == 403
    assert ui.post(f"/ui/webhooks/{sub.id}/deliveries/x/replay", data={"csrf": csrf}).status_code == 403
    refused = [a for a in kworld.audit("ui.page") if a["outcome"] == "refused" and a["actor"] == "op"]
    assert len(refused) == 3
