"""Schedules through the service on both backends, with a fake clock: a slot starts one run (start key
`<name>:<slot>`, actor `schedule:<name>`), however often the pass runs; the overlap and catch-up
policies; pause, resume, delete and trigger, each audited; and every bad request is one clear error
that writes nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from lockstep.app.service import Service
from lockstep.core.timeutil import iso
from lockstep.errors import Conflict, InvalidInput, NotFound, Refused
from lockstep.store import Store

from .conftest import ORDER, FakeClock, Raw

NAP: dict[str, Any] = {"name": "nap", "steps": [{"id": "nap", "wait": "1h"}]}
QUICK: dict[str, Any] = {"name": "quick", "steps": [{"id": "blink", "wait": "1s"}]}
START = datetime(2025, 6, 2, 12, 0, 30, tzinfo=UTC)  # a Monday


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def acme(svc: Service) -> Service:
    """Tenant acme with nap, quick and order published; schedules may fire every minute (the default)."""
    svc.principals.create_tenant("acme")
    for d in (NAP, QUICK, ORDER):
        svc.publish("acme", d)
    return svc


def runs_of(svc: Service, tenant: str = "acme") -> list[Any]:
    return svc.runs(tenant, limit=1000)


def audit_actions(svc: Service, tenant: str = "acme") -> list[str]:
    """The schedule.* actions of the tenant's audit log, oldest first."""
    return [e.action for e in reversed(list(svc.audit.export(tenant))) if e.action.startswith("schedule.")]


def test_a_slot_starts_one_run_with_its_start_key_and_actor(acme: Service, clock: FakeClock) -> None:
    """At 12:01 the every-minute schedule starts one run keyed `hourly:<slot>` by `schedule:hourly`;
    more passes at the same time, or later in the same minute, start nothing more."""
    view = acme.schedules.create("acme", "hourly", definition="nap", cron="* * * * *", actor="alice")
    assert view.next_fire_at == "2025-06-02T12:01:00.000Z"
    assert view.next_fire_times[:2] == ["2025-06-02T12:01:00.000Z", "2025-06-02T12:02:00.000Z"]
    assert acme.fire_due_schedules() == 0  # nothing due yet
    clock.advance(seconds=30)
    assert acme.fire_due_schedules() == 1
    assert acme.fire_due_schedules() == 0
    clock.advance(seconds=20)
    assert acme.fire_due_schedules() == 0
    (run,) = runs_of(acme)
    assert run.start_key == "hourly:2025-06-02T12:01:00.000Z"
    first = acme.events("acme", run.run_id)[0]
    assert first.type == "RunStarted"
    assert first.data["actor"] == "schedule:hourly"
    shown = acme.schedules.show("acme", "hourly")
    assert shown.last_slot == "2025-06-02T12:01:00.000Z"
    assert shown.last_run == run.run_id
    assert shown.runs_started == 1
    assert shown.next_fire_at == "2025-06-02T12:02:00.000Z"
    assert [(s.slot, s.outcome, s.run_id) for s in shown.recent] == [
        ("2025-06-02T12:01:00.000Z", "started", run.run_id)
    ]
    assert audit_actions(acme) == ["schedule.create"]


def test_overlap_skip_records_why_and_starts_nothing(acme: Service, clock: FakeClock) -> None:
    """The first run still waits (1 h): the next slot is skipped, with the run and its status named."""
    acme.schedules.create("acme", "naps", definition="nap", cron="* * * * *", overlap="skip")
    clock.advance(minutes=1)
    acme.fire_due_schedules()
    clock.advance(minutes=1)
    acme.fire_due_schedules()
    (run,) = runs_of(acme)
    shown = acme.schedules.show("acme", "naps")
    assert shown.slots_skipped == 1
    assert shown.runs_started == 1
    assert shown.last_skipped is not None
    assert shown.last_skipped.slot == "2025-06-02T12:02:00.000Z"
    assert run.run_id in (shown.last_skipped.reason or "")
    assert "overlap skip" in (shown.last_skipped.reason or "")


