"""Definitions parse, validate statically (path + helpful reason), digest stably; durations; templates."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
import yaml
from corekit import EXAMPLE_YAML, example
from hypothesis import given, settings
from hypothesis import strategies as st

from lockstep.core.definition import (
    ActivityStep,
    ChoiceStep,
    DefinitionError,
    FailStep,
    Limits,
    RetryPolicy,
    WaitStep,
    parse_definition,
)
from lockstep.core.expr import ExprError, compile_expr, compile_template, evaluate
from lockstep.core.timeutil import format_duration, iso, parse_duration, parse_iso

# --- helpers -----------------------------------------------------------------------------------------


def base() -> dict[str, Any]:
    return {"name": "demo", "steps": [{"id": "a", "activity": "svc.call", "timeout": "5s"}]}


def problems(doc: Any, limits: Limits | None = None) -> list[tuple[str, str]]:
    with pytest.raises(DefinitionError) as info:
        parse_definition(doc, limits)
    assert info.value.problems, "a DefinitionError must list at least one problem"
    return info.value.problems


def only(doc: Any) -> tuple[str, str]:
    probs = problems(doc)
    assert len(probs) == 1, probs
    return probs[0]


# --- the example from the issue ------------------------------------------------------------------------


def test_example_parses_with_every_field_compiled() -> None:
    """The order-fulfilment example parses into typed steps with its retry, compensation and graph."""
    d = example()
    assert d.name == "order-fulfilment"
    assert [s.id for s in d.steps] == ["reserve", "route", "cooling-off", "ship", "rejected"]
    reserve = d.step("reserve")
    assert isinstance(reserve, ActivityStep)
    assert reserve.activity == "inventory.reserve"
    assert reserve.timeout == timedelta(seconds=30)
    assert reserve.delivery == "idempotent"
    assert reserve.retry == RetryPolicy(
        max_attempts=5,
        initial_interval=timedelta(seconds=1),
        backoff=2.0,
        max_interval=timedelta(minutes=1),
        non_retryable=("OutOfStock",),
    )
    assert reserve.compensate is not None
    assert reserve.compensate.activity == "inventory.release"
    assert reserve.compensate.timeout == reserve.timeout
    assert reserve.idempotency_key is not None
    ctx = {"input": {"sku": "X1", "order_id": 42}}
    assert reserve.idempotency_key.render(ctx) == "reserve-42"
    assert reserve.input.render(ctx) == {"sku": "X1", "qty": 2}
    route = d.step("route")
    assert isinstance(route, ChoiceStep)
    assert [t for _, t in route.branches] == ["cooling-off"]
    assert route.default == "ship"
    wait = d.step("cooling-off")
    assert isinstance(wait, WaitStep)
    assert wait.duration == timedelta(seconds=2)
    assert isinstance(d.step("rejected"), FailStep)
    assert d.digest.startswith("sha256:")
    assert len(d.digest) == len("sha256:") + 64


def test_example_following_respects_next_and_order() -> None:
    """Steps run in order unless `next` says otherwise; `next: end` and the last step finish the run."""
    d = example()
    assert d.following("reserve") == "route"
    assert d.following("cooling-off") == "ship"
    assert d.following("ship") is None
    assert d.following("rejected") is None


def test_minimal_definition_defaults() -> None:
    """An activity without retry/delivery gets the default policy, idempotent delivery and no key."""
    d = parse_definition(base())
    a = d.step("a")
    assert isinstance(a, ActivityStep)
    assert a.retry == RetryPolicy()
    assert a.delivery == "idempotent"
    assert a.idempotency_key is None
    assert a.compensate is None
    assert d.input_schema is None


# --- static errors: path and reason -----------------------------------------------------------------


def test_unknown_step_field_suggests_the_close_match() -> None:
    """A misspelt step field is reported at its path with a did-you-mean hint."""
    doc = base()
    doc["steps"][0]["timout"] = "5s"
    path, reason = only(doc)
    assert path == "steps[0](a)"
    assert reason == "unknown key `timout` (did you mean `timeout`?)"


def test_unknown_top_level_field_suggests_the_close_match() -> None:
    """A misspelt top-level field is reported at `$.<field>` with a did-you-mean hint."""
    doc = base()
    doc["stepz"] = []
    path, reason = only(doc)
    assert path == "$"
    assert reason == "unknown key `stepz` (did you mean `steps`?)"


def test_unknown_field_without_close_match_lists_allowed() -> None:
    """An unknown field with no close match lists the allowed fields instead."""
    doc = base()
    doc["steps"][0]["retry"] = {"zzzzzz": 1}
    path, reason = only(doc)
    assert path == "steps[0](a).retry"
    assert "unknown key `zzzzzz` (allowed: max_attempts" in reason


def test_unknown_compensation_field_is_reported() -> None:
    """Unknown fields inside compensate are reported with their own path."""
    doc = base()
    doc["steps"][0]["compensate"] = {"activty": "svc.undo"}
    paths = dict(problems(doc))
    assert "unknown key `activty` (did you mean `activity`" in paths["steps[0](a).compensate"]
    assert "steps[0](a).compensate.activity" in paths


def test_activity_without_timeout_is_refused() -> None:
    """Every activity needs a timeout (the limit of one attempt); the reason shows an example."""
    doc = base()
    del doc["steps"][0]["timeout"]
    path, reason = only(doc)
    assert path == "steps[0](a).timeout"
    assert "required" in reason
    assert "timeout: 30s" in reason


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("30", "expected a duration such as"),
        ("30x", "expected a duration such as"),
        ("", "expected a duration such as"),
        (30, "needs a unit"),
        ("0s", "greater than zero"),
        ("8d", "exceeds the tenant limit"),
        (None, "expected a duration"),
    ],
)
def test_bad_timeout_durations_are_reported(value: Any, fragment: str) -> None:
    """Malformed, unitless, zero and over-limit durations are reported at the timeout's path."""
    doc = base()
    doc["steps"][0]["timeout"] = value
    path, reason = only(doc)
    assert path == "steps[0](a).timeout"
    assert fragment in reason


