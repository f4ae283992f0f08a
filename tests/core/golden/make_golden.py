"""Generate the golden histories in this folder (run by hand, never by the test suite).

    .venv/bin/python tests/core/golden/make_golden.py

Each JSON file records one run as the engine wrote it: the definition document, every event (as
Event.to_json()), the hash-chain head over those events and the final snapshot (RunState.to_json()).
tests/core/test_golden.py replays the stored events with fold() and demands the stored snapshot.

These files stand for runs already in production databases. Regenerate them ONLY for a deliberate,
reviewed change of the event format or of evolve(); if test_golden fails after an ordinary change,
the change breaks the replay of old runs: fix the change (or add an upcaster), not the files.
The script is deterministic (fixed clock, fixed ids), so regenerating without such a change is a no-op.

golden/v1/, golden/v2/ and golden/v3/ hold the first four scenarios as recorded by older builds (v1:
unversioned snapshots, old task ids; v2: snapshot_version 2, before `paused`; v3: snapshot_version 3,
before four-eyes proposals and the per-task count of ignored results); golden/v4/ all five as recorded
with snapshot_version 4, before the trace context and step visits; golden/v5/ all six as recorded with
snapshot_version 5, before the lanes and groups of parallel and for-each steps. This script never
writes there: those files stand for runs stored by those builds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from lockstep.core.commands import (
    CancelRun,
    ChildEnded,
    ClaimTask,
    Command,
    ConfirmRepair,
    DecideApproval,
    DeliverEvent,
    ExpireLease,
    FireTimer,
    IssueCallback,
    MigrateRun,
    RejectRepair,
    ReportFailure,
    ReportSuccess,
    SkipStep,
    StartRun,
)
from lockstep.core.decide import decide
from lockstep.core.definition import Definition, parse_definition
from lockstep.core.events import Event, chain_hash
from lockstep.core.evolve import evolve
from lockstep.core.lanes import active_of
from lockstep.core.paths import lane_of
from lockstep.core.state import RunState
from lockstep.core.timeutil import iso

HERE = Path(__file__).resolve().parent
T0 = datetime(2024, 1, 15, 9, 30, 0, tzinfo=UTC)

ORDER = """
name: order-fulfilment
steps:
  - id: reserve
    activity: inventory.reserve
    input: {sku: "${input.sku}", qty: 2}
    timeout: 30s
    retry:
      max_attempts: 5
      initial_interval: 1s
      backoff: 2.0
      max_interval: 1m
      non_retryable: [OutOfStock]
    idempotency_key: "reserve-${input.order_id}"
    compensate: {activity: inventory.release, input: {sku: "${input.sku}"}}
  - id: route
    choice:
      - {if: "input.qty > 10", next: cooling-off}
      - {else: ship}
  - id: cooling-off
    wait: 2s
  - id: ship
    activity: shipping.create
    timeout: 10s
    next: end
  - id: rejected
    fail: {error: Rejected, message: "too many"}
"""

SAGA = """
name: saga
steps:
  - id: reserve
    activity: inventory.reserve
    timeout: 30s
    compensate: {activity: inventory.release, input: {sku: "${input.sku}"}}
  - id: charge
    activity: payments.charge
    timeout: 30s
    idempotency_key: "charge-${input.order_id}"
    compensate:
      activity: payments.refund
      input: {amount: "${steps.charge.output.amount}"}
      timeout: 1m
      retry: {max_attempts: 3, initial_interval: 5s}
  - id: notify
    activity: email.send
    timeout: 10s
  - id: ship
    activity: shipping.create
    timeout: 10s
    retry: {max_attempts: 3, initial_interval: 2s, non_retryable: [NoAddress]}
"""

PAYOUT = """
name: payout
steps:
  - id: reserve
    activity: inventory.reserve
    timeout: 30s
    compensate: {activity: inventory.release}
  - id: pay
    activity: bank.transfer
    delivery: at_most_once
    timeout: 30s
    retry: {max_attempts: 3}
"""


GUARDED = """
name: guarded
four_eyes: [skip]
steps:
  - id: reserve
    activity: inventory.reserve
    timeout: 30s
  - id: hold
    wait: 1d
    skippable: true
  - id: ship
    activity: shipping.create
    timeout: 10s