def test_overlap_allow_starts_a_run_per_slot(acme: Service, clock: FakeClock) -> None:
    acme.schedules.create("acme", "naps", definition="nap", cron="* * * * *", overlap="allow")
    for _ in range(3):
        clock.advance(minutes=1)
        acme.fire_due_schedules()
    assert len(runs_of(acme)) == 3
    assert {r.status for r in runs_of(acme)} == {"waiting"}


def test_overlap_cancel_previous_cancels_with_a_reason(acme: Service, clock: FakeClock) -> None:
    """The new slot's run starts and the previous one is cancelled in the same transaction, with a
    reason naming the schedule, the slot and the new run; the cancel is audited as the schedule's."""
    acme.schedules.create("acme", "naps", definition="nap", cron="* * * * *", overlap="cancel_previous")
    clock.advance(minutes=1)
    acme.fire_due_schedules()
    (first,) = runs_of(acme)
    clock.advance(minutes=1)
    acme.fire_due_schedules()
    second = next(r for r in runs_of(acme) if r.run_id != first.run_id)
    old = acme.show("acme", first.run_id)
    assert old.status == "cancelled"
    assert old.cancel is not None
    assert "overlap cancel_previous" in old.cancel["reason"]
    assert second.run_id in old.cancel["reason"]
    assert old.cancel["actor"] == "schedule:naps"
    assert acme.show("acme", second.run_id).status == "waiting"
    cancels = [e for e in acme.audit.export("acme") if e.action == "run.cancel"]
    assert [(e.actor, e.target) for e in cancels] == [("schedule:naps", first.run_id)]


def test_a_finished_previous_run_does_not_block_the_next_slot(acme: Service, clock: FakeClock) -> None:
    acme.schedules.create("acme", "blinks", definition="quick", cron="* * * * *", overlap="skip")
    for _ in range(3):
        clock.advance(minutes=1)
        acme.fire_due_schedules()
        clock.advance(seconds=2)
        acme.fire_due_timers()
    assert [r.status for r in runs_of(acme)] == ["completed"] * 3


@pytest.mark.parametrize(("policy", "started", "missed"), [("none", 0, 6), ("last", 1, 5), ("all", 4, 2)])
def test_catch_up_after_downtime(
    acme: Service, clock: FakeClock, policy: str, started: int, missed: int
) -> None:
    """No scheduler ran from 12:00:30 to 12:33:30, past the slots 12:05 to 12:30 (the last 3.5 minutes
    late): none starts nothing, last the newest once, all the newest 4 (its limit); the others are
    recorded as missed with the policy's reason, and the schedule goes on from its next future slot."""
    acme.schedules.create(
        "acme", "m", definition="nap", cron="*/5 * * * *", overlap="allow", catch_up=policy, catch_up_limit=4
    )
    clock.advance(minutes=33)
    acme.fire_due_schedules()
    keys = sorted(r.start_key for r in runs_of(acme))
    expected = {
        "none": [],
        "last": ["m:2025-06-02T12:30:00.000Z"],
        "all": [f"m:2025-06-02T12:{m:02d}:00.000Z" for m in (15, 20, 25, 30)],
    }
    assert keys == expected[policy]
    assert len(keys) == started
    shown = acme.schedules.show("acme", "m")
    assert shown.slots_missed == missed
    assert shown.next_fire_at == "2025-06-02T12:35:00.000Z"
    assert shown.last_missed is not None
    assert shown.last_missed.slot == "2025-06-02T12:05:00.000Z"
    assert shown.last_missed.count == missed
    assert f"catch-up {policy}" in (shown.last_missed.reason or "")
    acme.fire_due_schedules()
    assert len(runs_of(acme)) == started  # nothing more until 12:35


def test_catch_up_none_fires_a_slot_that_is_only_a_little_late(acme: Service, clock: FakeClock) -> None:
    """A slot started within a minute of its time is on time: a scheduler restart loses nothing."""
    acme.schedules.create("acme", "m", definition="nap", cron="* * * * *", catch_up="none")
    clock.advance(seconds=30 + 45)  # 12:01:45
    acme.fire_due_schedules()
    assert [r.start_key for r in runs_of(acme)] == ["m:2025-06-02T12:01:00.000Z"]