def test_bad_wait_durations_are_reported() -> None:
    """A wait with a bad or over-limit duration is reported at steps[i](id).wait(.for)."""
    doc = {"name": "w", "steps": [{"id": "w1", "wait": "2 days"}, {"id": "w2", "wait": {"for": "400d"}}]}
    paths = dict(problems(doc))
    assert "expected a duration" in paths["steps[0](w1).wait"]
    assert "exceeds the tenant limit" in paths["steps[1](w2).wait.for"]


def test_bad_retry_policy_fields_are_each_reported() -> None:
    """Every bad retry field is reported separately, not just the first one."""
    doc = base()
    doc["steps"][0]["retry"] = {
        "max_attempts": 0,
        "backoff": 0.5,
        "initial_interval": "soon",
        "non_retryable": "OutOfStock",
    }
    paths = dict(problems(doc))
    assert set(paths) == {
        "steps[0](a).retry.max_attempts",
        "steps[0](a).retry.backoff",
        "steps[0](a).retry.initial_interval",
        "steps[0](a).retry.non_retryable",
    }
    assert ">= 1" in paths["steps[0](a).retry.max_attempts"]
    assert "[OutOfStock]" in paths["steps[0](a).retry.non_retryable"]


def test_max_attempts_over_tenant_limit() -> None:
    """max_attempts above Limits.max_attempts is refused with the limit in the reason."""
    doc = base()
    doc["steps"][0]["retry"] = {"max_attempts": 11}
    path, reason = problems(doc, Limits(max_attempts=10))[0]
    assert path == "steps[0](a).retry.max_attempts"
    assert "limit of 10" in reason


