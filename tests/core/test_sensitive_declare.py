"""Declaring sensitive data: sensitive_input, x-lockstep-sensitive and output_sensitive are checked at
publish (path, reason, a fix), bounded by the limits, and compile into Definition.sensitivity."""

from __future__ import annotations

import copy
import time
from importlib import resources
from typing import Any

import pytest
import yaml

from lockstep.core.canonical import digest
from lockstep.core.definition import DefinitionError, Limits, parse_definition
from lockstep.core.sensitive import NOT_SENSITIVE

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "card": {"type": "object", "properties": {"number": {"type": "string"}, "cvc": {"type": "string"}}},
        "customer": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "iban": {"type": "string"}},
        },
        "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}},
    },
}


def doc(**extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": "pay",
        "input_schema": copy.deepcopy(SCHEMA),
        "steps": [{"id": "charge", "activity": "payments.charge", "timeout": "5s"}],
    }
    d.update(extra)
    return d


def problems(document: Any, limits: Limits | None = None) -> list[tuple[str, str]]:
    with pytest.raises(DefinitionError) as info:
        parse_definition(document, limits)
    return info.value.problems


def only(document: Any, limits: Limits | None = None) -> tuple[str, str]:
    found = problems(document, limits)
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("name", ["order-fulfilment.yaml", "vendor-onboarding.yaml", "purchase-order.yaml"])
def test_existing_examples_declare_nothing_and_keep_their_digest(name: str) -> None:
    """The shipped examples parse as before: nothing sensitive, digest = sha256 of the document as given."""
    document = yaml.safe_load(resources.files("lockstep.examples").joinpath(name).read_text())
    d = parse_definition(document)
    assert d.sensitivity is NOT_SENSITIVE
    assert not d.sensitivity.any
    assert d.digest == digest(document)


def test_sensitive_input_pointers_compile_to_the_input_classification() -> None:
    """sensitive_input lists places of the input; the classification keeps the outermost, sorted."""
    d = parse_definition(doc(sensitive_input=["/customer/iban", "/card", "/card/number"]))
    assert d.sensitivity.any
    assert d.sensitivity.input == ("/card", "/customer/iban")


def test_sensitive_input_true_marks_the_whole_input() -> None:
    """`sensitive_input: true` is the whole input (pointer "")."""
    assert parse_definition(doc(sensitive_input=True)).sensitivity.input == ("",)


def test_the_annotation_marks_properties_at_any_depth() -> None:
    """x-lockstep-sensitive: true on a nested property's schema marks that place."""
    document = doc()
    document["input_schema"]["properties"]["customer"]["properties"]["iban"]["x-lockstep-sensitive"] = True
    document["input_schema"]["properties"]["card"]["x-lockstep-sensitive"] = True
    assert parse_definition(document).sensitivity.input == ("/card", "/customer/iban")


def test_the_annotation_under_items_or_additional_properties_marks_the_container() -> None:
    """No pointer names "every item": an annotation under items (or additionalProperties) marks the array
    (or the object) itself."""
    document = doc()
    props = document["input_schema"]["properties"]
    props["items"]["items"]["properties"]["sku"]["x-lockstep-sensitive"] = True
    props["accounts"] = {"type": "object", "additionalProperties": {"x-lockstep-sensitive": True}}
    assert parse_definition(document).sensitivity.input == ("/accounts", "/items")


def test_the_annotation_through_a_local_ref_and_a_combinator() -> None:
    """Annotations reached through $ref (#/$defs/...) and allOf/anyOf mark the place that uses them."""
    schema = {
        "type": "object",
        "$defs": {"secret": {"type": "string", "x-lockstep-sensitive": True}},
        "properties": {
            "pin": {"$ref": "#/$defs/secret"},
            "profile": {"anyOf": [{"properties": {"ssn": {"$ref": "#/$defs/secret"}}}, {"type": "null"}]},
        },
    }
    assert parse_definition(doc(input_schema=schema)).sensitivity.input == ("/pin", "/profile/ssn")


def test_a_recursive_schema_with_a_sensitive_field_marks_where_the_recursion_starts() -> None:
    """A tree whose nodes hold a secret cannot be listed node by node: the recursive place is marked."""
    schema = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"secret": {"x-lockstep-sensitive": True}, "child": {"$ref": "#/$defs/node"}},
            }
        },
        "type": "object",
        "properties": {"tree": {"$ref": "#/$defs/node"}},
    }
    assert parse_definition(doc(input_schema=schema)).sensitivity.input == ("/tree/child", "/tree/secret")