def test_pause_and_resume(acme: Service, clock: FakeClock) -> None:
    """A paused schedule starts nothing; resumed, it fires from its next slot after now (the slots of
    the pause are not caught up). Both are audited; pausing twice is refused."""
    acme.schedules.create("acme", "m", definition="nap", cron="* * * * *", overlap="allow")
    paused = acme.schedules.pause("acme", "m", reason="maintenance window", actor="bob")
    assert paused.status == "paused"
    assert paused.next_fire_at is None
    assert paused.paused_reason
    stored = acme.schedules.show("acme", "m")  # read back from the database: who and when are kept
    assert (stored.paused_at, stored.paused_by) == (iso(clock()), "bob")
    assert stored.next_fire_times == stored.next_fire_times_local == []  # no false promises
    with pytest.raises(Refused, match="paused already"):
        acme.schedules.pause("acme", "m")
    clock.advance(minutes=10)
    assert acme.fire_due_schedules() == 0
    assert runs_of(acme) == []
    resumed = acme.schedules.resume("acme", "m", actor="bob")
    assert resumed.next_fire_at == "2025-06-02T12:11:00.000Z"
    assert (resumed.paused_at, resumed.paused_by) == (None, None)
    clock.advance(minutes=1)
    acme.fire_due_schedules()
    assert [r.start_key for r in runs_of(acme)] == ["m:2025-06-02T12:11:00.000Z"]
    assert audit_actions(acme) == ["schedule.create", "schedule.pause", "schedule.resume"]


def test_delete_keeps_the_runs_and_is_audited(acme: Service, clock: FakeClock, raw: Raw) -> None:
    acme.schedules.create("acme", "m", definition="nap", cron="* * * * *")
    clock.advance(minutes=1)
    acme.fire_due_schedules()
    gone = acme.schedules.delete("acme", "m", actor="carol")
    assert gone.deleted
    assert gone.runs_started == 1
    assert raw.count("schedules") == 0
    assert raw.count("schedule_slots") == 0
    assert len(runs_of(acme)) == 1
    with pytest.raises(NotFound, match="no schedule m"):
        acme.schedules.show("acme", "m")
    row = next(e for e in acme.audit.export("acme") if e.action == "schedule.delete")
    assert row.actor == "carol"
    assert row.detail["runs_started"] == 1
    clock.advance(minutes=5)
    assert acme.fire_due_schedules() == 0


def test_trigger_starts_one_run_per_key(acme: Service, clock: FakeClock) -> None:
    """A trigger starts a run now (also while paused, whatever the overlap); the same key twice is one."""
    acme.schedules.create("acme", "m", definition="nap", cron="0 2 * * *")
    acme.schedules.pause("acme", "m")
    first = acme.schedules.trigger("acme", "m", key="deploy-42", actor="dave")
    again = acme.schedules.trigger("acme", "m", key="deploy-42", actor="dave")
    assert first.created
    assert not again.created
    assert again.run_id == first.run_id
    other = acme.schedules.trigger("acme", "m", key="deploy-43", actor="dave")
    assert other.created
    assert acme.show("acme", first.run_id).start_key == "m:trigger:deploy-42"
    assert acme.schedules.show("acme", "m").runs_started == 2
    assert audit_actions(acme).count("schedule.trigger") == 2


def test_update_changes_the_cron_and_is_audited(acme: Service, clock: FakeClock) -> None:
    acme.schedules.create("acme", "m", definition="nap", cron="* * * * *")
    changed = acme.schedules.update("acme", "m", cron="0 9 * * MON-FRI", timezone="Europe/Berlin", actor="e")
    assert changed.next_fire_at == "2025-06-03T07:00:00.000Z"  # 09:00 CEST on Tuesday
    with pytest.raises(InvalidInput, match="nothing to change"):
        acme.schedules.update("acme", "m")
    row = next(e for e in acme.audit.export("acme") if e.action == "schedule.update")
    assert row.detail["changed"] == ["cron", "timezone"]


