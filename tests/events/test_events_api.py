"""POST /v1/events on both backends: an event after the wait completes the step with its payload;
before the wait it is buffered and consumed once by the first run that waits; a replayed id gets the
first answer and delivers nothing again; a payload the waiting step's schema refuses is a 422 that
changes nothing; every run waiting for the name and key gets it; the timeout applies on_timeout; a
publisher of another tenant delivers to nobody; keys of other roles are refused (403); a wait inside a
parallel branch and inside a for-each body gets its own event. Each delivery and refusal is audited."""

from __future__ import annotations

from typing import Any

from eventkit import Client, FakeClock, Tenant

from lockstep.engine import Engine


def start(engine: Engine, tenant: str, tracking: str, name: str = "parcels", **inp: Any) -> str:
    return engine.service.start(tenant, name, input={"tracking_no": tracking, **inp}).run_id


def send(
    c: Client, t: Tenant, key: str, eid: str, payload: Any = None, name: str = "parcel-delivered"
) -> Any:
    body = {
        "name": name,
        "key": key,
        "id": eid,
        "payload": payload if payload is not None else {"at": "noon"},
    }
    return c.post("/v1/events", json=body, headers=t.auth("publisher"))


def received(engine: Engine, run_id: str) -> list[str]:
    """The event ids the run's history says it received."""
    history = engine.service.events(None, run_id)
    return [
        str(e.data["event_id"]) for e in history if e.type == "EventReceived" and isinstance(e.data, dict)
    ]


def audit_actions(engine: Engine, tenant: str) -> list[tuple[str, str]]:
    page = engine.service.audit.page(tenant, limit=500)
    return [(e.action, e.outcome) for e in page.items]


def test_an_event_after_the_wait_completes_the_step_with_its_payload(
    engine: Engine, client: Client, acme: Tenant
) -> None:
    """The answer lists the run; the run completes with the payload as the step's output."""
    run = start(engine, "acme", "ABC")
    assert engine.service.show("acme", run).status == "waiting"
    seen = client.get(f"/v1/runs/{run}", headers=acme.auth("viewer")).json()
    assert seen["event_waits"]["delivered"]["key"] == "ABC"
    assert seen["wait_kind"] == "event"
    r = send(client, acme, "ABC", "evt-1", {"at": "10:00"})
    assert r.status_code == 200, r.text
    assert r.json()["delivered_to"] == [run]
    assert r.json()["status"] == "delivered"
    view = engine.service.show("acme", run)
    assert view.status == "completed"
    assert view.output == {"at": "10:00"}
    assert ("event.deliver", "ok") in audit_actions(engine, "acme")


def test_an_event_before_the_wait_is_buffered_and_consumed_once(
    engine: Engine, client: Client, acme: Tenant, clock: FakeClock
) -> None:
    """Nobody waits: buffered; the first run to wait consumes it, the second does not get it too."""
    r = send(client, acme, "EARLY", "evt-early")
    assert r.json()["status"] == "buffered"
    assert r.json()["delivered_to"] == []
    first = start(engine, "acme", "EARLY")
    clock.advance(seconds=1)
    second = start(engine, "acme", "EARLY")
    assert engine.service.deliver_buffered_events() == 1
    assert engine.service.deliver_buffered_events() == 0
    assert engine.service.show("acme", first).status == "completed"
    assert engine.service.show("acme", second).status == "waiting"
    assert received(engine, first) == ["evt-early"]
    again = send(client, acme, "EARLY", "evt-early")
    assert again.json()["replay"] is True
    assert again.json()["status"] == "consumed"
    assert again.json()["delivered_to"] == [first]
    assert engine.service.show("acme", second).status == "waiting"


def test_a_buffered_event_expires_after_the_tenant_window(
    engine: Engine, client: Client, acme: Tenant, clock: FakeClock
) -> None:
    """Past event_buffer_ttl (default one hour) a buffered event reaches nobody."""
    send(client, acme, "LATE", "evt-late")
    clock.advance(hours=2)
    run = start(engine, "acme", "LATE")
    assert engine.service.deliver_buffered_events() == 0
    assert engine.service.show("acme", run).status == "waiting"


