"""sensitive_pointers: runs driven through every kind of event that holds tenant data leave no sensitive
value in clear once the classified places are sealed (events and the state folded from them), the clear
fields stay clear, nothing is classified for a definition that declares nothing, and a new event kind
cannot go unclassified."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
import pytest
from corekit import Run, load

from lockstep.core.commands import (
    DecideApproval,
    EditInput,
    MigrateRun,
    PauseRun,
    ReportFailure,
    ReportSuccess,
    ResolveStep,
    ResumeRun,
    SkipStep,
)
from lockstep.core.definition import DefinitionError
from lockstep.core.events import RECORDS, Event, NeedsAttention, StepSkipped, WorkflowMigrated, data_of
from lockstep.core.evolve import fold
from lockstep.core.sensitive import (
    CLASSIFIED,
    CLEAR,
    NOT_SENSITIVE,
    batch_pointers,
    replace_many,
    sensitive_pointers,
)

SECRETS_YAML = """
name: secrets
input_schema:
  type: object
  properties:
    order: {type: string}
    card: {type: string, x-lockstep-sensitive: true}
    customer: {type: object, properties: {name: {type: string}, iban: {type: string}}}
sensitive_input: [/customer/iban]
steps:
  - id: charge
    activity: pay.charge
    input: {order: "${input.order}", card: "${input.card}"}
    timeout: 10s
    retry: {max_attempts: 2, initial_interval: 1s, on_exhausted: dead_letter}
    output_sensitive: [/token]
    compensate: {activity: pay.refund, input: {token: "${steps.charge.output.token}"}}
    skippable: true
  - id: route
    choice:
      - {if: "input.card.endsWith('-never')", next: decline}
      - {else: approve}
  - id: approve
    approval: {approvers: {users: [alice]}, timeout: 1d, details: "refund to ${input.customer.iban}"}
  - id: ship
    activity: ship.it
    input: {order: "${input.order}", token: "${steps.charge.output.token}"}
    timeout: 10s
    retry: {max_attempts: 1, on_exhausted: dead_letter}
    skippable: true
    next: end
  - id: decline
    fail: {error: Declined, message: "card ${input.card} declined"}
output: {order: "${input.order}", token: "${steps.charge.output.token}"}
"""
INPUT = {"order": "ORD-1", "card": "S3CR3T-card", "customer": {"name": "Ann", "iban": "S3CR3T-iban"}}
TOKEN = {"token": "S3CR3T-tok", "charge_id": "ch-1"}


def declared_nothing(text: str) -> str:
    """The same definition without any declaration."""
    return (
        text.replace(", x-lockstep-sensitive: true", "")
        .replace("sensitive_input: [/customer/iban]\n", "")
        .replace("    output_sensitive: [/token]\n", "")
    )


def report_stale(run: Run, task: str, fencing: int) -> None:
    """A worker's late reports of a superseded attempt (recorded as ResultIgnored)."""
    run.send(ReportSuccess(task_id=task, attempt=1, fencing=fencing, output=dict(TOKEN)))
    run.send(ReportFailure(task_id=task, attempt=1, fencing=fencing, code="Late", message="S3CR3T-card late"))


def happy(text: str) -> Run:
    run = Run(load(text), copy.deepcopy(INPUT))
    run.claim()
    first, fencing = run.s.active.task_id, run.fencing  # type: ignore[union-attr]
    run.fail("Declined", "card S3CR3T-card declined by the bank")
    run.fire()
    run.claim()
    report_stale(run, first, fencing or 0)
    run.succeed(dict(TOKEN))
    request = run.s.approval["request_id"]  # type: ignore[index]
    run.send(DecideApproval(request, "alice", "approve", "ok", ("approver",), ()))
    run.run_activity({"shipped": True})
    assert run.s.status == "completed"
    return run