def test_an_annotation_that_marks_nothing_is_refused() -> None:
    """Under `not` (or in $defs no $ref uses) the annotation marks no place of the input: refused."""
    schema = {"type": "object", "not": {"x-lockstep-sensitive": True}}
    path, reason = only(doc(input_schema=schema))
    assert path == "input_schema.not.x-lockstep-sensitive"
    assert "marks nothing" in reason
    assert "property" in reason


def test_an_annotation_that_is_not_a_boolean_is_refused() -> None:
    """x-lockstep-sensitive takes true or false."""
    document = doc()
    document["input_schema"]["properties"]["card"]["x-lockstep-sensitive"] = "yes"
    assert only(document) == ("input_schema.properties.card.x-lockstep-sensitive", "must be true or false")


def test_false_annotations_and_absent_fields_declare_nothing() -> None:
    """x-lockstep-sensitive: false everywhere is the same as declaring nothing."""
    document = doc(sensitive_input=[])
    document["input_schema"]["properties"]["card"]["x-lockstep-sensitive"] = False
    assert parse_definition(document).sensitivity is NOT_SENSITIVE


@pytest.mark.parametrize(
    ("pointer", "needle"),
    [
        ("/customer/ibn", "did you mean `/customer/iban`?"),
        ("/cusomer", "did you mean `/customer`?"),
        ("/input/card", "leave out /input"),
        ("/card/number/x", "/card/number is a string"),
        ("/items/sku", "name an item by its index (/items/0)"),
    ],
)
def test_a_pointer_the_schema_does_not_have_is_refused_with_a_fix(pointer: str, needle: str) -> None:
    """A pointer to a place the input_schema does not describe is refused, with did-you-mean."""
    path, reason = only(doc(sensitive_input=["/order_id", pointer]))
    assert path == "sensitive_input[1]"
    assert needle in reason, reason


def test_pointers_into_places_the_schema_leaves_open_are_accepted() -> None:
    """Where the schema does not say what a place holds (no properties, additionalProperties, an item
    of an array), any pointer below it is accepted."""
    schema = {
        "type": "object",
        "properties": {"meta": {"type": "object"}, "tags": {"type": "array", "items": {}}},
        "additionalProperties": {"type": "object"},
    }
    d = parse_definition(doc(input_schema=schema, sensitive_input=["/meta/a/b", "/tags/3/x", "/other/y"]))
    assert d.sensitivity.input == ("/meta/a/b", "/other/y", "/tags/3/x")


def test_without_a_schema_pointers_are_checked_for_form_only() -> None:
    """No input_schema: any well-formed pointer is accepted."""
    document = doc(sensitive_input=["/whatever/deep"])
    del document["input_schema"]
    assert parse_definition(document).sensitivity.input == ("/whatever/deep",)


@pytest.mark.parametrize(
    ("value", "path", "needle"),
    [
        ("/card", "sensitive_input", "list of JSON pointers"),
        (["card"], "sensitive_input[0]", "did you mean `/card`?"),
        (["input.card.number"], "sensitive_input[0]", "did you mean `/card/number`?"),
        (["/card~2"], "sensitive_input[0]", "~ must be followed by 0"),
        ([3], "sensitive_input[0]", "a string"),
        (["/card", "/card"], "sensitive_input[1]", "twice"),
    ],
)
def test_malformed_declarations_are_refused_with_their_path(value: Any, path: str, needle: str) -> None:
    """Bad sensitive_input values: a clear reason at the exact path, nothing published."""
    got_path, reason = only(doc(sensitive_input=value))
    assert got_path == path
    assert needle in reason, reason


def test_output_sensitive_is_declared_on_activity_steps() -> None:
    """output_sensitive: true (all of it) or pointers into the activity's output."""
    steps = [
        {"id": "a", "activity": "x.y", "timeout": "5s", "output_sensitive": True},
        {"id": "b", "activity": "x.y", "timeout": "5s", "output_sensitive": ["/token", "/card/last4"]},
    ]
    d = parse_definition(doc(steps=steps))
    assert d.sensitivity.step("a").output == ("",)
    assert d.sensitivity.step("b").output == ("/card/last4", "/token")
    step_b = d.step("b")
    assert step_b.output_sensitive == ("/token", "/card/last4")


