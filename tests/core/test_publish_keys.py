"""Unknown keys are named, at the level that holds them, with a did-you-mean, at every level of a
definition; a CEL syntax error is one line and the expression with a caret under the position."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep.core.definition import DefinitionError, parse_definition
from lockstep.core.expr import ExprError, compile_expr


def problems(doc: Any) -> list[tuple[str, str]]:
    with pytest.raises(DefinitionError) as info:
        parse_definition(doc)
    return info.value.problems


def doc(*steps: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"name": "keys", "steps": list(steps), **top}


A = {"id": "a", "activity": "svc.call", "timeout": "5s"}


def test_a_misspelt_step_kind_is_named_with_did_you_mean() -> None:
    """`activty:` on a step with no kind says which key is unknown and suggests `activity`, instead of
    "a step needs exactly one of ... (found none)"."""
    charge = {"id": "charge", "activty": "pay.charge", "timeout": "5s"}
    found = problems(doc(A, {"id": "b", "wait": "1s"}, charge))
    assert found == [("steps[2](charge)", "unknown key `activty` (did you mean `activity`?)")]


def test_a_step_with_no_kind_and_no_close_key_still_lists_the_kinds() -> None:
    """A step without any kind key, and nothing close to one, is told which kinds exist."""
    ((path, reason),) = problems(doc({"id": "x"}))
    assert path == "steps[0](x)"
    kinds = "activity, choice, wait, fail, succeed, approval, parallel, for_each, run, wait_event, http"
    assert f"exactly one of {kinds} (found none)" in reason


@pytest.mark.parametrize(
    ("where", "document", "path", "key", "hint"),
    [
        ("top level", doc(A, stepz=[]), "$", "stepz", "steps"),
        ("step", doc({**A, "timout": "5s"}), "steps[0](a)", "timout", "timeout"),
        (
            "retry",
            doc({**A, "retry": {"max_attemps": 2}}),
            "steps[0](a).retry",
            "max_attemps",
            "max_attempts",
        ),
        (
            "compensation",
            doc({**A, "compensate": {"activity": "svc.undo", "inptu": {}}}),
            "steps[0](a).compensate",
            "inptu",
            "input",
        ),
        (
            "approval",
            doc({"id": "ok", "approval": {"approvers": {"users": ["al"]}, "timeout": "1d", "quorom": 1}}),
            "steps[0](ok).approval",
            "quorom",
            "quorum",
        ),
        (
            "approvers",
            doc({"id": "ok", "approval": {"approvers": {"user": ["al"]}, "timeout": "1d"}}),
            "steps[0](ok).approval.approvers",
            "user",
            "users",
        ),
        (
            "choice branch",
            doc(A, {"id": "c", "choice": [{"iff": "true", "next": "a"}, {"else": "a"}]}),
            "steps[1](c).choice[0]",
            "iff",
            "if",
        ),
        ("wait", doc({"id": "w", "wait": {"untl": "x"}}), "steps[0](w).wait", "untl", "until"),
    ],
)
def test_unknown_keys_are_named_at_every_level(
    where: str, document: dict[str, Any], path: str, key: str, hint: str
) -> None:
    """At each level an unknown key is reported at the level's path, naming the key and the close match."""
    found = dict(problems(document))
    assert found.get(path) == f"unknown key `{key}` (did you mean `{hint}`?)", (where, found)


def test_a_misspelt_branch_key_is_the_only_problem_of_its_branch() -> None:
    """`iff:` is reported once as an unknown key, not also as "a branch needs both if and next"."""
    found = problems(doc(A, {"id": "c", "choice": [{"iff": "true", "next": "a"}]}))
    assert [p for p, _ in found] == ["steps[1](c).choice[0]"]


def test_an_unknown_key_without_a_close_match_lists_the_allowed_keys() -> None:
    """With nothing close, the allowed keys are listed instead of a guess."""
    found = dict(problems(doc({**A, "retry": {"zzzzzz": 1}})))
    reason = found["steps[0](a).retry"]
    assert reason.startswith("unknown key `zzzzzz` (allowed: max_attempts, ")


# --- CEL syntax errors ------------------------------------------------------------------------------


def test_a_syntax_error_is_one_line_and_a_caret_under_the_position() -> None:
    """The parser's dump (`ERROR: <input>:1:15: ... expecting {...}` and its dotted diagram) becomes one
    readable line, then the expression, then `^` under the column."""
    with pytest.raises(ExprError) as info:
        compile_expr("input.amount >")
    lines = str(info.value).split("\n")
    assert len(lines) == 3, lines
    assert lines[0] == "invalid expression: syntax error at column 15: the expression ends too early"
    assert lines[1] == "    input.amount >"
    assert lines[2] == "    " + " " * 14 + "^"
    assert "ERROR: <input>" not in str(info.value)
    assert "expecting {" not in str(info.value)


@pytest.mark.parametrize(
    ("source", "column"),
    [
        ("input.qty > 1 &&& true", 17),  # the library's token error
        ("input.qty # 2", 11),  # lockstep's tokenizer: a character that is no token
        ("(input.qty > 1", 15),
        ("input.qty > > 1", 13),
    ],
)
def test_every_syntax_error_points_at_its_column(source: str, column: int) -> None:
    """Whichever parser finds the error (lockstep's tokenizer or the CEL library), the caret is under
    the column it names, and the first line says which column."""
    with pytest.raises(ExprError) as info:
        compile_expr(source)
    first, shown, caret = str(info.value).split("\n")
    assert f"at column {column}" in first, first
    assert shown == "    " + source
    assert caret.index("^") - 4 == column - 1, (caret, column)


def test_a_long_expression_shows_the_part_around_the_error() -> None:
    """An expression longer than a line shows a window around the column, the caret still under it."""
    source = "input.a == 1 && " * 20 + "input.b >"
    with pytest.raises(ExprError) as info:
        compile_expr(source)
    _, shown, caret = str(info.value).split("\n")
    assert len(shown) <= 4 + 80
    assert shown.startswith("    ...")
    assert shown.endswith("input.b >")
    assert caret.index("^") == len(shown)  # just after the `>`: where the missing operand belongs


def test_a_syntax_error_in_a_definition_keeps_its_caret_aligned() -> None:
    """In a DefinitionError's text the caret block stays intact: the path, then the indented lines."""
    document = doc(A, {"id": "c", "choice": [{"if": "input.qty >", "next": "a"}, {"else": "a"}]})
    with pytest.raises(DefinitionError) as info:
        parse_definition(document)
    text = str(info.value)
    assert "steps[1](c).choice[0].if: invalid expression: syntax error at column 12" in text
    lines = text.split("\n")
    shown = next(line for line in lines if line.strip() == "input.qty >")
    caret = lines[lines.index(shown) + 1]
    assert caret.index("^") == shown.index("input.qty >") + 11