"""

TRACED = """
name: traced
steps:
  - id: poll
    activity: status.check
    timeout: 30s
  - id: ready
    choice:
      - {if: "steps.poll.output.status == 'ready'", next: review}
      - {else: pause}
  - id: pause
    wait: 5s
    next: poll
  - id: review
    approval:
      approvers: {users: [ana]}
      details: "order ${input.order_id}"
      timeout: 1d
  - id: ship
    activity: shipping.create
    timeout: 10s
"""


PARALLEL = """
name: parallel-review
steps:
  - id: prepare
    activity: docs.prepare
    timeout: 30s
    compensate: {activity: docs.discard}
  - id: review
    parallel:
      branches:
        legal:
          - id: legal-ok
            approval:
              approvers: {users: [ana]}
              details: "order ${input.order_id}"
              timeout: 1d
          - id: file
            activity: legal.file
            timeout: 30s
            compensate: {activity: legal.withdraw}
        finance:
          - id: reserve-budget
            activity: finance.reserve
            timeout: 30s
            compensate: {activity: finance.release, input: {order: "${input.order_id}"}}
  - id: ship
    activity: shipping.create
    timeout: 10s
    input: {review: "${steps.review.output}"}
    retry: {max_attempts: 1}
"""

LINES = """
name: order-lines
steps:
  - id: lines
    for_each:
      items: "${input.lines}"
      concurrency: 2
      max_items: 10
      on_failure: continue
      body:
        - id: pack
          activity: warehouse.pack
          timeout: 30s
          input: {sku: "${item.sku}", line: "${index}"}
  - id: notify
    activity: email.send
    timeout: 10s
    input: {packed: "${steps.lines.output}"}
"""

FIRST_QUOTE = """
name: first-quote
steps:
  - id: quotes
    parallel:
      join: any
      branches:
        acme:
          - {id: ask-acme, activity: quote.acme, timeout: 30s}
        globex:
          - {id: ask-globex, activity: quote.globex, timeout: 30s}
        initech:
          - {id: ask-initech, activity: quote.initech, timeout: 30s}
  - id: order
    activity: purchase.order
    timeout: 30s
"""


ONBOARDING = """
name: onboarding
steps:
  - id: open
    activity: acct.open
    timeout: 30s
    compensate: {activity: acct.close}
  - id: kyc
    run:
      definition: kyc-check
      version: 2
      input: {customer: "${input.customer}"}
  - id: welcome
    activity: mail.welcome
    timeout: 30s
    input: {score: "${steps.kyc.output.score}"}
"""

KYC = """
name: kyc-check
steps:
  - id: look
    activity: kyc.look
    timeout: 30s
    input: {customer: "${input.customer}"}
"""

# An http step (issue 19): an activity attempt of the built-in lockstep.http whose input is the
# rendered request; the secret is named, never a value.
CHARGE_HTTP = """
name: charge-http
steps:
  - id: charge
    http:
      method: POST
      url: "https://api.example.com/charges"
      body: {amount: "${input.amount}"}
      auth: {secret: payments-api-key}
      retry: {max_attempts: 3, initial_interval: 1s}
    idempotency_key: "charge-${input.order}"
"""


PARCELS = """
name: parcels
steps:
  - id: book
    activity: carrier.book
    timeout: 30s
  - id: delivered
    wait_event:
      name: parcel-delivered
      key: "${input.tracking_no}"
      timeout: 7d
      on_timeout: chase
      schema: {type: object, required: [at]}
      callback: {integration: carrier}
  - id: done
    succeed: {output: {at: "${steps.delivered.output.at}"}}
  - id: chase
    fail: {error: NotDelivered, message: "parcel ${input.tracking_no} not delivered"}
"""


MIGRATING = """
name: migrating
steps:
  - id: reserve
    activity: inventory.reserve
    timeout: 30s
  - id: hold
    wait: 1h
  - id: ship
    activity: shipping.create
    timeout: 10s
