"""Publishing refuses reads of what will not be there when the expression is evaluated: input fields
input_schema does not declare (a warning where it allows other properties), unknown steps and fields,
steps that cannot have run at that point of the flow graph (later, on another branch, never reached;
a step in a loop can have run before itself); and choice conditions whose type is known and not
boolean. Stored versions are loaded without these checks."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep.core.definition import DefinitionError, Limits, parse_definition


def act(sid: str, **extra: Any) -> dict[str, Any]:
    return {"id": sid, "activity": "svc.call", "timeout": "5s", **extra}


def doc(*steps: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"name": "refs", "steps": list(steps), **top}


def problems(document: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(DefinitionError) as info:
        parse_definition(document)
    out: dict[str, str] = {}
    for path, reason in info.value.problems:
        assert path not in out, (path, info.value.problems)
        out[path] = reason
    return out


def accepted(document: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The warnings of a definition that must be accepted."""
    return parse_definition(document).warnings


CLOSED = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "amount": {"type": "number"},
        "paid": {"type": "boolean"},
        "note": {"type": "string"},
        "lines": {"type": "array", "items": {"type": "object"}},
        "customer": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"name": {"type": "string"}, "email": {"type": "string"}},
        },
    },
}


# --- input ------------------------------------------------------------------------------------------


def test_a_misspelt_input_field_is_refused_with_did_you_mean() -> None:
    """`input.amout` where the schema declares `amount` and no other properties is refused."""
    found = problems(doc(act("charge", input={"amount": "${input.amout}"}), input_schema=CLOSED))
    assert found == {
        "steps[0](charge).input.amount": "`input.amout`: input_schema has no property `amout` at input "
        "(did you mean `input.amount`?) and allows no other (additionalProperties: false): fix the "
        "expression, or add `amout` to the schema"
    }


def test_a_misspelt_nested_input_field_is_refused() -> None:
    """`input.customer.nmae` is checked against the nested object's properties."""
    found = problems(doc(act("mail", input={"to": "hi ${input.customer.nmae}"}), input_schema=CLOSED))
    reason = found["steps[0](mail).input.to"]
    assert reason.startswith("`input.customer.nmae`: input_schema has no property `nmae` at input.customer")
    assert "(did you mean `input.customer.name`?)" in reason


def test_reads_into_a_scalar_or_an_array_are_refused() -> None:
    """A field of a string, or a field of an array, can never be there."""
    found = problems(
        doc(
            act("a", input={"x": "${input.note.first}", "y": "${size(input.lines.total)}"}),
            input_schema=CLOSED,
        )
    )
    assert "input.note is a string in input_schema: it has no field `first`" in found["steps[0](a).input.x"]
    assert "input.lines is an array in input_schema" in found["steps[0](a).input.y"]


def test_an_undeclared_field_of_an_open_schema_is_a_warning() -> None:
    """Without additionalProperties: false other properties may exist: publishing warns, with the close
    match, and accepts."""
    schema = {"type": "object", "properties": {"amount": {"type": "number"}}}
    warnings = accepted(doc(act("charge", input={"amount": "${input.amout}"}), input_schema=schema))
    assert len(warnings) == 1
    path, reason = warnings[0]
    assert path == "steps[0](charge).input.amount"
    assert "input_schema does not declare `amout` at input (did you mean `input.amount`?)" in reason
    assert "warning only" in reason


def test_declared_and_undescribed_input_is_accepted_silently() -> None:
    """Declared fields, fields under additionalProperties schemas, and schemas that do not say
    (no properties, patternProperties, anyOf...) give no problem and no warning."""
    schema = {
        "type": "object",
        "properties": {
            "amount": {"type": "number"},
            "meta": {"type": "object"},
            "tags": {"type": "object", "additionalProperties": {"type": "string"}},
            "any": {"anyOf": [{"type": "object", "properties": {"a": {}}}, {"type": "object"}]},
        },
    }
    reads = "${input.amount} ${input.meta.whatever} ${input.tags.red} ${input.any.b} ${has(input.amount)}"
    assert accepted(doc(act("a", input={"x": reads}), input_schema=schema)) == ()
    assert accepted(doc(act("a", input={"x": "${input.whatever}"}))) == ()  # no schema: nothing to check


def test_comprehension_variables_are_not_input_reads() -> None:
    """`input.lines.exists(l, l.qty > 1)` reads input.lines, not a field `qty` of the input."""
    assert (
        accepted(doc(act("a", input={"x": "${input.lines.exists(l, l.qty > 1)}"}), input_schema=CLOSED)) == ()
    )


