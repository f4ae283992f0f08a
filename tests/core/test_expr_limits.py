"""Untrusted expressions: size, nesting and cost are bounded at publish time, and nothing the CEL
library (Rust) raises or does escapes as anything but ExprError / DefinitionError."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

from lockstep.core.definition import DefinitionError, Limits, parse_definition
from lockstep.core.expr import ExprError, _cel_compile, compile_expr, evaluate
from lockstep.core.exprcheck import STORED_EXPR_LIMITS, ExprLimits


def choice(condition: str) -> dict[str, Any]:
    return {
        "name": "route",
        "steps": [
            {"id": "route", "choice": [{"if": condition, "next": "done"}, {"else": "done"}]},
            {"id": "done", "succeed": True},
        ],
    }


def refusal(doc: dict[str, Any], limits: Limits | None = None) -> tuple[str, str]:
    with pytest.raises(DefinitionError) as info:
        parse_definition(doc, limits)
    assert len(info.value.problems) == 1, info.value.problems
    return info.value.problems[0]


def run_isolated(code: str) -> subprocess.CompletedProcess[str]:
    """Run code in a fresh interpreter: a segfault there is a return code here, not a dead pytest."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_long_operator_chain_is_refused_not_a_segfault() -> None:
    """`1 + 1 + ... (30,000 terms) > 0` (120 KB) is refused with the depth limit; the process lives."""
    proc = run_isolated(
        """
        from lockstep.core.definition import DefinitionError, parse_definition
        doc = {"name": "route", "steps": [
            {"id": "route", "choice": [{"if": " + ".join(["1"] * 30000) + " > 0", "next": "done"}]},
            {"id": "done", "succeed": True}]}
        try:
            parse_definition(doc)
        except DefinitionError as exc:
            print("refused:", exc.problems[0][0], "|", exc.problems[0][1][-200:])
        """
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-500:])
    assert "refused: steps[0](route).choice[0].if" in proc.stdout
    assert "the limit is 4096" in proc.stdout


def test_a_chain_that_compiles_but_overflows_when_evaluated_is_refused() -> None:
    """14,000 terms compiled before and segfaulted on the first evaluation: now refused at compile."""
    proc = run_isolated(
        """
        from lockstep.core.expr import ExprError, compile_expr, evaluate
        from lockstep.core.exprcheck import ExprLimits
        source = "+".join(["1"] * 14000)
        try:
            evaluate(compile_expr(source, ExprLimits(max_length=10**6)), {})
        except ExprError as exc:
            print("refused:", str(exc)[-200:])
        """
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-500:])
    assert "the limit is 200 (max_expression_depth)" in proc.stdout


def test_deep_brackets_are_refused_with_the_nesting_limit() -> None:
    """100,000 nested parentheses no longer raise PanicException (a BaseException): a clear refusal."""
    path, reason = refusal(choice("(" * 100_000 + "1" + ")" * 100_000 + " > 0"), None)
    assert path == "steps[0](route).choice[0].if"
    assert "expression is 200005 characters; the limit is 4096" in reason
    path, reason = refusal(choice("(" * 40 + "1" + ")" * 40 + " > 0"))
    assert "the limit is 32 (max_expression_nesting)" in reason


@pytest.mark.parametrize(
    ("source", "limit"),
    [
        ("[" * 33 + "1" + "]" * 33, "the limit is 32 (max_expression_nesting)"),
        ("{1:" * 33 + "1" + "}" * 33, "the limit is 32 (max_expression_nesting)"),
        ("input" + ".a" * 250, "the limit is 200 (max_expression_depth)"),
        ("!" * 250 + "true", "the limit is 200 (max_expression_depth)"),
        (" in ".join(["[1]"] * 250), "the limit is 200 (max_expression_depth)"),
        ("input" + "[0]" * 250, "the limit is 200 (max_expression_depth)"),
        ("[1].exists(a, [1].exists(b, [1].exists(c, true)))", "nested 3 deep; the limit is 2"),
    ],
)
def test_each_limit_says_which_and_where(source: str, limit: str) -> None:
    """Every structural limit names itself, its value and the bound, at the definition path."""
    path, reason = refusal(choice(source))
    assert path == "steps[0](route).choice[0].if"
    assert limit in reason


def test_the_panic_of_the_cel_parser_becomes_expr_error() -> None:
    """The binding's PanicException (a BaseException) on 100,000 brackets is caught as ExprError."""
    with pytest.raises(ExprError, match="invalid expression"):
        _cel_compile("(" * 100_000)


def test_a_context_the_binding_cannot_convert_becomes_expr_error() -> None:
    """A 1,000-deep value (older runs were accepted with any depth) fails the evaluation, not the server."""
    deep: Any = 1
    for _ in range(1000):
        deep = {"a": [deep]}
    with pytest.raises(ExprError):
        evaluate(compile_expr("input == input ? input : 0"), {"input": deep})


QUADRATIC = "input.items.exists(i, input.items.exists(j, i != j && i.sku == j.sku))"


