"""The scheduler pauses a schedule by itself when its schedule can no longer be read (its time zone gone
from the tz database after an upgrade, or its stored cron damaged): it records a refused slot with why,
stops firing, audits `schedule.pause` with no actor, and every view shows it paused with the reason and
no person named; on both backends."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime

import httpx
import pytest

from lab import clifork
from lockstep.api.app import create_app
from lockstep.app.schedules import paused_since
from lockstep.app.service import Service
from lockstep.core.timeutil import iso

from .conftest import NAP, FakeClock, Raw

START = datetime(2025, 6, 2, 12, 0, 30, tzinfo=UTC)
GONE_ZONE = "Europe/Atlantis"  # not in any tz database: what a zone removed by an upgrade looks like


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def acme(svc: Service) -> Service:
    svc.principals.create_tenant("acme")
    svc.publish("acme", NAP)
    return svc


@pytest.mark.parametrize(
    ("column", "damage", "says"),
    [("timezone", GONE_ZONE, GONE_ZONE), ("cron", "61 * * * *", "61")],
)
def test_an_unreadable_schedule_is_paused_by_the_scheduler(
    acme: Service, clock: FakeClock, raw: Raw, column: str, damage: str, says: str
) -> None:
    """Until its slot it is shown active with no fire times and what cannot be read; at the slot the
    pass pauses it (paused_at now, paused_by None, the reason naming what cannot be read), records the
    slot as refused with that reason, audits schedule.pause with no actor, starts no run, and no later
    pass fires or pauses it again."""
    acme.schedules.create("acme", "nightly", definition="nap", cron="* * * * *", timezone="Europe/Berlin")
    raw.execute(f"UPDATE schedules SET {column} = ? WHERE name = ?", damage, "nightly")
    before = acme.schedules.show("acme", "nightly")  # until its slot: active, shown with what is wrong
    assert (before.status, before.next_fire_times) == ("active", [])
    assert f"can no longer be read: {'unknown time zone' if column == 'timezone' else 'cron'}" in (
        before.description
    )
    clock.advance(minutes=1)
    assert acme.fire_due_schedules() == 1
    shown = acme.schedules.show("acme", "nightly")
    assert shown.status == "paused"
    assert shown.paused_at == iso(clock())
    assert shown.paused_by is None
    reason = shown.paused_reason or ""
    assert reason.startswith("its schedule can no longer be read: ")
    assert says in reason
    assert shown.next_fire_at is None
    assert shown.next_fire_times == []
    slot = shown.recent[0]
    assert (slot.slot, slot.outcome, slot.run_id, slot.reason) == (
        "2025-06-02T12:01:00.000Z",
        "refused",
        None,
        reason,
    )
    audited = [e for e in acme.audit.export("acme") if e.action == "schedule.pause"]
    assert len(audited) == 1
    assert audited[0].actor is None
    assert audited[0].target == "nightly"
    assert (audited[0].outcome, audited[0].detail.get("reason")) == ("ok", reason)
    assert acme.runs("acme", limit=10) == []
    clock.advance(minutes=5)
    assert acme.fire_due_schedules() == 0
    assert len(acme.schedules.show("acme", "nightly").recent) == 1
    assert paused_since(shown) == f"paused since {iso(clock.now.replace(minute=1))}: {reason}"


def test_a_schedule_paused_by_the_scheduler_is_fixed_by_an_update_and_a_resume(
    acme: Service, clock: FakeClock, raw: Raw
) -> None:
    """Given a zone that reads again (`update`), `resume` fires it from its next slot, audited as the
    person who resumed it."""
    acme.schedules.create("acme", "nightly", definition="nap", cron="* * * * *", timezone="Europe/Berlin")
    raw.execute("UPDATE schedules SET timezone = ? WHERE name = ?", GONE_ZONE, "nightly")
    clock.advance(minutes=1)
    acme.fire_due_schedules()
    acme.schedules.update("acme", "nightly", timezone="UTC", actor="bob")
    resumed = acme.schedules.resume("acme", "nightly", actor="bob")
    assert (resumed.status, resumed.paused_by, resumed.next_fire_at) == (
        "active",
        None,
        "2025-06-02T12:02:00.000Z",
    )
    clock.advance(minutes=1)
    assert acme.fire_due_schedules() == 1
    assert [r.start_key for r in acme.runs("acme", limit=10)] == ["nightly:2025-06-02T12:02:00.000Z"]
    resume = next(e for e in acme.audit.export("acme") if e.action == "schedule.resume")
    assert resume.actor == "bob"


def test_the_api_and_the_cli_show_it_paused_by_the_scheduler(
    acme: Service, clock: FakeClock, raw: Raw, db_url: str
) -> None:
    """GET /v1/schedules/{name} answers paused with paused_by null and the reason; `lockstep schedules
    show` prints `paused since ...: <reason>` naming no person."""
    acme.schedules.create("acme", "nightly", definition="nap", cron="* * * * *", timezone="Europe/Berlin")
    raw.execute("UPDATE schedules SET timezone = ? WHERE name = ?", GONE_ZONE, "nightly")
    clock.advance(minutes=1)
    acme.fire_due_schedules()
    key = acme.principals.create_user("acme", "vera", ["viewer"], []).api_key
    one, listed = asyncio.run(_get(acme, key, "/v1/schedules/nightly", "/v1/schedules"))
    assert one.status_code == 200, one.text
    body = one.json()
    assert (body["status"], body["paused_by"], body["next_fire_times"]) == ("paused", None, [])
    assert GONE_ZONE in body["paused_reason"]
    assert GONE_ZONE in body["description"]  # said, not crashed on: the zone cannot be read
    assert listed.status_code == 200, listed.text
    assert [v["status"] for v in listed.json()] == ["paused"]  # one unreadable schedule breaks no list
    cli = [sys.executable, "-m", "lockstep", "--db", db_url, "--tenant", "acme", "schedules", "show"]
    shown = clifork.run([*cli, "nightly"], capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if x.startswith("paused"))
    assert line.startswith(f"paused since {body['paused_at']}: its schedule can no longer be read")
    assert " by " not in line.split(":")[0]  # nobody named: the scheduler paused it
    as_json = clifork.run(
        [*cli, "nightly", "--json"], capture_output=True, text=True, timeout=60, check=False
    )
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["paused_by"] is None


async def _get(svc: Service, key: str, *paths: str) -> list[httpx.Response]:
    """GET each path from the app over `svc`, in process, as the user of `key`."""
    transport = httpx.ASGITransport(app=create_app(svc))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        return [await http.get(p, headers={"Authorization": f"Bearer {key}"}) for p in paths]