def test_a_replayed_id_gets_the_first_answer_and_no_second_delivery(
    engine: Engine, client: Client, acme: Tenant
) -> None:
    """A loop waiting again for the same key does not get the same event id a second time."""
    run = start(engine, "acme", "DUP")
    first = send(client, acme, "DUP", "evt-dup").json()
    again = send(client, acme, "DUP", "evt-dup")
    assert again.status_code == 200
    assert again.json() == {**first, "replay": True}
    assert received(engine, run) == ["evt-dup"]
    other = send(client, acme, "DUP", "evt-dup", {"at": "other"})
    assert other.status_code == 409
    assert other.json()["code"] == "id_reused"


def test_a_payload_failing_the_schema_is_refused_and_changes_nothing(
    engine: Engine, client: Client, acme: Tenant
) -> None:
    """422 payload_invalid; the run still waits; the id is not taken (a fixed resend works); audited."""
    run = start(engine, "acme", "BAD")
    r = send(client, acme, "BAD", "evt-bad", {"when": 1})
    assert r.status_code == 422
    assert r.json()["code"] == "payload_invalid"
    assert engine.service.show("acme", run).status == "waiting"
    assert ("event.publish", "refused") in audit_actions(engine, "acme")
    assert send(client, acme, "BAD", "evt-bad", {"at": "ok"}).json()["delivered_to"] == [run]


def test_every_run_waiting_for_the_name_and_key_gets_the_event(
    engine: Engine, client: Client, acme: Tenant
) -> None:
    """Several waiting runs: all of them, each once."""
    runs = [start(engine, "acme", "MANY") for _ in range(3)]
    other = start(engine, "acme", "OTHER")
    r = send(client, acme, "MANY", "evt-many")
    assert sorted(r.json()["delivered_to"]) == sorted(runs)
    assert all(engine.service.show("acme", x).status == "completed" for x in runs)
    assert engine.service.show("acme", other).status == "waiting"


def test_the_timeout_applies_on_timeout(
    engine: Engine, client: Client, acme: Tenant, clock: FakeClock
) -> None:
    """No event within 7d: the chase step fails the run; a late event reaches nobody."""
    run = start(engine, "acme", "SLOW")
    clock.advance(days=8)
    assert engine.service.fire_due_timers() == 1
    view = engine.service.show("acme", run)
    assert view.status == "failed"
    late = send(client, acme, "SLOW", "evt-slow")
    assert late.json()["delivered_to"] == []


def test_a_publisher_of_another_tenant_delivers_to_nobody(
    engine: Engine, client: Client, acme: Tenant, globex: Tenant
) -> None:
    """globex's publisher sends acme's name and key: zero delivered, acme's run still waits."""
    run = start(engine, "acme", "SECRET")
    r = send(client, globex, "SECRET", "evt-x")
    assert r.status_code == 200
    assert r.json()["delivered_to"] == []
    assert engine.service.show("acme", run).status == "waiting"
    assert received(engine, run) == []


def test_keys_of_other_roles_are_refused_on_the_events_endpoint(
    engine: Engine, client: Client, acme: Tenant
) -> None:
    """viewer, worker, approver, operator and admin keys get 403; no key 401; nothing delivered."""
    run = start(engine, "acme", "ROLE")
    for role in ("viewer", "worker", "approver", "operator", "admin"):
        body = {"name": "parcel-delivered", "key": "ROLE", "id": f"e-{role}", "payload": {"at": "x"}}
        r = client.post("/v1/events", json=body, headers=acme.auth(role))
        assert r.status_code == 403, role
    assert client.post("/v1/events", json={"name": "a", "key": "b", "id": "c"}).status_code == 401
    assert engine.service.show("acme", run).status == "waiting"
    # ...and a publisher can do nothing else.
    assert client.get(f"/v1/runs/{run}", headers=acme.auth("publisher")).status_code == 403
    assert client.get("/v1/runs", headers=acme.auth("publisher")).status_code == 403