def test_output_sensitive_elsewhere_or_malformed_is_refused() -> None:
    """output_sensitive belongs to activity steps; its pointers must be well-formed."""
    steps = [
        {"id": "a", "activity": "x.y", "timeout": "5s", "output_sensitive": ["token"]},
        {"id": "w", "wait": "1s", "output_sensitive": True},
    ]
    found = dict(problems(doc(steps=steps)))
    assert "did you mean `/token`?" in found["steps[0](a).output_sensitive[0]"]
    assert "unknown key `output_sensitive`" in found["steps[1](w)"]


def test_the_number_of_sensitive_places_is_bounded() -> None:
    """More declared places than max_sensitive_pointers is refused, naming the limit."""
    pointers = [f"/f{i}" for i in range(5)]
    document = doc(sensitive_input=pointers)
    del document["input_schema"]
    path, reason = only(document, Limits(max_sensitive_pointers=4))
    assert path == "$"
    assert "max_sensitive_pointers" in reason
    assert "5" in reason
    assert parse_definition(document, Limits(max_sensitive_pointers=5)).sensitivity.input


def test_the_length_of_a_pointer_is_bounded() -> None:
    """A pointer longer than max_pointer_length is refused at its path, naming the limit."""
    document = doc(sensitive_input=["/" + "a" * 40])
    del document["input_schema"]
    path, reason = only(document, Limits(max_pointer_length=20))
    assert path == "sensitive_input[0]"
    assert "max_pointer_length" in reason


def test_the_defaults_of_the_limits_are_the_documented_ones() -> None:
    """Limits() carries the server defaults of the two limits (docs/security.md lists them)."""
    from lockstep.core.limits import SERVER_LIMITS

    assert Limits().max_sensitive_pointers == SERVER_LIMITS["max_sensitive_pointers"].default == 64
    assert Limits().max_pointer_length == SERVER_LIMITS["max_pointer_length"].default == 256


def test_the_card_payment_example_parses_with_its_classification() -> None:
    """The shipped card-payment example declares its card, the customer's IBAN and the charge token."""
    text = resources.files("lockstep.examples").joinpath("card-payment.yaml").read_text()
    d = parse_definition(yaml.safe_load(text))
    s = d.sensitivity
    assert s.input == ("/card", "/customer/iban")
    charge = s.step("charge")
    assert charge.input == ("/card",)
    assert charge.output == ("/token",)
    assert charge.messages
    assert s.step("approve").details
    assert s.step("check-amount").messages is False
    assert s.output == ()


def test_a_ref_bomb_schema_is_refused_quickly() -> None:
    """Attack: $defs that each use the next one twice stand for 2^30 places; finding the annotations
    stops at the visit bound with a clear refusal instead of walking them all."""
    defs: dict[str, Any] = {"d30": {"type": "string", "x-lockstep-sensitive": True}}
    for i in range(30):
        nxt = {"$ref": f"#/$defs/d{i + 1}"}
        defs[f"d{i}"] = {"type": "object", "properties": {"a": nxt, "b": nxt}}
    schema = {"$defs": defs, "$ref": "#/$defs/d0"}
    started = time.perf_counter()
    path, reason = only(doc(input_schema=schema, sensitive_input=["/a/b/a/b/a/b/x"]))
    assert time.perf_counter() - started < 5
    assert path == "input_schema"
    assert "too intricate" in reason


def test_a_pointer_check_through_a_ref_bomb_is_bounded() -> None:
    """Attack: checking a deep pointer against a schema of mutually referring $defs ends in bounded time."""
    defs: dict[str, Any] = {}
    for i in range(40):
        branches = [{"$ref": f"#/$defs/d{(i + k) % 40}"} for k in (1, 2, 3)]
        defs[f"d{i}"] = {"anyOf": branches, "properties": {"p": {"$ref": f"#/$defs/d{(i + 1) % 40}"}}}
    schema = {"$defs": defs, "$ref": "#/$defs/d0"}
    started = time.perf_counter()
    parse_definition(doc(input_schema=schema, sensitive_input=["/p" * 100]))
    assert time.perf_counter() - started < 5
