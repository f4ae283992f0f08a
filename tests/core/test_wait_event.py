"""The `wait_event` step in the pure core: the wait records its name, rendered key, expiry and
generation and holds no worker; a matching event becomes the step's output; a stale, mismatched or
schema-failing delivery changes nothing; the timeout applies on_timeout; a callback records only its
token's hash; waits in a parallel branch and a for-each body (a key per lane) end with their lane."""

from __future__ import annotations

import hashlib

import pytest
from corekit import load, types
from shapekit import LaneRun

from lockstep.core.commands import DeliverEvent, IssueCallback, Rejected, SkipStep
from lockstep.core.definition import DefinitionError
from lockstep.core.effects import CloseEventWait, OpenEventWait, StoreCallback, effects_of
from lockstep.core.events import EventWaitStarted
from lockstep.core.explain import explain

FLOW = """
name: parcels
steps:
  - id: ship
    activity: carrier.book
    timeout: 5s
  - id: delivered
    wait_event:
      name: parcel-delivered
      key: "${input.tracking_no}"
      timeout: 7d
      on_timeout: chase
      schema: {type: object, required: [at], properties: {at: {type: string}}}
      callback: true
  - id: done
    succeed: {output: {at: "${steps.delivered.output.at}"}}
  - id: chase
    fail: {error: NotDelivered, message: "parcel ${input.tracking_no} not delivered"}
"""


def waiting() -> LaneRun:
    r = LaneRun(load(FLOW), {"tracking_no": "ABC"})
    r.ok("ship", {"booked": True})
    return r


def started(r: LaneRun, key: str = "delivered") -> EventWaitStarted:
    return [e.data for e in r.events if isinstance(e.data, EventWaitStarted) and e.data.step == key][-1]


def send(r: LaneRun, step: str = "delivered", payload: object = None, **kw: object) -> list[object]:
    w = r.s.event_waits[step]
    fields = {"name": w["name"], "key": w["key"], "generation": w["generation"], "event_id": "e1"} | kw
    body = payload if payload is not None else {"at": "2026-12-02"}
    return list(r.send(DeliverEvent(step=step, payload=body, **fields)))  # type: ignore[arg-type]


def test_the_wait_records_name_key_expiry_generation_and_holds_no_worker() -> None:
    """EventWaitStarted carries what it means; the run waits with no attempt; explain says so."""
    r = waiting()
    d = started(r)
    assert (d.name, d.key, d.callback, d.integration) == ("parcel-delivered", "ABC", True, None)
    assert d.generation == r.s.event_waits["delivered"]["generation"]
    assert r.s.status == "waiting"
    assert r.open_steps() == []
    why = explain(r.s, r.now)
    assert why["wait_kind"] == "event"
    assert "waiting for event parcel-delivered (key ABC) until" in str(why["wait_reason"])
    assert "(in 7d)" in str(why["wait_reason"]), why["wait_reason"]  # once "(in in 7d)"
    fx = effects_of(r.events[-2:])
    assert any(isinstance(f, OpenEventWait) and f.key == "ABC" for f in fx)


def test_a_matching_event_becomes_the_output_and_the_run_moves_on() -> None:
    """The payload is the step's output; the timeout timer is cancelled; the index row closes."""
    r = waiting()
    new = send(r)
    assert r.s.status == "completed"
    assert r.s.output == {"at": "2026-12-02"}
    assert "TimerCancelled" in types(new)  # type: ignore[arg-type]
    assert any(isinstance(f, CloseEventWait) for f in effects_of(new))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"generation": 1}, "stale_wait"),
        ({"key": "XYZ"}, "not_awaited"),
        ({"name": "parcel-lost"}, "not_awaited"),
        ({"payload": {"when": 1}}, "payload_invalid"),
    ],
)
def test_a_stale_mismatched_or_invalid_delivery_is_refused(change: dict[str, object], code: str) -> None:
    """Each is Rejected with its code, and decides no event."""
    r = waiting()
    before = len(r.events)
    with pytest.raises(Rejected) as e:
        send(r, **change)  # type: ignore[arg-type]
    assert e.value.code == code
    assert len(r.events) == before


def test_the_timeout_applies_on_timeout() -> None:
    """No event before the expiry: EventWaitTimedOut, then the on_timeout step (here a fail)."""
    r = waiting()
    w = r.s.event_waits["delivered"]
    r.fire()
    assert "EventWaitTimedOut" in types(r.events)
    assert r.s.status == "failed"
    assert r.s.error is not None
    assert r.s.error["code"] == "NotDelivered"
    assert r.s.event_waits == {}
    late = DeliverEvent("delivered", w["generation"], "e1", w["name"], w["key"], {"at": "x"})
    with pytest.raises(Rejected):
        r.send(late)