"""

# Version 2 of MIGRATING: a new step, and a migration onto it needs two approvers.
MIGRATING_V2 = (
    MIGRATING.replace(
        "name: migrating\n",
        """name: migrating
migration:
  requires_approval: {approvers: {users: [ana, ben]}, quorum: 2, timeout: 2d}
""",
    )
    + """  - id: notify
    activity: email.send
    timeout: 10s
"""
)


class Recorder:
    """Drives one run with a fixed clock and records its events."""

    def __init__(
        self, text: str, input: Any, trace: tuple[str, str] | None = None, parent: Any = None
    ) -> None:
        self.document = yaml.safe_load(text)
        self.d: Definition = parse_definition(self.document)
        self.now = T0
        self.state: RunState | None = None
        self.events: list[Event] = []
        traced = {"trace": trace[0], "trace_parent": trace[1]} if trace else {}
        key = "k-1" if parent is None else f"{parent['run_id']}:{parent['step']}"
        start = StartRun(
            run_id="golden-1", tenant="acme", version=1, input=input, start_key=key, parent=parent, **traced
        )
        self.send(start)

    def send(self, command: Command) -> None:
        for e in decide(self.state, command, self.now, self.d):
            self.state = evolve(self.state, e)
            self.events.append(e)

    def wait(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    @property
    def s(self) -> RunState:
        assert self.state is not None
        return self.state

    def claim(self, worker: str = "worker-1") -> tuple[str, int, int]:
        a = self.s.active
        assert a is not None
        self.send(ClaimTask(a.task_id, worker, iso(self.now + timedelta(milliseconds=a.timeout_ms))))
        a = self.s.active
        assert a is not None
        assert a.fencing is not None
        return a.task_id, a.attempt, a.fencing

    def ok(self, output: Any = None, took: float = 0.5) -> tuple[str, int, int]:
        token = self.claim()
        self.wait(took)
        self.send(ReportSuccess(*token, output=output))
        return token

    def fail(self, code: str, message: str, took: float = 0.5) -> tuple[str, int, int]:
        token = self.claim()
        self.wait(took)
        self.send(ReportFailure(*token, code=code, message=message))
        return token

    def claim_step(self, key: str, worker: str = "worker-1") -> tuple[str, int, int]:
        a = active_of(self.s, lane_of(key))
        assert a is not None
        assert a.step == key
        self.send(ClaimTask(a.task_id, worker, iso(self.now + timedelta(milliseconds=a.timeout_ms))))
        a = active_of(self.s, lane_of(key))
        assert a is not None
        assert a.fencing is not None
        return a.task_id, a.attempt, a.fencing

    def ok_step(self, key: str, output: Any = None, took: float = 0.5) -> None:
        token = self.claim_step(key)
        self.wait(took)
        self.send(ReportSuccess(*token, output=output))

    def fire(self) -> None:
        (t,) = self.s.timers.values()
        self.now = max(self.now, datetime.fromisoformat(t.fire_at.replace("Z", "+00:00")))
        self.send(FireTimer(t.key, t.generation))


def happy_path_with_retry() -> Recorder:
    r = Recorder(ORDER, {"sku": "SKU-9", "qty": 12, "order_id": 1001})
    first = r.fail("Busy", "inventory service overloaded")
    r.fire()
    r.ok({"reservation": "RES-1"})
    r.send(ReportSuccess(*first, output={"late": True}))  # the lost attempt's late answer: evidence only
    r.fire()  # cooling-off
    r.ok({"tracking": "TRK-1"}, took=3)
    return r


def failure_with_compensation() -> Recorder:
    r = Recorder(SAGA, {"sku": "SKU-2", "order_id": 77})
    r.ok({"reservation": "RES-2"})
    r.ok({"amount": 4200})
    r.ok(None)
    r.fail("NoAddress", "customer has no shipping address")
    r.fail("BankDown", "refund API returned 503")
    r.fire()
    r.ok({"refund": "REF-1"})
    r.ok(None)
    return r


def cancellation_with_compensation() -> Recorder:
    r = Recorder(SAGA, {"sku": "SKU-3", "order_id": 78})
    r.ok({"reservation": "RES-3"})
    r.ok({"amount": 990})
    r.claim()
    r.wait(2)
    r.send(CancelRun(reason="customer withdrew the order", actor="support:kim"))
    a = r.s.active
    assert a is not None
    assert a.fencing is not None
    r.wait(1)
    r.send(ReportSuccess(a.task_id, a.attempt, a.fencing, output={"sent": True}))
    r.ok({"refund": "REF-2"})
    r.ok(None)
    return r


def at_most_once_needs_attention() -> Recorder:
    r = Recorder(PAYOUT, {"account": "DE00 1234", "amount": 50})
    r.ok({"reservation": "RES-4"})
    task, attempt, fencing = r.claim()
    r.wait(30)
    r.send(ExpireLease(task, attempt, fencing, reason="no result before the deadline"))
    return r


def four_eyes_skip() -> Recorder:
    r = Recorder(GUARDED, {"order_id": 79})
    r.ok({"reservation": "RES-5"})
    r.send(SkipStep("hold", "customer asked to ship now", None, "ops:ana", ("operator",)))
    first = r.s.proposal
    assert first is not None
    r.wait(60)
    r.send(RejectRepair(first["proposal_id"], "ask the customer again", "ops:ana"))  # a withdrawal
    r.send(SkipStep("hold", "customer confirmed by phone", None, "ops:ana", ("operator",)))
    second = r.s.proposal
    assert second is not None
    r.wait(120)
    r.send(ConfirmRepair(second["proposal_id"], "checked the call log", "ops:ben", ("operator",)))
    r.ok({"tracking": "TRK-5"})
    return r


def traced_loop_with_approval() -> Recorder:
    """A run that joined a caller's trace: a step entered twice (a loop through a choice), an approval."""
    trace = ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a3ce929d0e0e4736")
    r = Recorder(TRACED, {"order_id": 80}, trace)
    r.ok({"status": "pending"})
    r.wait(5)
    r.fire()  # the poll loop waits, then asks again
    r.ok({"status": "ready"})
    pending = r.s.approval
    assert pending is not None
    r.wait(600)
    r.send(DecideApproval(pending["request_id"], "ana", "approve", "stock checked", ("approver",), ()))
    r.ok({"tracking": "TRK-6"})
    return r