def test_the_quadratic_duplicate_check_is_refused_at_publish() -> None:
    """The 9-second duplicate check (3,000 items) is refused: its worst case is over the cost limit."""
    path, reason = refusal(choice(QUADRATIC))
    assert path == "steps[0](route).choice[0].if"
    assert "worst-case cost" in reason
    assert "exceeds the limit of 500,000" in reason


def test_nested_map_is_refused_and_a_single_comprehension_is_allowed() -> None:
    """map over map is refused; exists/all over a list of the tenant's size publishes."""
    reason = refusal(choice("size(input.items.map(i, input.items.map(j, j.qty))) > 0"))[1]
    assert "worst-case cost" in reason
    parse_definition(choice("input.items.exists(i, i.sku == 'x' && i.qty > 2)"))
    parse_definition(choice("input.items.all(i, i.qty > 0) && size(input.items) < 10"))


def test_the_cost_follows_the_tenant_list_limit() -> None:
    """A filter over 1,000 large items is refused; with max_list_items 100 the same one publishes."""
    doc = choice("size(input.items.filter(i, i.qty > 2)) > 0")
    assert "worst-case cost" in refusal(doc)[1]
    small = Limits(expressions=ExprLimits(list_items=100))
    parse_definition(doc, small)


def test_string_work_inside_a_comprehension_is_costed() -> None:
    """`matches` on the whole input inside a comprehension (0.4 ms a call) is refused."""
    reason = refusal(choice("input.items.exists(i, input.s.matches('a*b'))"))[1]
    assert "worst-case cost" in reason


def test_many_expressions_in_one_template_are_bounded_together() -> None:
    """A template of many non-trivial expressions is refused as a whole at its path."""
    doc = {
        "name": "many",
        "steps": [
            {
                "id": "a",
                "activity": "x.y",
                "timeout": "1s",
                "input": {f"k{i}": f"${{input.items.exists(j, j.q == {i})}}" for i in range(60)},
            }
        ],
    }
    path, reason = refusal(doc)
    assert path == "steps[0](a).input"
    assert "the expressions of this template together have a worst-case cost" in reason


def test_stored_definitions_keep_loading_without_the_cost_bound() -> None:
    """A definition stored before the cost bound existed still parses with the STORED limits."""
    parse_definition(choice(QUADRATIC), Limits(expressions=STORED_EXPR_LIMITS))


def test_quadratic_exists_at_the_list_limit_takes_long_unbounded() -> None:
    """Why the bound exists: at 1,000 items the duplicate check takes far longer than 50 ms."""
    items = [{"sku": f"s{i}", "qty": i} for i in range(1000)]
    e = compile_expr(QUADRATIC)
    started = time.perf_counter()
    assert evaluate(e, {"input": {"items": items}}) is False
    assert time.perf_counter() - started > 0.1


def test_steps_are_narrowed_to_the_ones_an_expression_names() -> None:
    """steps['id'] reads only that step: the evaluation sees the same value from a smaller context."""
    e = compile_expr("steps['check-x'].output.n + steps.b.output.n")
    assert e.shape is not None
    assert e.shape.step_ids == frozenset({"check-x", "b"})
    ctx = {"steps": {"check-x": {"output": {"n": 1}}, "b": {"output": {"n": 2}}, "c": {"output": 3}}}
    assert evaluate(e, ctx) == 3
    assert compile_expr("size(steps) > 0").shape.step_ids is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "condition",
    [
        "input.s.matches(input.pattern)",  # a caller's pattern: 14 bytes can take 190 ms to compile
        "input.s.matches(r'(\\w{100}){100}')",
        "input.s.matches('((a{50}){50}){50}')",
    ],
)
def test_regexes_that_cannot_be_bounded_are_refused(condition: str) -> None:
    """`matches` compiles its pattern on each call: patterns from data and huge automata are refused."""
    assert "worst-case cost" in refusal(choice(condition))[1]


def test_an_ordinary_regex_publishes() -> None:
    """A literal pattern of a few counted repetitions is cheap and publishes."""
    parse_definition(choice("input.sku.matches('^[A-Z]{3}-[0-9]{4}$')"))


def test_a_comprehension_over_an_object_larger_than_the_list_bound_fails_cleanly() -> None:
    """Object keys are not bounded on entry: a comprehension over 20,000 keys is an ExprError, not a stall."""
    e = compile_expr("input.tags.exists(k, k == 'x')", STORED_EXPR_LIMITS)
    with pytest.raises(ExprError, match="an object with 20000 entries"):
        evaluate(e, {"input": {"tags": {f"k{i}": i for i in range(20_000)}}})
    assert evaluate(e, {"input": {"tags": {"x": 1}}}) is True


def test_three_argument_map_is_costed_as_a_comprehension() -> None:
    """`map(x, predicate, transform)` counts as a comprehension: three nested ones are refused."""
    nested = "size([1].map(a, true, [1].map(b, true, [1].map(c, true, c)))) > 0"
    assert "nested 3 deep; the limit is 2" in refusal(choice(nested))[1]
