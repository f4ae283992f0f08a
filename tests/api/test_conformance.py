"""Live answers conform to the published schema (schemathesis's response checks): every read operation,
start and cancel, with schema-valid requests and a key holding every role, against a seeded database.
An answer whose status, content type, headers or body the document does not describe fails, and so does
a field the document does not name (the schema alone lets an object carry more)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode
from schemathesis.schemas import APIOperation

from .test_fuzz import DOCUMENT, FUZZ, OPERATIONS, Seeded, _aim, seeded

__all__ = ["seeded"]  # the seeded database of the fuzz, shared (a module fixture there, imported here)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
WRITES = {("POST", "/v1/runs"), ("POST", "/v1/runs/{run_id}/cancel")}
# JSON lines: one AuditEntry a line, not one JSON document (test_openapi_responses.py checks its schema).
STREAMED = {("GET", "/v1/audit/export")}
CHECKED = [
    op
    for op in OPERATIONS
    if (op.method.upper() == "GET" or (op.method.upper(), op.path) in WRITES)
    and (op.method.upper(), op.path) not in STREAMED
]
CONFORM = settings(FUZZ, max_examples=6)


def _schema(node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    return DOCUMENT["components"]["schemas"][ref.rsplit("/", 1)[-1]] if ref else node


def undocumented(value: Any, node: dict[str, Any], where: str = "$") -> list[str]:
    """Paths in `value` of object fields the schema `node` does not name (where it names any)."""
    node = _schema(node)
    options = node.get("anyOf") or node.get("oneOf")
    if options:
        found = [undocumented(value, option, where) for option in options]
        return min(found, key=len)
    if isinstance(value, dict):
        props = node.get("properties")
        out = []
        for key, sub in value.items():
            if props is not None and key not in props:
                out.append(f"{where}.{key}")
            elif props is not None:
                out += undocumented(sub, props[key], f"{where}.{key}")
            elif isinstance(node.get("additionalProperties"), dict):
                out += undocumented(sub, node["additionalProperties"], f"{where}.{key}")
        return out
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [x for i, item in enumerate(value) for x in undocumented(item, node["items"], f"{where}[{i}]")]
    return []


def _response_schema(op: APIOperation, status: int) -> dict[str, Any] | None:
    response = DOCUMENT["paths"][op.path][op.method.lower()]["responses"].get(str(status))
    content = (response or {}).get("content", {})
    body = content.get("application/json") or content.get("application/problem+json")
    return body["schema"] if body else None


def test_the_conformance_covers_reads_start_and_cancel() -> None:
    """Every GET of the document but the streamed export is checked, and start and cancel."""
    gets = [op for op in OPERATIONS if op.method.upper() == "GET"]
    assert len(CHECKED) == len(gets) - len(STREAMED) + len(WRITES)


def test_undocumented_finds_a_field_the_schema_lacks() -> None:
    """The extra-field check is not vacuous: a run view with a field RunView lacks is reported."""
    run = {"$ref": "#/components/schemas/RunView"}
    assert undocumented({"run_id": "r", "surprise": 1}, run) == ["$.surprise"]
    assert undocumented({"items": [{"seq": 1, "extra": 2}]}, {"$ref": "#/components/schemas/EventPage"}) == [
        "$.items[0].extra"
    ]


@pytest.mark.parametrize("operation", CHECKED, ids=[f"{op.method.upper()} {op.path}" for op in CHECKED])
@given(data=st.data(), pick=st.integers(min_value=0, max_value=63))
@CONFORM
def test_live_answers_conform_to_the_schema(
    operation: APIOperation, data: st.DataObject, pick: int, seeded: Seeded
) -> None:
    """A schema-valid request's answer has a documented status, content type and headers, a body the
    status's schema validates, and no field the schema does not name."""
    case = data.draw(operation.as_strategy(GenerationMode.POSITIVE), label="case")
    _aim(case, seeded, pick)
    response = case.call(app=seeded.app, headers={"Authorization": f"Bearer {seeded.key}"})
    case.validate_response(response, checks=CHECKS)
    schema = _response_schema(operation, response.status_code)
    if schema is not None:
        extra = undocumented(response.json(), schema)
        said = f"{case.method} {case.formatted_path} -> {response.status_code}"
        assert not extra, f"{said}: fields the schema does not name: {extra}"