# --- steps: unknown, fields ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "step", "path"),
    [
        ("template", act("b", input={"id": "${steps.payot.output.id}"}), "steps[1](b).input.id"),
        (
            "idempotency key",
            act("b", idempotency_key="k-${steps.payot.output}"),
            "steps[1](b).idempotency_key",
        ),
        (
            "compensation input",
            act("b", compensate={"activity": "svc.undo", "input": {"id": "${steps.payot.output}"}}),
            "steps[1](b).compensate.input.id",
        ),
        (
            "condition",
            {"id": "b", "choice": [{"if": "steps.payot.output.ok", "next": "end"}, {"else": "end"}]},
            "steps[1](b).choice[0].if",
        ),
        (
            "approval details",
            {
                "id": "b",
                "approval": {"approvers": {"users": ["al"]}, "timeout": "1d", "details": "${steps.payot}"},
            },
            "steps[1](b).approval.details",
        ),
        (
            "fail message",
            {"id": "b", "fail": {"error": "E", "message": "${steps.payot.status}"}},
            "steps[1](b).fail.message",
        ),
        ("wait until", {"id": "b", "wait": {"until": "${steps.payot.output.at}"}}, "steps[1](b).wait.until"),
        (
            "succeed output",
            {"id": "b", "succeed": {"output": "${steps.payot.output}"}},
            "steps[1](b).succeed.output",
        ),
    ],
)
def test_an_unknown_step_is_refused_everywhere_with_did_you_mean(
    where: str, step: dict[str, Any], path: str
) -> None:
    """`steps.payot` in any template, condition, compensation input, approval details... is refused."""
    found = problems(doc(act("payout"), step))
    assert found == {path: "`steps.payot`: no step `payot` (did you mean `steps.payout`?)"}, where


def test_an_unknown_step_in_the_output_mapping_is_refused() -> None:
    """The definition's `output` mapping is checked like any template."""
    found = problems(doc(act("payout"), output={"id": "${steps.payot.output.id}"}))
    assert found == {"output.id": "`steps.payot`: no step `payot` (did you mean `steps.payout`?)"}


def test_an_unknown_step_with_nothing_close_lists_the_steps() -> None:
    """With no close match the step ids are listed."""
    found = problems(doc(act("payout"), act("b", input="${steps.zzz.output}")))
    assert found["steps[1](b).input"] == "`steps.zzz`: no step `zzz`; the steps are payout, b"


def test_unknown_fields_of_a_step_and_of_the_run_are_refused() -> None:
    """A step's context has output, status and attempts; the run's id, tenant, definition, version and
    started_at."""
    found = problems(doc(act("a"), act("b", input={"x": "${steps.a.outptu}", "y": "${run.idd}"})))
    assert found["steps[1](b).input.x"] == (
        "`steps.a.outptu`: a step's context has output, status, attempts, not `outptu` "
        "(did you mean `output`?)"
    )
    assert found["steps[1](b).input.y"] == "`run.idd`: the run has no field `idd` (did you mean `id`?)"


def test_ids_with_dashes_are_read_by_index() -> None:
    """`steps["cooling-off"].output` is a read of step cooling-off (known or not)."""
    assert accepted(doc(act("cooling-off"), act("b", input='${steps["cooling-off"].output}'))) == ()
    found = problems(doc(act("cooling-off"), act("b", input='${steps["coolingoff"].output}')))
    assert 'did you mean `steps["cooling-off"]`?' in found["steps[1](b).input"]


# --- steps: can they have run at that point? ---------------------------------------------------------


def test_a_later_step_is_refused_with_the_path_that_shows_it() -> None:
    """A step that comes later, with no way back, cannot have run: the reason shows the path."""
    found = problems(doc(act("reserve", input="${steps.ship.output}"), act("charge"), act("ship")))
    assert found == {
        "steps[0](reserve).input": "`steps.ship.output`: step `ship` runs only after `reserve` "
        "(reserve → charge → ship) and no path leads from it back to `reserve`: "
        "read it in a step after `ship`"
    }


def test_a_step_reading_its_own_output_outside_a_loop_is_refused() -> None:
    """An activity's input is rendered before the step runs: its own output is always empty there."""
    found = problems(doc(act("charge", input="${steps.charge.output}")))
    assert "step `charge` reads its own context before it has run" in found["steps[0](charge).input"]