def parallel_branches_compensated() -> Recorder:
    """Two branches (an approval then an activity; an activity), joined; the step after fails, and the
    branches' completed steps are compensated side by side, then the step before."""
    r = Recorder(PARALLEL, {"order_id": 81}, trace=None)
    r.ok({"doc": "D-81"})
    r.ok_step("review.finance.reserve-budget", {"budget": "B-81"})
    pending = r.s.approval or next(iter(r.s.lanes.values())).approval
    assert pending is not None
    r.wait(300)
    r.send(DecideApproval(pending["request_id"], "ana", "approve", "fine", ("approver",), ()))
    r.ok_step("review.legal.file", {"filing": "F-81"})
    r.fail("NoCarrier", "no carrier for this address")
    r.ok_step("review.legal.file", {"withdrawn": True})
    r.ok_step("review.finance.reserve-budget", {"released": True})
    r.ok({"discarded": True})
    return r


def for_each_with_concurrency() -> Recorder:
    """Three order lines, two at a time; one fails (on_failure: continue), the step still joins."""
    r = Recorder(LINES, {"lines": [{"sku": "A"}, {"sku": "B"}, {"sku": "C"}]})
    r.ok_step("lines[1].pack", {"box": "B1"})
    token = r.claim_step("lines[0].pack")
    r.wait(1)
    r.send(ReportFailure(*token, code="OutOfStock", message="no A left", retryable=False))
    r.ok_step("lines[2].pack", {"box": "C1"})
    r.ok({"sent": True})
    return r


