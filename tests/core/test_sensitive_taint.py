"""Taint analysis at publish: a template is sensitive where its expressions read a sensitive source;
unresolvable reads count as reading everything; places stored in clear refuse sensitive templates."""

from __future__ import annotations

import inspect
import json
import sys
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lockstep.core.definition import DefinitionError, Limits, parse_definition
from lockstep.core.expr import ExprError, compile_expr
from lockstep.core.exprcheck import STORED_EXPR_LIMITS, ExprLimits
from lockstep.core.exprreads import reads
from lockstep.core.sensitive import CLEAR_STEP, Sensitivity, replace_many

SENSITIVE_INPUT = ["/secret", "/nested/key"]
UNBOUNDED = Limits(expressions=ExprLimits(max_cost=None))  # the cost bound is not what is tested here


def definition(*steps: dict[str, Any], **extra: Any) -> Sensitivity:
    document: dict[str, Any] = {
        "name": "taint",
        "sensitive_input": SENSITIVE_INPUT,
        "steps": [
            {"id": "src", "activity": "x.src", "timeout": "5s", "output_sensitive": ["/tok"]},
            *steps,
        ],
    }
    document.update(extra)
    return parse_definition(document, UNBOUNDED).sensitivity


def input_pointers(template: Any) -> tuple[str, ...]:
    s = definition({"id": "use", "activity": "x.use", "timeout": "5s", "input": template})
    return s.step("use").input


# --- what an expression reads ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "paths"),
    [
        ("input.a.b", {("input", "a", "b")}),
        ("input['a'].b + 'x'", {("input", "a", "b")}),
        ("input.items[0].sku", {("input", "items")}),
        ("input.m[input.k]", {("input", "m"), ("input", "k")}),
        ("dyn(input).a", {("input",)}),
        ("steps['src'].output.tok", {("steps", "src", "output", "tok")}),
        ("steps[run.id].output", {("steps",), ("run", "id")}),
        ("input.items.map(i, i.card)", {("input", "items")}),
        ("input.items.exists(input, input.x)", {("input", "items"), ("input", "x")}),
        ("has(input.a) ? input.a : run.id", {("input", "a"), ("run", "id")}),
        ("{'k': input.a}.k", {("input", "a")}),
        ("1 + 2", set()),
    ],
)
def test_reads_names_the_paths_an_expression_reads(source: str, paths: set[tuple[str, ...]]) -> None:
    """Static paths up to the first dynamic part; a root used in any other way is read whole; loop
    variables are not roots unless named like one."""
    assert reads(compile_expr(source)) == paths


def test_reads_walks_a_deep_tree_without_recursion() -> None:
    """The walk over an expression's tree is a loop: a chain of 400 operators is read with only a few
    dozen frames of stack to spare (the cost check, which recurses, already ran at compile)."""
    e = compile_expr("input.a" + " + 1" * 400, STORED_EXPR_LIMITS)
    depth = len(inspect.stack(0))
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + 40)
    try:
        got = reads(e)
    finally:
        sys.setrecursionlimit(old)
    assert got == {("input", "a")}


# --- templates ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "pointers"),
    [
        ({"a": "${input.a}", "b": 1}, ()),
        ({"card": "${input.secret}", "order": "${input.order}"}, ("/card",)),
        ({"note": "for ${input.secret}"}, ("/note",)),
        ({"deep": {"x": ["${input.secret}", "${input.a}"]}}, ("/deep/x/0",)),
        ({"n": "${input.nested}"}, ("/n/key",)),  # a copy: only the sensitive place inside it
        ({"n": "${input.nested.other}"}, ()),
        ({"n": "${input.nested.key.x}"}, ("/n",)),
        ({"all": "${input}"}, ("/all/nested/key", "/all/secret")),
        ({"any": "${input[run.id]}"}, ("/any",)),  # dynamic: counts as every sensitive field
        ({"size": "${size(input.secret)}"}, ("/size",)),
        ({"t": "${steps.src.output.tok}", "u": "${steps.src.output.other}"}, ("/t",)),
        ({"s": "${steps.src.status}", "w": "${steps.src}"}, ("/w/output/tok",)),
        ({"all": "${steps}"}, ("/all/src/output/tok",)),
        ("${input.secret}", ("",)),
        ("prefix ${input.a}", ()),
        (["${input.a}", "${input.secret}"], ("/1",)),
    ],
)
def test_template_pointers(template: Any, pointers: tuple[str, ...]) -> None:
    """Where a rendered activity input is sensitive, for each way a template may read a source."""
    assert input_pointers(template) == pointers


def test_a_choice_reading_a_sensitive_value_stores_nothing_but_its_errors() -> None:
    """A condition on a sensitive value is fine; only the step's failure messages are sensitive."""
    s = definition({"id": "route", "choice": [{"if": "input.secret == 'x'", "next": "end"}, {"else": "end"}]})
    assert s.step("route").messages
    assert s.step("route").input == ()


def test_approval_details_fail_messages_and_run_output() -> None:
    """Approval details and fail messages that read a sensitive value are sensitive; so is the run output."""
    s = definition(
        {
            "id": "ok",
            "approval": {
                "approvers": {"users": ["alice"]},
                "timeout": "1d",
                "details": "pay ${input.secret}",
            },
        },
        {"id": "plain", "approval": {"approvers": {"users": ["bob"]}, "timeout": "1d", "details": "hi"}},
        {"id": "no", "fail": {"error": "Nope", "message": "bad ${input.nested.key}"}},
        output={"tok": "${steps.src.output.tok}", "order": "${input.order}"},
    )
    assert s.step("ok").details
    assert s.step("ok").messages
    assert not s.step("plain").details
    assert s.step("no").messages
    assert s.output == ("/tok",)
    assert s.run_messages


