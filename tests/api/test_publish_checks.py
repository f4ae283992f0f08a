"""The publish-time checks over POST /v1/definitions: a refusal is a 422 problem whose detail names the
path, the reason and the fix (a CEL syntax error keeps its caret under the expression, line for line);
what is accepted with warnings is a 201 whose `warnings` list says what and where, typed in the
OpenAPI document; a duplicate key anywhere in a YAML body is refused with the line."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep.app.principals import Principals

from .conftest import Api, Db, Tenant, assert_problem

pytestmark = pytest.mark.anyio


def definition(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "pay",
        "input_schema": {"type": "object", "properties": {"amount": {"type": "number"}}},
        "steps": [
            {"id": "approve", "approval": {"approvers": {"users": ["approver"]}, "timeout": "1d"}},
            {
                "id": "charge",
                "activity": "payments.charge",
                "input": {"amount": "${input.amount}"},
                "timeout": "5s",
            },
        ],
    }
    doc.update(changes)
    return doc


async def test_a_syntax_error_is_a_problem_with_the_caret_under_the_expression(api: Api, db: Db) -> None:
    """The detail is multi-line text: the path and reason, the expression, the caret under column 15."""
    doc = definition()
    doc["steps"].append(
        {"id": "route", "choice": [{"if": "input.amount >", "next": "charge"}, {"else": "end"}]}
    )
    body = assert_problem(await api.publish(doc), 422, "invalid_input")
    detail = body["detail"]
    assert detail.startswith(
        "invalid definition: steps[2](route).choice[0].if: invalid expression: syntax error at column 15"
    ), detail
    lines = detail.split("\n")
    assert lines[1] == "    input.amount >"
    assert lines[2] == "    " + " " * 14 + "^"
    assert db.count("definitions") == 0


async def test_unknown_keys_and_references_are_problems_naming_them(api: Api, db: Db) -> None:
    """A misspelt key and a read of a step that does not exist: both in one 422, each with its fix."""
    doc = definition()
    doc["steps"][1]["timout"] = "5s"
    doc["steps"][1]["input"] = {"amount": "${steps.aprove.output.amount}"}
    detail = assert_problem(await api.publish(doc), 422, "invalid_input")["detail"]
    assert "steps[1](charge): unknown key `timout` (did you mean `timeout`?)" in detail
    assert db.count("definitions") == 0
    del doc["steps"][1]["timout"]
    detail = assert_problem(await api.publish(doc), 422, "invalid_input")["detail"]
    assert (
        "steps[1](charge).input.amount: `steps.aprove`: no step `aprove` (did you mean `steps.approve`?)"
        in detail
    )


async def test_warnings_are_listed_in_the_publish_response(api: Api) -> None:
    """Accepted with warnings: 201 and {path, message} for each; identical content again lists them too."""
    doc = definition()
    doc["steps"][0]["approval"]["approvers"] = {"users": ["approver", "ghost"]}
    doc["steps"][1]["input"] = {"amount": "${input.amout}"}
    r = await api.publish(doc)
    assert r.status_code == 201, r.text
    warnings = r.json()["warnings"]
    assert [w["path"] for w in warnings] == [
        "steps[0](approve).approval.approvers",
        "steps[1](charge).input.amount",
    ]
    assert warnings[0]["message"] == "no user ghost in tenant acme"
    assert "did you mean `input.amount`?" in warnings[1]["message"]
    again = await api.publish(doc)
    assert again.status_code == 200
    assert again.json()["warnings"] == warnings


async def test_a_clean_definition_has_an_empty_warnings_list(api: Api) -> None:
    """The `approver` user of acme has the approver role: nothing to warn about."""
    r = await api.publish(definition())
    assert r.status_code == 201, r.text
    assert r.json()["warnings"] == []


async def test_the_warnings_are_typed_in_the_openapi_document(api: Api) -> None:
    """PublishResult.warnings is an array of PublishWarning {path, message}, both required strings."""
    spec = (await api.c.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    items = schemas["PublishResult"]["properties"]["warnings"]
    assert items["type"] == "array"
    assert items["items"] == {"$ref": "#/components/schemas/PublishWarning"}
    warning = schemas["PublishWarning"]
    assert set(warning["required"]) == {"path", "message"}
    assert {p["type"] for p in warning["properties"].values()} == {"string"}


async def test_a_duplicate_key_inside_a_step_is_refused_with_its_line(api: Api, db: Db) -> None:
    """A YAML body with `next:` twice in one step: 422 naming the key, its line and the first one's."""
    text = "name: dup\nsteps:\n  - id: a\n    wait: 1h\n    next: b\n    next: end\n  - {id: b, wait: 1h}\n"
    detail = assert_problem(await api.publish(text), 422)["detail"]
    assert "duplicate key 'next' at line 6, column 5 (first at line 5, column 5)" in detail
    assert db.count("definitions") == 0


async def test_approver_warnings_say_nothing_about_another_tenant(
    api: Api, principals: Principals, globex: Tenant
) -> None:
    """Attack: acme names globex's user carol as an approver to learn whether she exists. The warning
    is the one for a name that exists nowhere: only acme's users are looked up."""
    principals.create_user("globex", "carol", ["approver"], ["finance"])
    doc = definition()
    doc["steps"][0]["approval"]["approvers"] = {"users": ["carol", "nobody"], "groups": ["finance"]}
    r = await api.publish(doc)
    assert r.status_code == 201, r.text
    (warning,) = r.json()["warnings"]
    assert warning["message"].startswith(
        "no user carol in tenant acme; no user nobody in tenant acme; no user in group finance of tenant acme"
    )
    assert "globex" not in warning["message"]