def parallel_any_with_cancel() -> Recorder:
    """join any: the first quote wins; a queued ask is withdrawn, a running one reports first. Then the
    run is cancelled while its order is in flight."""
    r = Recorder(FIRST_QUOTE, {"item": "bolts"})
    late = r.claim_step("quotes.initech.ask-initech", "worker-2")
    r.ok_step("quotes.globex.ask-globex", {"price": 7})
    r.wait(2)
    r.send(ReportSuccess(*late, output={"price": 9}))
    r.claim()
    r.send(CancelRun(reason="supplier changed", actor="buyer:lee"))
    a = r.s.active
    assert a is not None
    assert a.fencing is not None
    r.send(ReportSuccess(a.task_id, a.attempt, a.fencing, output={"po": "PO-1"}))
    return r


FORMS = """
name: po-form
steps:
  - id: approve
    approval:
      approvers: {users: [ana, ben]}
      quorum: 2
      timeout: 1d
      form:
        - {name: amount, type: number, required: true, minimum: 0}
        - {name: centre, type: string, enum: [ops, sales]}
        - {name: note, type: string, maxLength: 100}
  - id: pay
    activity: payments.pay
    timeout: 30s
    input: {amount: "${steps.approve.output.values.amount}"}
"""


def forms_two_approvers_with_values() -> Recorder:
    """An approval form: two approvers with values (the second's amount wins in the merged values)."""
    r = Recorder(FORMS, {})
    pending = r.s.approval
    assert pending is not None
    r.wait(60)
    values = {"amount": 900, "centre": "ops"}
    r.send(DecideApproval(pending["request_id"], "ana", "approve", None, ("approver",), (), values=values))
    r.wait(60)
    values = {"amount": 850, "note": "rounded down"}
    r.send(DecideApproval(pending["request_id"], "ben", "approve", "ok", ("approver",), (), values=values))
    r.ok({"paid": 850})
    return r


def child_run_parent() -> Recorder:
    """A parent whose `run` step waits for a child (pinned version 2) and takes its output."""
    r = Recorder(ONBOARDING, {"customer": "c-82"})
    r.ok({"account": "A-82"})
    (child,) = r.s.children.values()
    r.wait(42)
    r.send(ChildEnded(child["child_run_id"], "kyc", "completed", {"score": 97}))
    r.ok({"sent": True})
    return r


def child_run_child() -> Recorder:
    """The child of such a step: it knows its parent (RunStarted.parent) and ends as any run does."""
    r = Recorder(KYC, {"customer": "c-82"}, parent={"run_id": "golden-0", "step": "kyc", "depth": 1})
    r.ok({"score": 97})
    return r


def events_received_by_callback() -> Recorder:
    """A wait_event step: a callback minted (only its hash), then the event through it."""
    r = Recorder(PARCELS, {"tracking_no": "ABC"})
    r.ok({"booked": True})
    w = r.s.event_waits["delivered"]
    r.wait(60)
    r.send(IssueCallback("delivered", w["generation"], "cb_0123456789abcdef", "ab" * 32, "ops"))
    r.wait(3600)
    event = DeliverEvent(
        "delivered",
        w["generation"],
        "callback:cb_0123456789abcdef",
        w["name"],
        w["key"],
        {"at": "2026-01-01T01:00:00Z"},
        via="callback",
        callback_id="cb_0123456789abcdef",
        token_hash="ab" * 32,
    )
    r.send(event)
    return r


def events_wait_timed_out() -> Recorder:
    """A wait_event step whose event never came: timed out, on_timeout went to a fail step."""
    r = Recorder(PARCELS, {"tracking_no": "XYZ"})
    r.ok({"booked": True})
    r.fire()
    return r


def http_call_retried() -> Recorder:
    """An http step whose first answer is a 503 (retried on a timer) and whose second is the output."""
    r = Recorder(CHARGE_HTTP, {"order": "o-19", "amount": 1900})
    r.fail("HttpStatus503", "POST https://api.example.com/charges answered 503 Service Unavailable")
    r.fire()
    r.ok(
        {
            "status": 201,
            "headers": {"content-type": "application/json"},
            "body": {"id": "ch_19"},
            "url": "https://api.example.com/charges",
            "auth": {"secret": "payments-api-key", "version": 1},
        }
    )
    return r