def compensated(text: str) -> Run:
    """The ship step fails for good, quoting the token: the charge is compensated, the run fails."""
    run = Run(load(text), copy.deepcopy(INPUT))
    run.run_activity(dict(TOKEN))
    request = run.s.approval["request_id"]  # type: ignore[index]
    run.send(DecideApproval(request, "alice", "approve", None, ("approver",), ()))
    run.claim()
    run.fail("Rejected", "token S3CR3T-tok rejected", retryable=False)
    run.claim()
    run.fail("RefundFailed", "refund of S3CR3T-tok failed")
    run.fire()
    run.run_activity({"refunded": "S3CR3T-tok"})
    assert run.s.status == "failed"
    return run


def operated(text: str) -> Run:
    """Operators at work: edit the input, pause over a failure, resume, dead letter, skip with output."""
    run = Run(load(text), copy.deepcopy(INPUT))
    run.send(EditInput({**INPUT, "card": "S3CR3T-card2"}, "typo", "ops"))
    run.claim()
    run.send(PauseRun("look", "ops"))
    run.fail("Declined", "S3CR3T-card2 refused", retryable=False)
    run.send(ResumeRun("go on", "ops"))
    assert run.s.status == "failed"
    return run


def skipped(text: str) -> Run:
    """An operator skips the charge with its output; the ship step is skipped too, with a clear one."""
    run = Run(load(text), copy.deepcopy(INPUT))
    run.send(SkipStep("charge", "paid by hand", {"token": "S3CR3T-skip"}, "ops", ("operator",)))
    request = run.s.approval["request_id"]  # type: ignore[index]
    run.send(DecideApproval(request, "alice", "approve", None, ("approver",), ()))
    run.claim()
    run.fail("Lost", "S3CR3T-skip unknown")  # one attempt, dead letter: the run needs attention
    assert run.s.status == "needs_attention"
    run.send(SkipStep("ship", "shipped by hand", {"parcel": "P-1"}, "ops", ("operator",)))
    assert run.s.status == "completed"
    assert run.events[-2].data_json()["output"] == {"parcel": "P-1"}
    return run


def resolved(text: str) -> Run:
    """The charge dead-letters after its attempts; an operator resolves it with the token."""
    run = Run(load(text), copy.deepcopy(INPUT))
    run.claim()
    run.fail("Timeout", "S3CR3T-card: no answer")
    run.fire()
    run.claim()
    run.fail("Timeout", "S3CR3T-card: no answer again")
    assert run.s.status == "needs_attention"
    run.send(ResolveStep("charge", "succeeded", "charged by phone", {"token": "S3CR3T-res"}, "ops"))
    request = run.s.approval["request_id"]  # type: ignore[index]
    run.send(DecideApproval(request, "alice", "approve", None, ("approver",), ()))
    run.run_activity({"shipped": True})
    assert run.s.status == "completed"
    return run


def declined(text: str) -> Run:
    run = Run(load(text), {**INPUT, "card": "S3CR3T-never"})
    run.run_activity({"token": "S3CR3T-t2", "charge_id": "ch-2"})
    run.run_activity({"refund": 1})
    assert run.s.status == "failed"
    return run


def four_eyes(text: str) -> Run:
    run = Run(load(text.replace("name: secrets\n", "name: secrets\nfour_eyes: [skip, resolve]\n")), INPUT)
    run.send(SkipStep("charge", "by hand", {"token": "S3CR3T-prop"}, "ops", ("operator",)))
    assert run.s.proposal is not None
    return run


def migrated(text: str) -> Run:
    """Paused over a failure, then migrated: the held transition (with its message) is superseded."""
    run = Run(load(text), copy.deepcopy(INPUT))
    run.claim()
    run.send(PauseRun("look", "ops"))
    run.fail("Declined", "S3CR3T-card gone", retryable=False)
    target = load(text.replace("name: secrets\n", "name: secrets\ndescription: v2\n"))
    run.send(MigrateRun(target, 2, (), "move on", "ops"))
    return run


SCENARIOS = [happy, compensated, operated, skipped, resolved, declined, four_eyes, migrated]