def test_a_step_on_another_branch_is_refused_with_both_paths() -> None:
    """Two exclusive choice branches: one cannot read the other's output."""
    steps = [
        act("a"),
        {"id": "route", "choice": [{"if": "input.big == true", "next": "review"}, {"else": "fast"}]},
        act("review", next="end"),
        act("fast", input="${steps.review.output}", next="end"),
    ]
    found = problems(doc(*steps))
    assert found == {
        "steps[3](fast).input": "`steps.review.output`: step `review` cannot have run before `fast`: they "
        "are on different branches (a → route → review; a → route → fast) and no path goes from `review` "
        "to `fast`"
    }


def test_a_step_on_one_branch_is_readable_where_the_branches_meet() -> None:
    """After the branches join, a step of either branch can have run (its output may be empty)."""
    steps = [
        {"id": "route", "choice": [{"if": "input.big == true", "next": "review"}, {"else": "ship"}]},
        act("review"),
        act("ship", input="${steps.review.output}"),
    ]
    assert accepted(doc(*steps)) == ()


def test_in_a_loop_a_step_can_read_itself_and_later_steps() -> None:
    """A polling loop: on a later pass the step itself, and the steps after it in the loop, have run;
    a step after the loop can read every step of the loop."""
    steps = [
        act("poll", input={"last": "${steps.poll.output}", "waited": "${steps.pause.status}"}),
        {
            "id": "done",
            "choice": [{"if": "steps.poll.output.ready == true", "next": "after"}, {"else": "pause"}],
        },
        {"id": "pause", "wait": "1m", "next": "poll"},
        act("after", input="${steps.pause.attempts}"),
    ]
    assert accepted(doc(*steps)) == ()
    # the same read from a step before the loop is refused
    found = problems(doc(act("first", input="${steps.poll.output}"), *steps))
    assert "step `poll` runs only after `first`" in found["steps[0](first).input"]


def test_approval_rejection_and_timeout_edges_are_followed() -> None:
    """on_reject and on_timeout are ways through the flow: the step they lead to may read the approval."""
    steps = [
        {
            "id": "ok",
            "approval": {
                "approvers": {"users": ["al"]},
                "timeout": "1d",
                "on_reject": "sorry",
                "on_timeout": "late",
            },
        },
        act("go", next="end"),
        act("sorry", input="${steps.ok.output}", next="end"),
        act("late", input="${steps.ok.status} ${steps.go.output}", next="end"),
    ]
    found = problems(doc(*steps))
    assert list(found) == ["steps[3](late).input"]
    assert "step `go` cannot have run before `late`" in found["steps[3](late).input"]


def test_a_compensation_may_read_its_step_and_what_came_after() -> None:
    """A compensation runs after its step completed, when a later step failed: it may read them all,
    but not a step on a branch its step is never on."""
    steps = [
        {"id": "route", "choice": [{"if": "input.big == true", "next": "big"}, {"else": "charge"}]},
        act("big", next="end"),
        act(
            "charge",
            compensate={
                "activity": "svc.refund",
                "input": {"c": "${steps.charge.output}", "s": "${steps.ship.output}"},
            },
        ),
        act("ship"),
    ]
    assert accepted(doc(*steps)) == ()
    steps[2]["compensate"]["input"]["b"] = "${steps.big.output}"
    found = problems(doc(*steps))
    assert (
        "step `big` cannot have run when `charge` is compensated"
        in found["steps[2](charge).compensate.input.b"]
    )


def test_the_output_mapping_reads_what_can_have_run_at_the_end() -> None:
    """The definition's output is rendered when the run completes: a step only on a path to a fail step
    cannot have run then."""
    steps = [
        {"id": "route", "choice": [{"if": "input.bad == true", "next": "oops"}, {"else": "ok"}]},
        act("oops"),
        {"id": "stop", "fail": {"error": "Bad", "message": "bad"}},
        act("ok"),
    ]
    found = problems(doc(*steps, output={"x": "${steps.oops.output}", "y": "${steps.ok.output}"}))
    assert list(found) == ["output.x"]
    assert "step `oops` cannot have run when the run completes with this output" in found["output.x"]


def test_unreachable_steps_and_unused_output_are_warnings() -> None:
    """A step no path reaches, or an output no completion renders, is accepted with a warning."""
    steps = [act("a", next="end"), act("dead", input="${steps.nothing.output}")]
    assert accepted(doc(*steps)) == (
        ("steps[1](dead)", "no path from the first step `a` leads here: it never runs"),
    )
    warned = accepted(doc({"id": "f", "fail": {"error": "E"}}, output="${steps.f.output}"))
    assert warned[0][0] == "output"