def migapproval_granted() -> Recorder:
    """A migration that needed approval: granted by two approvers, applied; the run completes on v2."""
    r = Recorder(MIGRATING, {"order_id": "o-9"})
    r.ok({"reserved": True})
    r.wait(600)
    target = parse_definition(yaml.safe_load(MIGRATING_V2))
    decisions = tuple(
        {
            "approver": who,
            "decision": "approve",
            "comment": None,
            "at": iso(r.now),
            "roles": ["approver"],
            "groups": [],
        }
        for who in ("ana", "ben")
    )
    r.send(MigrateRun(target, 2, (), "add the notification", "olga", "mig_0123456789abcdef", decisions))
    r.d = target
    r.fire()
    r.ok({"shipped": True})
    r.ok({"sent": True})
    return r


SCENARIOS: dict[str, tuple[str, Callable[[], Recorder]]] = {
    "happy_path_with_retry": (
        "one failed attempt retried on a durable timer, a late duplicate result ignored, a wait, completed",
        happy_path_with_retry,
    ),
    "failure_with_compensation": (
        "a non-retryable failure; charge and reserve compensated in reverse order (one refund retried)",
        failure_with_compensation,
    ),
    "cancellation_with_compensation": (
        "cancel while an activity runs: wait for its result, compensate completed steps, cancelled",
        cancellation_with_compensation,
    ),
    "at_most_once_needs_attention": (
        "the lease of an at_most_once payment expires: outcome unknown, the run needs a human",
        at_most_once_needs_attention,
    ),
    "four_eyes_skip": (
        "four_eyes: [skip]: a proposed skip withdrawn, proposed again and confirmed by a second operator",
        four_eyes_skip,
    ),
    "traced_loop_with_approval": (
        "a run in a caller's trace (RunStarted.trace): a polling loop enters a step twice, then an approval",
        traced_loop_with_approval,
    ),
    "parallel_branches_compensated": (
        "a parallel step (an approval and an activity in one branch, an activity in the other) joined; the "
        "next step fails and every branch compensates side by side, then the step before",
        parallel_branches_compensated,
    ),
    "for_each_with_concurrency": (
        "a for-each over three lines, two at a time, one failing with on_failure: continue; joined",
        for_each_with_concurrency,
    ),
    "parallel_any_with_cancel": (
        "join any: the first quote wins, the others are withdrawn or report first; then a cancel while the "
        "order is in flight",
        parallel_any_with_cancel,
    ),
    "child_run_parent": (
        "a `run` step requests a child run (a pinned version), waits, and takes the child's output",
        child_run_parent,
    ),
    "child_run_child": (
        "a child run: RunStarted names its parent and the parent's step; it completes",
        child_run_child,
    ),
    "events_received_by_callback": (
        "a wait_event step (EventWaitStarted), a callback minted (CallbackIssued: the hash), the event "
        "received through it (EventReceived), completed",
        events_received_by_callback,
    ),
    "events_wait_timed_out": (
        "a wait_event step whose event never came: EventWaitTimedOut, then its on_timeout fail step",
        events_wait_timed_out,
    ),
    "forms_two_approvers_with_values": (
        "an approval form: the policy records the form, each decision its values, the output merges them",
        forms_two_approvers_with_values,
    ),
    "http_call_retried": (
        "an http step (the built-in lockstep.http): a 503 retried on a timer, then the response as output",
        http_call_retried,
    ),
    "migapproval_granted": (
        "a migration that needs approval (migration: requires_approval of v2): WorkflowMigrated names the "
        "granted request and its two decisions; the run completes on v2",
        migapproval_granted,
    ),
}


def main() -> None:
    for name, (about, scenario) in SCENARIOS.items():
        r = scenario()
        head = ""
        for e in r.events:
            head = chain_hash(head, r.s.run_id, e)
        record = {
            "about": about,
            "generated_by": "tests/core/golden/make_golden.py",
            "run_id": r.s.run_id,
            "definition": r.document,
            "events": [e.to_json() for e in r.events],
            "chain_head": head,
            "snapshot": r.s.to_json(),
        }
        path = HERE / f"{name}.json"
        path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {path.relative_to(HERE.parent.parent.parent)}: {len(r.events)} events, {r.s.status}")


if __name__ == "__main__":
    main()