def test_without_an_output_template_the_run_output_is_any_step_output() -> None:
    """The default run output is the last step's output: every declared output place counts."""
    s = definition()
    assert s.output == ("/tok",)
    assert not s.run_messages


def test_compensation_input_and_output() -> None:
    """A compensation reading a sensitive output has a sensitive input, output and messages."""
    s = definition(
        {
            "id": "use",
            "activity": "x.use",
            "timeout": "5s",
            "input": {"order": "${input.order}"},
            "compensate": {"activity": "x.undo", "input": {"tok": "${steps.src.output.tok}"}},
        }
    )
    use = s.step("use")
    assert use.input == ()
    assert use.compensation_input == ("/tok",)
    assert use.compensation_output
    assert use.messages
    assert s.step("src").output == ("/tok",)
    assert s.step("src").messages


def test_an_idempotency_key_from_a_sensitive_value_is_refused() -> None:
    """An idempotency key is stored and handed out in clear: reading a sensitive value is refused."""
    with pytest.raises(DefinitionError) as info:
        definition(
            {"id": "use", "activity": "x.use", "timeout": "5s", "idempotency_key": "k-${input.secret}"}
        )
    ((path, reason),) = info.value.problems
    assert path == "steps(use).idempotency_key"
    assert "sensitive" in reason
    assert "not sensitive" in reason


def test_a_wait_until_from_a_sensitive_value_is_refused() -> None:
    """The time a wait fires is stored in clear for the scheduler: reading a sensitive value is refused."""
    with pytest.raises(DefinitionError) as info:
        definition({"id": "w", "wait": {"until": "${steps.src.output.tok}"}})
    ((path, reason),) = info.value.problems
    assert path == "steps(w).wait.until"
    assert "scheduler" in reason


def test_the_same_keys_and_waits_from_clear_values_are_accepted() -> None:
    """Keys and waits from fields that are not sensitive publish as usual."""
    s = definition(
        {"id": "use", "activity": "x.use", "timeout": "5s", "idempotency_key": "k-${input.order}"},
        {"id": "w", "wait": {"until": "${input.when}"}},
    )
    assert s.step("use") == CLEAR_STEP
    assert s.step("w") == CLEAR_STEP


# --- properties --------------------------------------------------------------------------------------

CLEAR_EXPRS = [
    "input.a",
    "input.nested.other",
    "input.list.exists(i, i > 1)",
    "steps.src.output.other",
    "steps.src.status",
    "run.id",
    "size(input.a)",
    "input.a + 'x'",
    "has(input.nested.other) ? input.nested.other : 'none'",
    "[input.a, run.id]",
    "{'k': input.a}",
]
SENSITIVE_EXPRS = [
    "input.secret",
    "input.nested",
    "input.nested.key",
    "input",
    "input['secret']",
    "input[run.id]",
    "'card ' + input.secret",
    "[input.nested.key]",
    "{'k': input.secret}",
    "steps.src.output",
    "steps.src.output.tok",
    "steps['src']",
    "steps",
    "dyn(input).secret",
    "input.list.exists(x, x == input.secret) ? input.secret : ''",
]


def templates(exprs: list[str]) -> st.SearchStrategy[Any]:
    leaf = st.sampled_from(exprs).flatmap(
        lambda e: st.sampled_from([f"${{{e}}}", f"pre ${{{e}}} post", f"${{{e}}}${{run.id}}"])
    )
    return st.recursive(
        leaf | st.integers() | st.just("constant"),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abcd"), inner, max_size=3)
        ),
        max_leaves=6,
    )


CONTEXT = {
    "input": {
        "a": "A",
        "order": "O-1",
        "secret": "S3CR3T-input",
        "nested": {"key": "S3CR3T-nested", "other": "clear"},
        "list": [1, 2],
    },
    "steps": {"src": {"output": {"tok": "S3CR3T-tok", "other": "o"}, "status": "succeeded", "attempts": 1}},
    "run": {"id": "secret", "tenant": "t", "definition": "taint", "version": 1, "started_at": "now"},
}


@settings(max_examples=150, deadline=None)
@given(templates(CLEAR_EXPRS))
def test_a_template_that_reads_no_sensitive_source_is_never_sensitive(template: Any) -> None:
    """Whatever a template does with values that are not sensitive, nothing of it is classified."""
    assert input_pointers(template) == ()


@settings(max_examples=150, deadline=None)
@given(templates(CLEAR_EXPRS + SENSITIVE_EXPRS), st.sampled_from(SENSITIVE_EXPRS))
def test_sealing_the_classified_places_leaves_no_sensitive_value(template: Any, copied: str) -> None:
    """Render any template (with at least one sensitive read) and seal the places classified sensitive:
    no sensitive value is left in clear, and something was classified."""
    template = {"copy": f"${{{copied}}}", "rest": template}
    d = parse_definition(
        {
            "name": "taint",
            "sensitive_input": SENSITIVE_INPUT,
            "steps": [
                {"id": "src", "activity": "x.src", "timeout": "5s", "output_sensitive": ["/tok"]},
                {"id": "use", "activity": "x.use", "timeout": "5s", "input": template},
            ],
        },
        UNBOUNDED,
    )
    step = d.step("use")
    try:
        rendered = step.input.render(CONTEXT)  # type: ignore[union-attr]
    except ExprError:
        assume(False)
    pointers = d.sensitivity.step("use").input
    assert pointers
    assert any(p == "/copy" or p.startswith("/copy/") for p in pointers)
    sealed = replace_many(rendered, pointers, lambda p, v: {"$sealed": p})
    assert "S3CR3T" not in json.dumps(sealed)