def test_a_callback_records_only_the_hash_and_must_match() -> None:
    """CallbackIssued holds the sha256, never a token; a delivery by callback needs the current hash."""
    r = waiting()
    w = r.s.event_waits["delivered"]
    h = hashlib.sha256(b"token-1").hexdigest()
    new = r.send(IssueCallback("delivered", w["generation"], "cb1", h, "ops"))
    assert any(isinstance(f, StoreCallback) and f.token_hash == h for f in effects_of(new))
    assert "token-1" not in str([e.data for e in r.events])
    with pytest.raises(Rejected) as e:
        send(r, via="callback", callback_id="cb1", token_hash="0" * 64)
    assert e.value.code == "stale_callback"
    send(r, via="callback", callback_id="cb1", token_hash=h)
    assert r.s.status == "completed"


def test_a_callback_on_a_wait_without_callback_is_refused() -> None:
    """callback: false (the default) takes no callback."""
    r = LaneRun(load(FLOW.replace("      callback: true\n", "")), {"tracking_no": "ABC"})
    r.ok("ship")
    w = r.s.event_waits["delivered"]
    with pytest.raises(Rejected) as e:
        r.send(IssueCallback("delivered", w["generation"], "cb1", "ab" * 32, "ops"))
    assert e.value.code == "no_callback"


def test_a_waiting_step_is_not_skipped() -> None:
    """A skip cannot end a wait: deliver the event, let it time out, or cancel."""
    r = waiting()
    with pytest.raises(Rejected) as e:
        r.send(SkipStep("delivered", "ops", "because", ("admin",)))
    assert e.value.code == "event_waiting"


def test_cancelling_ends_the_wait() -> None:
    """A cancelled run's wait ends (EventWaitCancelled) and its index row closes."""
    r = waiting()
    new = r.cancel()
    assert "EventWaitCancelled" in types(new)
    assert r.s.event_waits == {}
    assert r.s.status == "cancelled"


PARALLEL = """
name: both
steps:
  - id: fan
    parallel:
      join: all
      branches:
        pay:
          - id: paid
            wait_event: {name: payment-settled, key: "${input.order}", timeout: 1d}
        pack:
          - id: packed
            activity: wh.pack
            timeout: 5s
"""


def test_a_wait_inside_a_parallel_branch() -> None:
    """The wait is keyed by the step's key in its branch; its event ends the branch, the join the run."""
    r = LaneRun(load(PARALLEL), {"order": "o-1"})
    assert list(r.s.event_waits) == ["fan.pay.paid"]
    assert "waiting for event payment-settled (key o-1)" in str(explain(r.s, r.now)["wait_reason"])
    r.ok("fan.pack.packed", {"ok": 1})
    send(r, "fan.pay.paid", {"amount": 5})
    assert r.s.status == "completed"


FOR_EACH = """
name: each
steps:
  - id: every
    for_each:
      items: "${input.parcels}"
      body:
        - id: got
          wait_event: {name: parcel-delivered, key: "${item}", timeout: 1d}
"""


def test_a_wait_inside_a_for_each_body_has_a_key_per_lane() -> None:
    """Each item waits for its own key; the for-each ends when every item got its event."""
    r = LaneRun(load(FOR_EACH), {"parcels": ["A", "B"]})
    keys = {k: w["key"] for k, w in r.s.event_waits.items()}
    assert sorted(keys.values()) == ["A", "B"]
    for k in sorted(keys):
        send(r, k, {"ok": keys[k]})
    assert r.s.status == "completed"


def test_a_parallel_any_cancels_the_losing_wait() -> None:
    """A branch cancelled by its join ends its wait (no open index row is left behind)."""
    r = LaneRun(load(PARALLEL.replace("join: all", "join: any")), {"order": "o-1"})
    r.ok("fan.pack.packed", {"ok": 1})
    assert r.s.event_waits == {}
    assert "EventWaitCancelled" in types(r.events)


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ("{key: x, timeout: 1d}", "wait_event.name"),
        ("{name: a, timeout: 1d}", "wait_event.key"),
        ("{name: a, key: x}", "wait_event.timeout"),
        ("{name: a, key: x, timeout: 1d, on_timeout: nowhere}", "on_timeout"),
        ("{name: a, key: x, timeout: 1d, schema: {type: 7}}", "wait_event.schema"),
        ("{name: a, key: x, timeout: 1d, callback: {integration: 'Bad Name'}}", "callback.integration"),
    ],
)
def test_bad_definitions_are_refused_with_where(body: str, where: str) -> None:
    """Each mistake is named at its place."""
    with pytest.raises(DefinitionError) as e:
        load(f"name: x\nsteps:\n  - id: w\n    wait_event: {body}\n")
    assert where in str(e.value)