def test_bad_cel_expression_in_choice_is_reported() -> None:
    """A syntax error in a choice condition is reported at choice[j].if and names the expression."""
    doc = base()
    doc["steps"].append({"id": "c", "choice": [{"if": "input.qty >", "next": "a"}]})
    path, reason = only(doc)
    assert path == "steps[1](c).choice[0].if"
    assert reason.startswith("invalid expression: syntax error at column 12: the expression ends too early")
    assert reason.endswith("\n    input.qty >\n" + " " * 15 + "^")


def test_non_string_condition_is_reported() -> None:
    """A choice condition that is not a string is refused with an example of a CEL expression."""
    doc = base()
    doc["steps"].append({"id": "c", "choice": [{"if": 3, "next": "a"}]})
    path, reason = only(doc)
    assert path == "steps[1](c).choice[0].if"
    assert "CEL expression" in reason


def test_unknown_variable_in_condition_is_reported() -> None:
    """A condition using a variable other than input/steps/run is refused and the variable named."""
    doc = base()
    doc["steps"].append({"id": "c", "choice": [{"if": "qty > 1", "next": "a"}]})
    path, reason = only(doc)
    assert path == "steps[1](c).choice[0].if"
    assert "unknown variable qty" in reason
    assert "input" in reason
    assert "steps" in reason
    assert "run" in reason


def test_a_dashed_step_id_read_with_a_dot_is_told_how_to_write_it() -> None:
    """`steps.legal-ok.output` (a subtraction to CEL) is refused with the bracket form to write."""
    doc = base()
    doc["steps"].append({"id": "c", "choice": [{"if": "steps.legal-ok.output", "next": "a"}]})
    _, reason = only(doc)
    assert 'a step id with `-` is read as steps["legal-ok"]' in reason


def test_unknown_variable_in_template_is_reported() -> None:
    """A template using an unknown root (inputs.x) is refused at the template's path."""
    doc = base()
    doc["steps"][0]["input"] = {"x": "${inputs.x}"}
    path, reason = only(doc)
    assert path == "steps[0](a).input"
    assert "unknown variable inputs" in reason


def test_unclosed_template_is_reported() -> None:
    """An unclosed `${` is reported with a hint to close it."""
    doc = base()
    doc["steps"][0]["idempotency_key"] = "k-${input.x"
    path, reason = only(doc)
    assert path == "steps[0](a).idempotency_key"
    assert "unclosed" in reason


def test_next_to_missing_step_suggests_close_match() -> None:
    """`next` to a step that does not exist is reported with a did-you-mean."""
    doc = base()
    doc["steps"][0]["next"] = "shp"
    doc["steps"].append({"id": "ship", "succeed": True})
    path, reason = only(doc)
    assert path == "steps(a).next"
    assert "no step `shp`" in reason
    assert "did you mean `ship`" in reason


def test_choice_to_missing_step_is_reported() -> None:
    """Choice branches and else pointing nowhere are each reported."""
    doc = base()
    doc["steps"].append({"id": "c", "choice": [{"if": "true", "next": "nowhere"}, {"else": "gone"}]})
    paths = dict(problems(doc))
    assert "no step `nowhere`" in paths["steps(c).choice"]
    assert "no step `gone`" in paths["steps(c).else"]


def test_next_end_is_allowed() -> None:
    """`next: end` is not a missing step: it finishes the run."""
    doc = base()
    doc["steps"][0]["next"] = "end"
    doc["steps"].append({"id": "b", "succeed": True})
    assert parse_definition(doc).following("a") is None


def test_duplicate_step_ids_are_refused() -> None:
    """Two steps with the same id are refused at the duplicate's id."""
    doc = base()
    doc["steps"].append({"id": "a", "succeed": True})
    path, reason = only(doc)
    assert path == "steps(a).id"
    assert "duplicate" in reason