def test_bad_names_keys_and_ids_are_refused_with_the_fix(
    engine: Engine, client: Client, acme: Tenant
) -> None:
    """422 saying what and how; nothing is written."""
    r = client.post(
        "/v1/events", json={"name": "Bad Name", "key": "k", "id": "e1"}, headers=acme.auth("publisher")
    )
    assert r.status_code == 422
    assert "lowercase" in r.json()["detail"]
    r = client.post(
        "/v1/events", json={"name": "ok", "key": "k", "id": "has space"}, headers=acme.auth("publisher")
    )
    assert r.status_code == 422


BRANCHY: dict[str, Any] = {
    "name": "branchy",
    "steps": [
        {
            "id": "fan",
            "parallel": {
                "branches": {
                    "pay": [
                        {
                            "id": "paid",
                            "wait_event": {
                                "name": "payment-settled",
                                "key": "${input.tracking_no}",
                                "timeout": "1d",
                            },
                        }
                    ],
                    "each": [
                        {
                            "id": "every",
                            "for_each": {
                                "items": "${input.parcels}",
                                "body": [
                                    {
                                        "id": "got",
                                        "wait_event": {
                                            "name": "parcel-delivered",
                                            "key": "${item}",
                                            "timeout": "1d",
                                        },
                                    }
                                ],
                            },
                        }
                    ],
                }
            },
        }
    ],
}


def test_waits_in_a_parallel_branch_and_a_for_each_body(engine: Engine, client: Client, acme: Tenant) -> None:
    """Each lane waits for its own key; the run completes once every lane got its event."""
    engine.service.publish("acme", BRANCHY)
    run = engine.service.start("acme", "branchy", input={"tracking_no": "T1", "parcels": ["P1", "P2"]}).run_id
    waits = client.get(f"/v1/runs/{run}/event-waits", headers=acme.auth("viewer")).json()["waits"]
    assert sorted(w["key"] for w in waits) == ["P1", "P2", "T1"]
    assert send(client, acme, "P1", "p1", {"n": 1}).json()["delivered_to"] == [run]
    assert send(client, acme, "T1", "t1", {"paid": True}, name="payment-settled").json()["delivered_to"] == [
        run
    ]
    assert engine.service.show("acme", run).status == "waiting"
    assert send(client, acme, "P2", "p2", {"n": 2}).json()["delivered_to"] == [run]
    assert engine.service.show("acme", run).status == "completed"


def test_a_delivery_cut_off_is_finished_by_the_scheduler_without_a_resend(
    engine: Engine, client: Client, acme: Tenant, clock: FakeClock
) -> None:
    """An inbox row left `delivering` (its process died between two runs) is finished by the pass after
    30 s: the runs not reached yet get the event, the ones that had it do not get it again."""
    from lockstep.app.principals import Principal

    runs = [start(engine, "acme", "CUT") for _ in range(3)]
    d = engine.service.event_deliveries
    publisher = Principal("acme", "publisher", ("publisher",), ())
    now = clock()
    assert d._begin(publisher, "parcel-delivered", "CUT", {"at": "x"}, "evt-cut", now, {}) is None
    (first, *_rest) = d._waiting("acme", "parcel-delivered", "CUT")
    assert d._deliver_one("acme", "publisher", "evt-cut", first, {"at": "x"}, now)  # then the "crash"
    engine.service.deliver_buffered_events()
    assert sum(1 for r in runs if received(engine, r)) == 1  # too early: it may still be under way
    clock.advance(seconds=31)
    engine.service.deliver_buffered_events()
    assert all(received(engine, r) == ["evt-cut"] for r in runs)
    again = send(client, acme, "CUT", "evt-cut", {"at": "x"}).json()
    assert again["replay"] is True
    assert sorted(again["delivered_to"]) == sorted(runs)