# --- condition types ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "says"),
    [
        (
            "input.amount",
            "`input.amount` is a number (input_schema), never true or false: "
            "compare it, e.g. `input.amount > 0`",
        ),
        ("input.customer.name", "is a string (input_schema)"),
        ("input.lines", "is a list (input_schema), never true or false: test its size"),
        ("input.customer", "is an object (input_schema)"),
        ("input.amount + 1", "is a number"),
        ("size(input.lines)", "is a number"),
        ("steps.a.status", "`steps.a.status` is a string, never true or false"),
        ("run.version", "is a number"),
        ("1", "`1` is a constant number, never true or false"),
        ("'yes'", "is a constant string"),
        ("null", "is a constant null"),
        ("input.paid ? 1 : 2", "is a number"),
    ],
)
def test_a_condition_that_is_never_boolean_is_refused(condition: str, says: str) -> None:
    """Where the type is known (schema, literal, operator, function, context field) and is not boolean,
    the condition can never choose its branch."""
    found = problems(
        doc(
            act("a"),
            {"id": "c", "choice": [{"if": condition, "next": "a"}, {"else": "end"}]},
            input_schema=CLOSED,
        )
    )
    assert says in found["steps[1](c).choice[0].if"], found


@pytest.mark.parametrize(
    "condition",
    [
        "input.paid",
        "input.amount > 10",
        "input.note == 'x' || input.paid",
        "!input.paid",
        "has(input.customer.name)",
        "input.lines.exists(l, l.qty > 1)",
        "input.note.startsWith('a')",
        "steps.a.output.ok",  # an activity's output has no declared type
        "input.paid ? true : input.amount > 3",
        "true",
    ],
)
def test_conditions_that_are_or_may_be_boolean_are_accepted(condition: str) -> None:
    """Boolean, or of a type not known statically: accepted."""
    choice = {"id": "c", "choice": [{"if": condition, "next": "a"}, {"else": "end"}]}
    assert accepted(doc(act("a"), choice, input_schema=CLOSED)) == ()


def test_a_nullable_or_untyped_field_is_not_refused_as_a_condition() -> None:
    """`type: [boolean, null]`, no type, or an open schema: the condition may be boolean."""
    schema = {"type": "object", "properties": {"flag": {"type": ["boolean", "null"]}, "x": {}}}
    for condition in ("input.flag", "input.x", "input.other"):
        choice = {"id": "c", "choice": [{"if": condition, "next": "a"}, {"else": "end"}]}
        parse_definition(doc(act("a"), choice, input_schema=schema))


# --- stored versions ---------------------------------------------------------------------------------


def test_stored_versions_load_without_the_publish_checks() -> None:
    """A version stored before these checks existed still loads (runs on it must go on)."""
    document = doc(act("a", input="${steps.later.output} ${input.amout}"), act("later"), input_schema=CLOSED)
    with pytest.raises(DefinitionError):
        parse_definition(document)
    assert parse_definition(document, Limits(publish_checks=False)).steps[0].id == "a"


def test_a_schema_too_large_to_follow_is_a_warning_not_a_stall() -> None:
    """Attack: a schema of 300 levels of allOf over two $refs each, read 5,000 ways. The lookups share
    one budget of schema nodes: publish stays bounded and says which reads it did not check."""
    defs: dict[str, Any] = {
        f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]} for i in range(300)
    }
    defs["d300"] = {"type": "object", "properties": {"x": {"type": "number"}}}
    schema = {
        "$defs": defs,
        "type": "object",
        "additionalProperties": False,
        "properties": {"r": {"$ref": "#/$defs/d0"}},
    }
    steps = [act(f"s{k}", input={f"v{i}": f"${{input.r.f{k}_{i}}}" for i in range(250)}) for k in range(20)]
    warnings = accepted(doc(*steps, input_schema=schema))
    assert warnings[-1][0] == "input_schema"
    assert "some reads of input were not checked" in warnings[-1][1]


def test_the_text_of_thousands_of_problems_is_bounded() -> None:
    """A document with 2,000 bad reads keeps them all in `.problems`; its text (the CLI's line, the API's
    detail) lists the first 100 and says how many more."""
    document = doc(act("a", input={f"k{i}": f"${{steps.zz{i}.output}}" for i in range(2000)}))
    with pytest.raises(DefinitionError) as info:
        parse_definition(document)
    assert len(info.value.problems) == 2000
    text = str(info.value)
    assert text.endswith("(and 1900 more problems like these)")
    assert len(text) < 20_000