def test_end_is_a_reserved_step_id() -> None:
    """A step called `end` is refused because `next: end` finishes the run."""
    doc = base()
    doc["steps"].append({"id": "end", "succeed": True})
    path, reason = only(doc)
    assert path == "steps(end).id"
    assert "reserved" in reason


def test_more_than_max_steps_is_refused() -> None:
    """21 steps exceed the default limit of 20; 20 steps are fine."""
    doc = {"name": "many", "steps": [{"id": f"s{i}", "wait": "1s"} for i in range(20)]}
    assert len(parse_definition(doc).steps) == Limits().max_steps
    doc["steps"].append({"id": "s20", "wait": "1s"})
    path, reason = only(doc)
    assert path == "steps"
    assert "21 steps exceed the tenant limit of 20" in reason


def test_smaller_tenant_step_limit_applies() -> None:
    """A tenant with Limits(max_steps=2) cannot publish three steps."""
    doc = {"name": "many", "steps": [{"id": f"s{i}", "wait": "1s"} for i in range(3)]}
    assert problems(doc, Limits(max_steps=2)) == [("steps", "3 steps exceed the tenant limit of 2")]


def test_choice_only_loop_is_refused() -> None:
    """Choice steps that loop without a wait or activity in between are refused."""
    doc = {
        "name": "spin",
        "steps": [
            {"id": "a", "choice": [{"if": "input.x", "next": "b"}, {"else": "z"}]},
            {"id": "b", "choice": [{"else": "a"}]},
            {"id": "z", "succeed": True},
        ],
    }
    probs = problems(doc)
    assert {p for p, _ in probs} == {"steps(a)", "steps(b)"}
    assert all("loop with no wait or activity" in r for _, r in probs)


def test_choice_self_loop_is_refused() -> None:
    """A choice whose branch targets itself is a choice-only loop."""
    doc = {
        "name": "spin",
        "steps": [{"id": "a", "choice": [{"if": "input.x", "next": "a"}, {"else": "end"}]}],
    }
    assert only(doc) == ("steps(a)", "choice steps form a loop with no wait or activity in it")


def test_loop_through_a_wait_is_allowed() -> None:
    """A polling loop with a wait step in it is a valid definition."""
    doc = {
        "name": "poll",
        "steps": [
            {"id": "pause", "wait": "1m"},
            {"id": "check", "choice": [{"if": "input.done", "next": "end"}, {"else": "pause"}]},
        ],
    }
    assert parse_definition(doc).following("pause") == "check"


def test_invalid_input_schema_is_refused() -> None:
    """An input_schema that is not valid JSON Schema is refused with the schema error."""
    doc = base()
    doc["input_schema"] = {"type": "nope"}
    path, reason = only(doc)
    assert path == "input_schema"
    assert reason.startswith("not a valid JSON Schema")


def test_input_schema_must_be_a_mapping() -> None:
    """input_schema given as a list is refused."""
    doc = base()
    doc["input_schema"] = ["type", "object"]
    assert only(doc) == ("input_schema", "must be a JSON Schema object")


def test_approval_step_needs_approvers_and_timeout() -> None:
    """An approval step without approvers or timeout is refused, each with its path and an example."""
    doc = base()
    doc["steps"].append({"id": "ok", "approval": {}})
    paths = dict(problems(doc))
    assert set(paths) == {"steps[1](ok).approval.approvers", "steps[1](ok).approval.timeout"}
    assert "users: [alice, bob]" in paths["steps[1](ok).approval.approvers"]
    assert "timeout: 3d" in paths["steps[1](ok).approval.timeout"]


def test_approval_quorum_that_can_never_be_met_is_refused() -> None:
    """A quorum larger than the listed users (and no groups) can never be met and is refused."""
    doc = base()
    doc["steps"].append(
        {"id": "ok", "approval": {"approvers": {"users": ["alice"]}, "quorum": 2, "timeout": "3d"}}
    )
    assert only(doc) == ("steps[1](ok).approval.quorum", "quorum 2 can never be met by the 1 listed user(s)")