def sealed(events: list[Event], pointers: list[tuple[str, ...]]) -> list[Event]:
    out = []
    for e, ps in zip(events, pointers, strict=True):
        data = replace_many(e.data_json(), ps, lambda p, v: {"$sealed": p})
        out.append(Event(data_of(e.type, data), e.at, e.seq, e.v))
    return out


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_sealing_the_classified_places_leaves_no_sensitive_value(scenario: Any) -> None:
    """Every event, and the state folded from the sealed events, holds no sensitive value in clear."""
    run = scenario(SECRETS_YAML)
    pointers = [sensitive_pointers(e.data, run.d) for e in run.events]
    after = sealed(run.events, pointers)
    for e in after:
        text = json.dumps(e.data_json())
        assert "S3CR3T" not in text, (e.type, text)
    state = fold(after)
    assert state is not None
    assert "S3CR3T" not in json.dumps(state.to_json())
    assert "ORD-1" in json.dumps(after[0].data_json())  # the clear fields stay clear


def test_every_kind_of_event_that_carries_tenant_data_is_classified_in_a_real_run() -> None:
    """Across the scenarios, each kind of event that can hold a sensitive value had one classified."""
    found: dict[str, set[str]] = {}
    for scenario in SCENARIOS:
        run = scenario(SECRETS_YAML)
        for e in run.events:
            for p in sensitive_pointers(e.data, run.d):
                found.setdefault(e.type, set()).add(p)
    assert found["RunStarted"] == {"/input/card", "/input/customer/iban"}
    assert found["InputEdited"] == {"/old/card", "/old/customer/iban", "/new/card", "/new/customer/iban"}
    assert found["ActivityScheduled"] == {"/input/card", "/input/token"}
    assert found["ActivitySucceeded"] == {"/output/token", "/output"}  # "/output": a compensation's
    assert found["ActivityFailed"] == {"/error/message"}
    assert found["ResultIgnored"] == {"/result/output/token", "/result/message"}
    assert found["CompensationScheduled"] == {"/input/token"}
    assert found["ApprovalRequested"] == {"/details"}
    assert found["RunCompleted"] == {"/output/token"}
    assert found["StepFailed"] == found["RunFailed"] == found["CompensationStarted"] == {"/error/message"}
    assert found["NeedsAttention"] == {"/reason"}
    assert found["TransitionDeferred"] == {"/args/error/message"}
    assert found["RunResumed"] == {"/deferred/0/args/error/message"}
    assert found["WorkflowMigrated"] == {"/superseded/0/args/error/message"}
    assert found["StepSkipped"] == {"/output/token"}
    assert found["StepResolved"] == {"/output/token"}
    assert found["RepairProposed"] == {"/command/output/token"}
    assert not {"ActivityStarted", "ChoiceEvaluated", "TimerScheduled", "ApprovalGranted"} & set(found)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_a_definition_that_declares_nothing_classifies_nothing(scenario: Any) -> None:
    """Without declarations the same runs have no sensitive place in any event."""
    run = scenario(declared_nothing(SECRETS_YAML))
    assert run.d.sensitivity is NOT_SENSITIVE
    assert all(sensitive_pointers(e.data, run.d) == () for e in run.events)


def test_skipped_before_output_and_an_unknown_step_are_classified_conservatively() -> None:
    """A skip records the step's earlier output too; a stale report or attention naming no step of the
    version counts as any step's."""
    d = load(SECRETS_YAML)
    skip = StepSkipped(
        step="charge",
        output={"token": "x"},
        reason="r",
        actor=None,
        before={"status": "succeeded", "attempts": 1, "output": {"token": "y", "other": 1}},
    )
    assert sensitive_pointers(skip, d) == ("/output/token", "/before/output/token")
    odd = NeedsAttention(step="gone", code="dead_letter", reason="S3CR3T")
    assert sensitive_pointers(odd, d) == ("/reason",)


def test_a_null_or_absent_value_is_never_listed() -> None:
    """Pointers name values that are there: an output without the sensitive member lists nothing."""
    d = load(SECRETS_YAML)
    skip = StepSkipped(step="charge", output=None, reason="r", actor=None, before={"output": None})
    assert sensitive_pointers(skip, d) == ()
    skip = StepSkipped(step="charge", output={"other": 1}, reason="r", actor=None, before={})
    assert sensitive_pointers(skip, d) == ()