BAD: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"cron": "61 * * * *"}, InvalidInput, "bad minute"),
    ({"cron": "* * *"}, InvalidInput, "has 3 field"),
    ({"cron": "@daily"}, InvalidInput, "nicknames"),
    ({"timezone": "Mars/Olympus"}, InvalidInput, "unknown time zone 'Mars/Olympus'"),
    ({"timezone": "europe/berlin"}, InvalidInput, "did you mean Europe/Berlin"),
    ({"definition": "nope"}, NotFound, "no definition nope in tenant acme"),
    ({"definition": "order", "input": {"order": "seven"}}, InvalidInput, "does not fit definition order"),
    ({"definition": "order", "input": {}}, InvalidInput, "'order' is a required property"),
    ({"cron": "*/10 * * * * *"}, InvalidInput, "max_schedule_rate=60"),
    ({"catch_up_limit": 5000, "catch_up": "all"}, InvalidInput, "max_catch_up_slots=100"),
    ({"overlap": "sometimes"}, InvalidInput, "overlap 'sometimes' is not a policy"),
    ({"input": {"x": "y" * 300_000}}, InvalidInput, "max_input_bytes"),
    ({"input": {"$sealed": "ls1.a.b"}}, InvalidInput, "reserved"),
]


@pytest.mark.parametrize(("change", "error", "message"), BAD)
def test_a_bad_schedule_is_one_clear_error_and_writes_nothing(
    acme: Service, raw: Raw, change: dict[str, Any], error: type[Exception], message: str
) -> None:
    """Each bad field is refused before anything is written: no schedule, no slot, no audit row."""
    args: dict[str, Any] = {"definition": "nap", "cron": "0 2 * * *", "timezone": "UTC", **change}
    before = raw.count("audit")
    with pytest.raises(error, match=message):
        acme.schedules.create("acme", "bad", **args)
    assert raw.count("schedules") == 0
    assert raw.count("audit") == before


def test_the_tenant_bounds_its_number_of_schedules(acme: Service, raw: Raw) -> None:
    acme.principals.set_tenant("acme", max_schedules=2)
    acme.schedules.create("acme", "a", definition="nap", cron="0 2 * * *")
    acme.schedules.create("acme", "b", definition="nap", cron="0 3 * * *")
    with pytest.raises(Refused, match="max_schedules=2"):
        acme.schedules.create("acme", "c", definition="nap", cron="0 4 * * *")
    with pytest.raises(Conflict, match="already exists"):
        acme.schedules.create("acme", "a", definition="nap", cron="0 4 * * *")
    assert raw.count("schedules") == 2


def test_a_raised_rate_allows_seconds(acme: Service, clock: FakeClock) -> None:
    """With max_schedule_rate=3600 a seconds field may fire every second; each second is one run."""
    acme.principals.set_tenant("acme", max_schedule_rate=3600)
    acme.schedules.create("acme", "s", definition="nap", cron="* * * * * *", overlap="allow", catch_up="all")
    for _ in range(5):
        clock.advance(seconds=1)
        acme.fire_due_schedules()
    assert len(runs_of(acme)) == 5


def test_another_tenant_cannot_see_or_fire_a_schedule(acme: Service) -> None:
    acme.principals.create_tenant("other")
    acme.publish("other", NAP)
    acme.schedules.create("acme", "m", definition="nap", cron="0 2 * * *")
    assert acme.schedules.list("other") == []
    for call in (
        lambda: acme.schedules.show("other", "m"),
        lambda: acme.schedules.trigger("other", "m"),
        lambda: acme.schedules.pause("other", "m"),
        lambda: acme.schedules.delete("other", "m"),
    ):
        with pytest.raises(NotFound, match="no schedule m in tenant other"):
            call()
    assert acme.schedules.show("acme", "m").status == "active"