def test_approval_fields_are_checked() -> None:
    """Misspelt approval fields get a did-you-mean; approver names must be lowercase names."""
    doc = base()
    doc["steps"].append(
        {"id": "ok", "approval": {"approvers": {"users": ["Alice"]}, "timeout": "3d", "quorom": 1}}
    )
    paths = dict(problems(doc))
    assert "unknown key `quorom` (did you mean `quorum`" in paths["steps[1](ok).approval"]
    assert "list of names" in paths["steps[1](ok).approval.approvers.users"]


def test_approval_on_reject_to_missing_step_is_refused() -> None:
    """on_reject naming a step that does not exist is reported with a did-you-mean."""
    doc = base()
    doc["steps"] += [
        {
            "id": "ok",
            "approval": {"approvers": {"users": ["alice"]}, "timeout": "3d", "on_reject": "rejectd"},
        },
        {"id": "rejected", "fail": {"error": "Rejected"}},
    ]
    path, reason = only(doc)
    assert path == "steps(ok).approval.on_reject"
    assert "did you mean `rejected`" in reason


def test_valid_approval_step_parses_with_defaults() -> None:
    """A minimal approval step parses: quorum 1, one rejection rejects, timeout rejects, no initiator."""
    from lockstep.core.definition import ApprovalStep

    doc = base()
    doc["steps"].append(
        {"id": "ok", "approval": {"approvers": {"users": ["alice"], "groups": ["finance"]}, "timeout": "3d"}}
    )
    step = parse_definition(doc).step("ok")
    assert isinstance(step, ApprovalStep)
    assert (step.users, step.groups, step.quorum, step.reject_quorum) == (("alice",), ("finance",), 1, 1)
    assert step.timeout == timedelta(days=3)
    assert (step.on_timeout, step.on_reject, step.allow_initiator) == ("reject", "fail", False)


def test_step_with_two_kinds_is_refused() -> None:
    """A step must have exactly one kind."""
    doc = base()
    doc["steps"].append({"id": "x", "wait": "1s", "activity": "svc.call"})
    path, reason = only(doc)
    assert path == "steps[1](x)"
    assert "exactly one of" in reason
    assert "found activity, wait" in reason


def test_bad_delivery_name_and_step_id() -> None:
    """Unknown delivery modes and malformed step ids are reported."""
    doc = base()
    doc["steps"][0]["delivery"] = "exactly_once"
    doc["steps"].append({"id": "Bad Id", "succeed": True})
    paths = dict(problems(doc))
    assert "idempotent, at_most_once" in paths["steps[0](a).delivery"]
    assert "lowercase" in paths["steps[1].id"]


def test_else_must_be_last_and_unique() -> None:
    """An else branch that is not last is refused."""
    doc = base()
    doc["steps"].append({"id": "c", "choice": [{"else": "a"}, {"if": "true", "next": "a"}]})
    assert only(doc) == ("steps[1](c).choice[0]", "the else branch must come last")


def test_bad_name_and_empty_steps_and_non_mapping() -> None:
    """Name format, missing steps and a non-mapping document each get a reason."""
    assert ("name", "required; lowercase letters, digits and -, e.g. order-fulfilment") in problems(
        {"name": "Order Fulfilment", "steps": [{"id": "a", "succeed": True}]}
    )
    assert problems({"name": "x", "steps": []}) == [("steps", "required: a non-empty list of steps")]
    assert problems([1, 2])[0][0] == "$"


def test_all_problems_are_reported_at_once() -> None:
    """Several unrelated problems are reported together, and str() lists each as path: reason."""
    doc = base()
    doc["stepz"] = 1
    del doc["steps"][0]["timeout"]
    doc["steps"].append({"id": "c", "choice": [{"if": "qty > 1", "next": "nowhere"}]})
    with pytest.raises(DefinitionError) as info:
        parse_definition(doc)
    paths = {p for p, _ in info.value.problems}
    assert paths == {"$", "steps[0](a).timeout", "steps[1](c).choice[0].if"}
    text = str(info.value)
    assert text.startswith("invalid definition: ")
    assert "$: unknown key `stepz`" in text
    assert "steps[0](a).timeout: required" in text


