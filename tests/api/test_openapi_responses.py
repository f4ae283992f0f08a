"""/openapi.json describes every 2xx answer of /v1 with its fields: no response (nor anything inside one)
is an untyped object, and every value that really is arbitrary JSON is named here with the reason."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from lockstep.api.app import create_app
from lockstep.core.explain import WAIT_KINDS
from lockstep.core.state import STATUSES
from lockstep.engine import Engine

# Where a response holds arbitrary JSON on purpose ("Schema.field"), and why. Nothing else may.
ARBITRARY = {
    "RunView.input": "the run's input: the tenant's JSON, checked against its definition's input_schema",
    "RunView.output": "the run's output: what its steps returned (tenant JSON)",
    "StepView.output": "what the step's activity returned (tenant JSON)",
    "LaneView.output": "what a branch or an item of a parallel or for-each step gave: a step's output",
    "TaskView.input": "the activity's input, rendered from the run's tenant JSON",
    "InboxItem.details": "what the approver is asked, rendered from the run's tenant JSON",
    "Decision.values": "an approver's form values (tenant JSON, checked against the request's form)",
    "EventView.data": "an event's data as recorded: its fields depend on the event's type (core/events/)",
    "DefinitionDocument.document": "the definition as the tenant wrote it (docs/definitions.md)",
    "SkipCommand.output": "the output an operator proposes for a skipped step (tenant JSON)",
    "ResolveCommand.output": "the output an operator proposes for a resolved step (tenant JSON)",
    "ScheduleView.input": "the input of a schedule's runs (tenant JSON, checked against the input_schema)",
}


def _document() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d, Engine.open(f"sqlite:///{d}/doc.sqlite") as e:
        return create_app(e.service, ui=False).openapi()


DOCUMENT = _document()


def _resolve(node: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    ref = node.get("$ref")
    if ref is None:
        return None, node
    name = ref.rsplit("/", 1)[-1]
    return name, DOCUMENT["components"]["schemas"][name]


def _typed(node: Any) -> bool:
    """Whether a schema says what its value is (a type, a reference, a union, an enum or a constant)."""
    return isinstance(node, dict) and bool(
        {"type", "$ref", "anyOf", "oneOf", "allOf", "enum", "const"} & set(node)
    )


def _walk(
    node: dict[str, Any], where: str, seen: frozenset[str], said: str = ""
) -> Iterator[tuple[str, dict[str, Any], str]]:
    """(name, schema, description) of every schema reachable from `node`: names are "Schema.field" (with
    nested fields, "[]" for items, "*" for the values of a map); a named schema (a component, or a
    recorded record inlined with its title) starts a new name. The description is the schema's own or,
    for an option of a union, the union's."""
    name, node = _resolve(node)
    if name is not None:
        if name in seen:
            return
        seen, where = seen | {name}, name
    elif node.get("type") == "object" and node.get("properties") and node.get("title"):
        where = node["title"]  # a recorded record (app/views/recorded.py), inlined
    said = node.get("description") or said
    yield where, node, said
    for key in ("anyOf", "oneOf", "allOf"):
        for option in node.get(key, []):
            yield from _walk(option, where, seen, said)
    for field, sub in node.get("properties", {}).items():
        yield from _walk(sub, f"{where}.{field}", seen)
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{where}[]", seen)
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{where}.*", seen)


def _responses() -> list[tuple[str, dict[str, Any]]]:
    """(label, JSON schema) of every 2xx response of a /v1 operation, in each media type it is served as
    (JSON, or JSON lines: the schema of one line)."""
    out = []
    for path, item in DOCUMENT["paths"].items():
        for method, op in item.items():
            for code, response in op["responses"].items():
                if path.startswith("/v1") and code.startswith("2"):
                    for media, body in response["content"].items():
                        label = f"{method.upper()} {path} {code}"
                        label += "" if media == "application/json" else f" {media}"
                        out.append((label, body["schema"]))
    return out


RESPONSES = _responses()


def _arbitrary(label: str, schema: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(name, what, description) of every untyped object and every value of any JSON in a response."""
    for where, node, said in _walk(schema, label, frozenset()):
        if node.get("type") == "object" and not node.get("properties"):
            if not _typed(node.get("additionalProperties")):
                yield where, "an untyped object", said
        elif not _typed(node):
            yield where, "any JSON", said


@pytest.mark.parametrize(("label", "schema"), RESPONSES, ids=[label for label, _ in RESPONSES])
def test_every_2xx_response_is_described_field_by_field(label: str, schema: dict[str, Any]) -> None:
    """A 2xx answer of /v1 has a JSON schema in which no object is untyped (no properties, any keys); a
    value of any JSON is only where ARBITRARY says why, and the document describes it."""
    assert _typed(schema), f"{label} has no schema"
    for where, what, said in _arbitrary(label, schema):
        assert where in ARBITRARY, f"{label}: {where} is {what}"
        assert said, f"{label}: {where} is {what} and the document does not say what it holds"


def test_the_arbitrary_list_names_only_what_is_there() -> None:
    """Every entry of ARBITRARY is in some response: the list cannot outlive what it excuses."""
    found = {where for label, schema in RESPONSES for where, _what, _said in _arbitrary(label, schema)}
    assert set(ARBITRARY) == found


def test_a_run_status_and_wait_kind_are_the_cores() -> None:
    """The run view's status and wait kind are enums of exactly the core's values."""
    run = DOCUMENT["components"]["schemas"]["RunView"]["properties"]
    assert run["status"]["enum"] == list(STATUSES)
    kinds = [option for option in run["wait_kind"]["anyOf"] if "enum" in option]
    assert kinds == [{"type": "string", "enum": list(WAIT_KINDS)}]


OPERATIONS = [
    (f"{method.upper()} {path}", op)
    for path, item in DOCUMENT["paths"].items()
    if path.startswith("/v1")
    for method, op in item.items()
]


@pytest.mark.parametrize(("label", "op"), OPERATIONS, ids=[label for label, _ in OPERATIONS])
def test_every_operation_has_a_typed_2xx_and_problem_errors(label: str, op: dict[str, Any]) -> None:
    """A /v1 operation answers at least one 2xx with a body schema, and documents its errors (401 and 422
    at least; 413 with a body, 415 with a JSON body) as problem documents (the Problem schema)."""
    ok = {code: r for code, r in op["responses"].items() if code.startswith("2")}
    assert ok, f"{label} documents no 2xx answer"
    assert all(r.get("content") for r in ok.values()), f"{label}: a 2xx answer without a body schema"
    errors = {code: r for code, r in op["responses"].items() if code[0] in "45"}
    assert {"401", "422"} <= set(errors), f"{label} documents errors {sorted(errors)}"
    body = op.get("requestBody", {}).get("content", {})
    if body:
        assert "413" in errors, f"{label} takes a body and does not document 413"
    if set(body) == {"application/json"}:
        assert "415" in errors, f"{label} takes JSON and does not document 415"
    for code, r in errors.items():
        schema = r["content"]["application/problem+json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/Problem"}, f"{label} {code}: {schema}"
        assert r["description"], f"{label} {code} says nothing about when"


def test_problem_schema_names_its_fields() -> None:
    """The Problem schema has the RFC 9457 fields, the stable code and the refusal mark, all but
    `instance` and `refused` required."""
    problem = DOCUMENT["components"]["schemas"]["Problem"]
    assert set(problem["properties"]) == {"type", "title", "status", "detail", "instance", "code", "refused"}
    assert set(problem["required"]) == {"type", "title", "status", "detail", "code"}