def test_a_start_refused_at_the_slot_is_recorded_and_the_schedule_goes_on(
    acme: Service, clock: FakeClock
) -> None:
    """Over max_active_runs the slot's start is refused: the slot is recorded as refused with the
    reason, and the schedule moves on to its next slot (nothing retries it forever)."""
    acme.principals.set_tenant("acme", max_active_runs=1)
    acme.start("acme", "nap")
    acme.schedules.create("acme", "m", definition="nap", cron="* * * * *", overlap="allow")
    clock.advance(minutes=1)
    assert acme.fire_due_schedules() == 1
    shown = acme.schedules.show("acme", "m")
    assert shown.recent[0].outcome == "refused"
    assert "max_active_runs" in (shown.recent[0].reason or "")
    assert shown.next_fire_at == "2025-06-02T12:02:00.000Z"


def test_a_slot_whose_key_names_a_run_is_not_started_again(acme: Service, clock: FakeClock) -> None:
    """Someone started a run with the slot's key already: the slot records that run, starts none."""
    acme.schedules.create("acme", "m", definition="nap", cron="* * * * *")
    made = acme.start("acme", "nap", key="m:2025-06-02T12:01:00.000Z")
    clock.advance(minutes=1)
    acme.fire_due_schedules()
    assert len(runs_of(acme)) == 1
    shown = acme.schedules.show("acme", "m")
    assert (shown.recent[0].outcome, shown.recent[0].run_id) == ("already_started", made.run_id)


def test_two_services_firing_at_once_start_each_slot_once(
    store: Store, clock: FakeClock, db_url: str
) -> None:
    """Two services over one database (two schedulers) run the pass in threads while the clock moves
    over 40 slots: every slot has exactly one run."""
    import threading

    from lockstep.store import open_store

    a = Service(store, clock=clock)
    a.principals.create_tenant("acme")
    a.publish("acme", NAP)
    a.principals.set_tenant("acme", max_schedule_rate=3600)
    a.schedules.create("acme", "s", definition="nap", cron="* * * * * *", overlap="allow", catch_up="all")
    other = open_store(db_url)
    try:
        b = Service(other, clock=clock)
        stop = threading.Event()
        errors: list[BaseException] = []

        def loop(svc: Service) -> None:
            while not stop.is_set():
                try:
                    svc.fire_due_schedules()
                except Exception as exc:
                    errors.append(exc)

        threads = [threading.Thread(target=loop, args=(s,)) for s in (a, b)]
        for t in threads:
            t.start()
        for _ in range(40):
            clock.advance(seconds=1)
            threading.Event().wait(0.02)
        stop.set()
        for t in threads:
            t.join()
        a.fire_due_schedules()
    finally:
        other.close()
    keys = [r.start_key for r in runs_of(a)]
    assert len(keys) == len(set(keys)) == 40
    assert not [e for e in errors if "lost" not in str(e)]
    assert a.schedules.show("acme", "s").runs_started == 40


@pytest.mark.parametrize(
    ("start", "keys"),
    [
        # Spring forward: 02:30 does not exist on 2025-03-30; the slot fires once, at 03:00 CEST.
        (datetime(2025, 3, 29, 12, tzinfo=UTC), ["2025-03-30T01:00:00.000Z", "2025-03-31T00:30:00.000Z"]),
        # Fall back: 02:30 happens twice on 2025-10-26; the slot fires once, at the first.
        (datetime(2025, 10, 25, 12, tzinfo=UTC), ["2025-10-26T00:30:00.000Z", "2025-10-27T01:30:00.000Z"]),
    ],
)
def test_dst_days_in_berlin_fire_once(
    svc: Service, clock: FakeClock, start: datetime, keys: list[str]
) -> None:
    """A 02:30 Europe/Berlin schedule, passes every 15 minutes for 42 hours across the transition: one
    run per day, at the documented instants, none twice."""
    clock.now = start
    svc.principals.create_tenant("acme")
    svc.publish("acme", NAP)
    svc.schedules.create(
        "acme", "night", definition="nap", cron="30 2 * * *", timezone="Europe/Berlin", overlap="allow"
    )
    for _ in range(42 * 4):
        clock.advance(minutes=15)
        svc.fire_due_schedules()
    assert sorted(r.start_key for r in runs_of(svc)) == [f"night:{k}" for k in keys]
    assert svc.schedules.show("acme", "night").slots_missed == 0