def test_errors_are_definition_errors_and_value_errors() -> None:
    """DefinitionError is a ValueError, so callers that catch ValueError also see it."""
    assert issubclass(DefinitionError, ValueError)


def test_non_json_yaml_values_are_reported_not_crashed() -> None:
    """A YAML value that is not JSON (an unquoted timestamp) is a DefinitionError with its path, not a
    TypeError, and the message says how to fix it."""
    doc = yaml.safe_load("name: x\nsteps:\n  - id: w\n    wait: {until: 2024-06-01T00:00:00Z}\n")
    with pytest.raises(DefinitionError) as info:
        parse_definition(doc)
    [(path, message)] = info.value.problems
    assert path == "$.steps[0].wait.until"
    assert message.startswith("datetime is not JSON: quote the value")
    assert "$.steps[0].wait.until: datetime is not JSON: quote the value" in str(info.value)
    quoted = yaml.safe_load("name: x\nsteps:\n  - id: w\n    wait: {until: '2024-06-01T00:00:00Z'}\n")
    parse_definition(quoted)  # quoting it, as the message says, makes it valid


# --- digest ----------------------------------------------------------------------------------------


def _reordered(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _reordered(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reordered(v) for v in value]
    return value


def test_digest_ignores_key_order() -> None:
    """Equal content gives the same digest whatever the order of keys at any depth."""
    doc = yaml.safe_load(EXAMPLE_YAML)
    other = _reordered(copy.deepcopy(doc))
    assert list(other) != list(doc)
    assert parse_definition(other).digest == parse_definition(doc).digest


def test_digest_changes_with_content() -> None:
    """Any change of content (here one timeout) gives a different digest."""
    doc = yaml.safe_load(EXAMPLE_YAML)
    changed = copy.deepcopy(doc)
    changed["steps"][3]["timeout"] = "11s"
    assert parse_definition(changed).digest != parse_definition(doc).digest


def test_digest_is_a_pinned_value() -> None:
    """The digest of the example is pinned: changing canonical JSON would re-identify stored versions."""
    assert example().digest == ("sha256:88e7bd87b74ac25a3b494ceeddb5366c17d49769397c36e228d03dd5aafca475")


def test_parse_does_not_mutate_or_alias_the_top_level_document() -> None:
    """The stored document is a copy: adding keys to the caller's dict later does not change it."""
    doc = base()
    d = parse_definition(doc)
    doc["description"] = "changed later"
    assert "description" not in d.document


# --- check_input ------------------------------------------------------------------------------------

SCHEMA_DOC = {
    "name": "typed",
    "input_schema": {
        "type": "object",
        "required": ["sku"],
        "properties": {
            "sku": {"type": "string"},
            "qty": {"type": "integer", "minimum": 1},
            "items": {"type": "array", "items": {"type": "integer"}},
        },
    },
    "steps": [{"id": "a", "succeed": True}],
}


def test_check_input_accepts_valid_input() -> None:
    """Input matching the schema passes."""
    parse_definition(SCHEMA_DOC).check_input({"sku": "A", "qty": 3, "items": [1, 2]})


def test_check_input_reports_each_problem_with_its_path() -> None:
    """Input errors name the definition and give a JSON path per problem."""
    d = parse_definition(SCHEMA_DOC)
    with pytest.raises(DefinitionError) as info:
        d.check_input({"qty": 0, "items": [1, "x"]})
    assert "input_schema of typed" in info.value.title
    paths = dict(info.value.problems)
    assert "'sku' is a required property" in paths["input"]
    assert "minimum of 1" in paths["input.qty"]
    assert "not of type 'integer'" in paths["input.items[1]"]


def test_check_input_without_schema_accepts_anything() -> None:
    """A definition without input_schema accepts any input."""
    parse_definition(base()).check_input({"whatever": [1, None]})


# --- durations and timestamps -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500ms", timedelta(milliseconds=500)),
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("2h", timedelta(hours=2)),
        ("3d", timedelta(days=3)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1.5s", timedelta(milliseconds=1500)),
        (" 2m ", timedelta(minutes=2)),
        ("1d2h3m4s5ms", timedelta(days=1, hours=2, minutes=3, seconds=4, milliseconds=5)),
    ],
)
def test_parse_duration_accepts_units_and_compounds(text: str, expected: timedelta) -> None:
    """ms, s, m, h, d and compounds like 1h30m parse to the exact timedelta."""
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "30", "1 s", "-1s", "1m30", "5S", "s", "1y", True, None, [1], 30, 1.5])
def test_parse_duration_rejects_everything_else(text: Any) -> None:
    """Unitless, signed, spaced, unknown-unit and non-string values raise ValueError."""
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("td", "text"),
    [
        (timedelta(milliseconds=350), "350ms"),
        (timedelta(0), "0ms"),
        (timedelta(seconds=1), "1s"),
        (timedelta(minutes=4, seconds=10), "4m 10s"),
        (timedelta(days=2, hours=21, minutes=5), "2d 21h"),
        (timedelta(hours=1), "1h"),
        (timedelta(seconds=-5), "-5s"),
    ],
)
def test_format_duration_is_compact(td: timedelta, text: str) -> None:
    """Durations render with at most two units, largest first."""
    assert format_duration(td) == text


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=0, max_value=9),
    st.integers(min_value=0, max_value=23),
    st.integers(min_value=0, max_value=59),
    st.integers(min_value=0, max_value=59),
)
def test_format_then_parse_round_trips_whole_units(d: int, h: int, m: int, s: int) -> None:
    """For durations of at most two non-zero units, parse(format(x).replace(' ', '')) == x."""
    td = timedelta(days=d, hours=h, minutes=m, seconds=s)
    nonzero = [v for v in (d, h, m, s) if v]
    if len(nonzero) > 2 or not nonzero:
        return
    assert parse_duration(format_duration(td).replace(" ", "")) == td