def test_a_migrated_run_classifies_each_event_by_the_version_it_was_decided_under() -> None:
    """batch_pointers: events up to WorkflowMigrated under the version the run leaves, the later ones
    under the target; the history written before is not reclassified."""
    clear = load(declared_nothing(SECRETS_YAML))
    secret = load(SECRETS_YAML.replace("name: secrets\n", "name: secrets\ndescription: v2\n"))
    run = Run(clear, copy.deepcopy(INPUT))
    run.claim()
    run.send(PauseRun("look", "ops"))
    events = run.send(MigrateRun(secret, 2, (), "to the sensitive version", "ops"))
    assert any(isinstance(e.data, WorkflowMigrated) for e in events)
    assert all(p == () for p in batch_pointers([e.data for e in run.events[: -len(events)]], clear, secret))
    got = batch_pointers([e.data for e in events], clear, secret)
    assert [p for e, p in zip(events, got, strict=True) if e.type == "WorkflowMigrated"] == [()]


def test_check_input_never_echoes_a_sensitive_value() -> None:
    """A run input refused by the schema names the place and the rule, not the sensitive value."""
    d = load(
        SECRETS_YAML.replace("card: {type: string,", "card: {type: string, pattern: '^[0-9]+$',").replace(
            "iban: {type: string}", "iban: {type: string, minLength: 40}"
        )
    )
    with pytest.raises(DefinitionError) as info:
        d.check_input({"order": 5, "card": "S3CR3T-card", "customer": {"name": "Ann", "iban": "S3CR3T-iban"}})
    text = str(info.value)
    assert "S3CR3T" not in text
    problems = dict(info.value.problems)
    assert "pattern" in problems["input.card"]
    assert "not shown" in problems["input.card"]
    assert "minLength" in problems["input.customer.iban"]
    assert problems["input.order"] == "5 is not of type 'string'"  # not sensitive: as jsonschema says


def test_check_input_stops_the_path_at_a_sensitive_object() -> None:
    """Inside a sensitive object even member names are its own: the path ends at its top."""
    d = load(
        """
name: accounts
input_schema:
  type: object
  properties:
    accounts:
      type: object
      x-lockstep-sensitive: true
      additionalProperties: {type: integer}
steps: [{id: a, activity: x.y, timeout: 1s}]
"""
    )
    with pytest.raises(DefinitionError) as info:
        d.check_input({"accounts": {"DE89-S3CR3T": "lots"}})
    assert "S3CR3T" not in str(info.value)
    assert info.value.problems[0][0] == "input.accounts (inside)"


# Fields whose names say they may hold a tenant's data. A record with one must have a handler.
WATCHED = {"input", "output", "details", "error", "message", "new", "old", "result", "command", "args"}
WATCHED |= {"deferred", "superseded", "before", "comment"}


def test_no_event_kind_goes_unclassified() -> None:
    """Every event type is either classified (a handler) or reviewed as clear, and a clear one has no
    field named like data: adding an event record with such a field fails here until it is classified."""
    assert not CLASSIFIED & CLEAR
    assert set(RECORDS) == CLASSIFIED | CLEAR, set(RECORDS) ^ (CLASSIFIED | CLEAR)
    for name in CLEAR:
        fields = {f.name for f in msgspec.structs.fields(RECORDS[name])}
        assert not fields & WATCHED, f"{name} has {sorted(fields & WATCHED)} but is listed as clear"


def test_a_missing_member_inside_a_sensitive_object_names_no_member_of_it() -> None:
    """`required` inside a sensitive map says which property is missing, with the path cut at the map."""
    d = load(
        """
name: accounts
input_schema:
  type: object
  properties:
    accounts:
      type: object
      x-lockstep-sensitive: true
      additionalProperties: {type: object, required: [owner]}
steps: [{id: a, activity: x.y, timeout: 1s}]
"""
    )
    with pytest.raises(DefinitionError) as info:
        d.check_input({"accounts": {"DE89-S3CR3T": {}}})
    assert "S3CR3T" not in str(info.value)
    assert info.value.problems == [("input.accounts (inside)", "'owner' is a required property")]
