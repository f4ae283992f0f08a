"""Publishing parallel and for-each steps: every problem named with its path and a fix, and the shape of
a definition bounded as a whole (nesting, items times nesting, attempts in flight, nested steps counted
in max_steps), so a hostile tenant cannot publish a definition whose runs fan out without bound."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from lockstep.core.definition import (
    DefinitionError,
    ForEachStep,
    Limits,
    ParallelStep,
    parse_definition,
)


def act(sid: str) -> dict[str, Any]:
    return {"id": sid, "activity": f"a.{sid}", "timeout": "5s"}


def doc(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"name": "shapes", "steps": list(steps)}


def problems(document: dict[str, Any], limits: Limits | None = None) -> list[tuple[str, str]]:
    with pytest.raises(DefinitionError) as err:
        parse_definition(document, limits)
    return err.value.problems


def test_a_parallel_step_parses_with_its_branches_join_and_on_failure() -> None:
    """Branches are lists of steps, or {steps, on_failure}; the join defaults to all."""
    d = parse_definition(
        doc(
            {
                "id": "p",
                "parallel": {
                    "join": {"n_of": 1},
                    "branches": {"a": [act("a1")], "b": {"on_failure": "continue", "steps": [act("b1")]}},
                },
            }
        )
    )
    p = d.step("p")
    assert isinstance(p, ParallelStep)
    assert (p.join, p.need) == ("n_of", 1)
    assert [(b.id, b.on_failure) for b in p.branches] == [("a", "fail"), ("b", "continue")]
    assert d.step("p.b.b1").id == "b1"  # a key names a nested step
    assert d.following("p.a.a1") is None  # the end of its branch


def test_a_for_each_step_has_document_determined_bounds() -> None:
    """Without max_items a for-each accepts the default for every tenant; concurrency defaults to 5."""
    d = parse_definition(doc({"id": "f", "for_each": {"items": "${input.xs}", "body": [act("x")]}}))
    f = d.step("f")
    assert isinstance(f, ForEachStep)
    assert (f.max_items, f.concurrency, f.join, f.need) == (100, 5, "all", None)


@pytest.mark.parametrize(
    ("body", "where", "says"),
    [
        ({"items": "${input.xs}"}, "for_each.body", "non-empty list of steps"),
        ({"body": [act("x")]}, "for_each.items", "required"),
        ({"items": "${input.xs}", "body": [act("x")], "concurency": 2}, "for_each", "`concurency` (did you"),
        ({"items": "${input.xs}", "body": [act("x")], "max_items": 0}, "max_items", ">= 1"),
        ({"items": "${input.xs}", "body": [act("x")], "join": "most"}, "join", "{n_of: K}"),
        ({"items": "${input.xs}", "body": [act("x")], "on_failure": "ignore"}, "on_failure", "continue"),
        ({"items": "not a list", "body": [act("x")]}, "for_each.items", "must give a list"),
    ],
)
def test_a_broken_for_each_is_refused_with_its_path(body: dict[str, Any], where: str, says: str) -> None:
    """Each mistake is reported at its path with what to write instead."""
    found = problems(doc({"id": "f", "for_each": body}))
    assert any(where in p and says in r for p, r in found), found


def test_the_default_max_items_above_the_tenants_limit_is_refused_with_the_fix() -> None:
    """A tenant allowing 10 items must declare max_items: a run could otherwise get the default 100."""
    found = problems(
        doc({"id": "f", "for_each": {"items": "${input.xs}", "body": [act("x")]}}), Limits(max_items=10)
    )
    assert any("the default max_items of 100" in r and "max_items: 10" in r for _, r in found), found


def test_n_of_more_than_the_branches_is_refused() -> None:
    """A join that can never be met is a publish error."""
    found = problems(
        doc({"id": "p", "parallel": {"join": {"n_of": 3}, "branches": {"a": [act("a")], "b": [act("b")]}}})
    )
    assert any("can never be met by 2 branch(es)" in r for _, r in found), found


def test_nested_steps_count_in_max_steps() -> None:
    """Twelve steps nested in a parallel step exceed a limit of ten, though the top level has one."""
    branches = {f"b{i}": [act(f"s{i}")] for i in range(12)}
    found = problems(doc({"id": "p", "parallel": {"branches": branches}}), Limits(max_steps=10))
    assert any("13 steps (12 of them inside" in r for _, r in found), found


def test_step_ids_are_unique_across_the_whole_definition() -> None:
    """A nested step may not reuse an id of the top level or of another branch."""
    found = problems(
        doc(act("x"), {"id": "p", "parallel": {"branches": {"a": [act("x")], "b": [act("y"), act("y")]}}})
    )
    assert sum("duplicate step id" in r for _, r in found) == 2, found


def test_a_nested_step_goes_only_to_steps_of_its_own_list() -> None:
    """next into another branch (or out to the top level) is refused, and says why."""
    a = {**act("a1"), "next": "b1"}
    found = problems(doc({"id": "p", "parallel": {"branches": {"a": [a], "b": [act("b1")]}}}, act("after")))
    assert any("not in the same branch or body" in r for _, r in found), found


def test_item_and_index_exist_only_inside_a_for_each_body() -> None:
    """An expression outside a body reading item is refused at publish."""
    found = problems(doc({**act("x"), "input": {"v": "${item.sku}"}}))
    assert any("exist only inside a for_each body" in r for _, r in found), found


def test_branch_depth_is_bounded() -> None:
    """Three levels of nesting exceed the default limit of two."""
    inner = {"id": "c", "parallel": {"branches": {"z": [act("z")]}}}
    middle = {"id": "b", "parallel": {"branches": {"y": [inner]}}}
    found = problems(doc({"id": "a", "parallel": {"branches": {"x": [middle]}}}))
    assert any("nest 3 levels deep" in r and "max_branch_depth" in r for _, r in found), found


def test_attack_items_times_nesting_cannot_explode() -> None:
    """A hostile tenant nests for-each steps of 1,000 items each: a million executions per run are
    refused at publish by max_expanded_steps, even when the tenant's max_items allows 1,000."""
    inner = {"id": "inner", "for_each": {"items": "${item.xs}", "max_items": 1000, "body": [act("x")]}}
    outer = {"id": "outer", "for_each": {"items": "${input.xs}", "max_items": 1000, "body": [inner]}}
    found = problems(doc(outer), replace(Limits(), max_items=1000))
    assert any("could execute 1,001,001 steps" in r and "max_expanded_steps" in r for _, r in found), found


def test_attack_attempts_in_flight_are_bounded_by_branches_times_concurrency() -> None:
    """Concurrency 50 times 4 branches is 200 attempts in flight: over max_active_attempts (20)."""
    body = {"items": "${input.xs}", "concurrency": 50, "max_items": 50, "body": [act("x")]}
    branches = {f"b{i}": [{"id": f"f{i}", "for_each": {**body, "body": [act(f"x{i}")]}}] for i in range(4)}
    found = problems(doc({"id": "p", "parallel": {"branches": branches}}))
    assert any("200 activity attempts in flight" in r and "max_active_attempts" in r for _, r in found), found