def test_iso_round_trip_and_format() -> None:
    """iso() gives UTC with milliseconds and Z; parse_iso inverts it and takes naive times as UTC."""
    from datetime import UTC, datetime, timezone

    dt = datetime(2024, 3, 1, 13, 30, 5, 123456, tzinfo=timezone(timedelta(hours=1)))
    assert iso(dt) == "2024-03-01T12:30:05.123Z"
    assert parse_iso("2024-03-01T12:30:05.123Z") == datetime(2024, 3, 1, 12, 30, 5, 123000, tzinfo=UTC)
    assert parse_iso("2024-03-01T12:30:05") == datetime(2024, 3, 1, 12, 30, 5, tzinfo=UTC)


# --- expressions and templates ------------------------------------------------------------------------


CTX = {"input": {"x": 3, "name": "Ada", "flag": True, "obj": {"k": [1, 2]}, "f": 1.5}}


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("${input.x}", 3),
        ("${input.flag}", True),
        ("${input.obj}", {"k": [1, 2]}),
        ("${input.f}", 1.5),
        ("${ input.x }", 3),
    ],
)
def test_whole_string_template_keeps_type(template: str, expected: Any) -> None:
    """A string that is exactly one `${expr}` yields the typed value, not its text."""
    assert compile_template(template).render(CTX) == expected


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("order-${input.x}", "order-3"),
        ("hi ${input.name}!", "hi Ada!"),
        ("${input.x}/${input.flag}", "3/true"),
        ("o=${input.obj}", 'o={"k": [1, 2]}'),
        ("no expressions", "no expressions"),
    ],
)
def test_mixed_string_template_renders_text(template: str, expected: str) -> None:
    """Strings mixing text and expressions render to text; strings render bare, other values as JSON."""
    assert compile_template(template).render(CTX) == expected


def test_nested_braces_and_quotes_inside_expression() -> None:
    """Braces and quoted braces inside `${...}` do not end the expression."""
    assert compile_template('${ {"a": 1}.a }').render({}) == 1
    assert compile_template('${ {"a": {"b": 2}}.a.b }').render({}) == 2
    assert compile_template('k-${"}"}-${input.x}').render(CTX) == "k-}-3"
    assert compile_template("${'{' + input.name}").render(CTX) == "{Ada"


def test_structured_template_renders_recursively() -> None:
    """Mappings and lists render every string inside; non-strings pass through unchanged."""
    t = compile_template({"a": ["${input.x}", 7, None], "b": {"c": "v${input.x}"}})
    assert t.render(CTX) == {"a": [3, 7, None], "b": {"c": "v3"}}
    assert not t.is_constant
    assert [e.source for e in t.expressions()] == ["input.x", "input.x"]
    assert compile_template({"a": [1, "b"]}).is_constant


@pytest.mark.parametrize(
    ("template", "ctx"),
    [
        ("${input.missing}", {"input": {}}),
        ("${1 / 0}", {}),
        ("${input.name + 1}", CTX),
        ("x-${input.missing.deeper}", {"input": {}}),
    ],
)
def test_evaluation_errors_become_expr_error(template: str, ctx: dict[str, Any]) -> None:
    """Missing fields, division by zero and type errors at render time raise ExprError naming the source."""
    with pytest.raises(ExprError, match="`"):
        compile_template(template).render(ctx)


@pytest.mark.parametrize("template", ["${input.x", "${input.x +}", "${foo}", "${}", "a ${  } b"])
def test_compile_errors_become_expr_error(template: str) -> None:
    """Unclosed, malformed, unknown-variable and empty expressions raise ExprError at compile time."""
    with pytest.raises(ExprError):
        compile_template(template)


def test_expr_roots_and_evaluate() -> None:
    """compile_expr records the roots it uses; evaluate returns JSON values (timestamps as iso)."""
    e = compile_expr("steps.a.output.n > input.x && run.id != ''")
    assert e.roots == frozenset({"steps", "input", "run"})
    ts = evaluate(compile_expr('timestamp("2024-01-01T00:00:00Z")'), {})
    assert ts == "2024-01-01T00:00:00.000Z"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("input.items.exists(i, i > 2)", True),
        ("input.items.all(i, i > 2)", False),
        ("input.items.exists_one(i, i > 2)", True),
        ("input.items.map(i, i * 2)", [2, 6]),
        ("input.items.filter(i, i > 2)", [3]),
    ],
)
def test_comprehension_macros_compile(source: str, expected: Any) -> None:
    """Standard CEL macros like input.items.exists(i, i > 2) compile and evaluate."""
    assert evaluate(compile_expr(source), {"input": {"items": [1, 3]}}) == expected


def test_comprehension_macro_body_still_refuses_unknown_variables() -> None:
    """Only the macro's own variable is allowed: another unknown name in its body is still refused."""
    with pytest.raises(ExprError, match="unknown variable foo"):
        compile_expr("input.items.exists(i, i > foo)")


def test_comprehension_macro_variable_is_not_a_root() -> None:
    """The variable a macro binds is not a root of the expression: roots stay within input/steps/run."""
    assert compile_expr("input.items.exists(i, i > 2)").roots == frozenset({"input"})


def test_macro_variable_used_outside_its_macro_is_refused_at_compile_time() -> None:
    """`x` is bound only inside exists(); using it after the macro is an unknown variable."""
    with pytest.raises(ExprError, match="unknown variable x"):
        compile_expr("input.items.exists(x, x > 1) && x > 0")
