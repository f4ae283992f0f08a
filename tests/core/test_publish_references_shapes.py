"""Publishing checks reads of steps across parallel branches, for-each bodies and run steps as the
engine scopes them: a step sees its own list and the lists around it, never a sibling branch or the
inside of a shape step it is not in, and a step of an outer list only if it can have run before the
shape step the read is in."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep.core.definition import DefinitionError, parse_definition


def act(sid: str, **extra: Any) -> dict[str, Any]:
    return {"id": sid, "activity": "svc.call", "timeout": "5s", **extra}


def reads(expr: str) -> dict[str, Any]:
    return {"input": {"v": "${" + expr + "}"}}


def par(sid: str, **branches: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": sid, "parallel": {"branches": branches}}


def each(sid: str, items: str, *body: dict[str, Any]) -> dict[str, Any]:
    return {"id": sid, "for_each": {"items": items, "body": list(body)}}


def doc(*steps: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"name": "shaped", "steps": list(steps), **top}


ACCEPTED = {
    "after a parallel step, its output; in a branch, its own earlier step and an outer earlier one": doc(
        act("a"),
        par(
            "p",
            x=[act("x1"), act("x2", **reads("steps.x1.output"))],
            y=[act("y1", **reads("steps.a.output"))],
        ),
        act("b", **reads("steps.p.output.x")),
    ),
    "in a body, item, an earlier body step and an outer step": doc(
        act("a"),
        each(
            "f", "${steps.a.output}", act("p1", input={"i": "${item}"}), act("p2", **reads("steps.p1.output"))
        ),
        act("b", **reads("steps.f.output")),
    ),
    "a run step's input reads an earlier step": doc(
        act("a"), {"id": "r", "run": {"definition": "other", "input": {"v": "${steps.a.output}"}}}
    ),
}

REFUSED = {
    "a sibling branch": (
        doc(par("p", x=[act("x1")], y=[act("y1", **reads("steps.x1.output"))])),
        "steps(y1).input.v",
        "on another branch of `p` and may not have run",
    ),
    "a nested step from after its shape step": (
        doc(par("p", x=[act("x1")], y=[act("y1")]), act("b", **reads("steps.x1.output"))),
        "steps[1](b).input.v",
        "is inside `p`, whose steps are seen only inside it: read `steps.p.output`",
    ),
    "the definition's output reading a nested step": (
        doc(par("p", x=[act("x1")], y=[act("y1")]), output={"v": "${steps.x1.output}"}),
        "output.v",
        "is inside `p`",
    ),
    "a branch reading a top-level step after its shape step": (
        doc(par("p", x=[act("x1", **reads("steps.b.output"))], y=[act("y1")]), act("b")),
        "steps(x1).input.v",
        "step `b` runs only after `p`",
    ),
    "a for-each's items reading its own body": (
        doc(each("f", "${steps.p1.output}", act("p1"))),
        "steps[0](f).for_each.items",
        "the step's own expressions run before its steps",
    ),
    "a body step reading a later body step": (
        doc(each("f", "${input.xs}", act("p1", **reads("steps.p2.output")), act("p2"))),
        "steps(p1).input.v",
        "step `p2` runs only after `p1`",
    ),
    "a run step's input reading a later step": (
        doc({"id": "r", "run": {"definition": "other", "input": {"v": "${steps.a.output}"}}}, act("a")),
        "steps[0](r).run.input.v",
        "step `a` runs only after `r`",
    ),
}


@pytest.mark.parametrize("document", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_reads_the_engine_can_answer_are_accepted(document: dict[str, Any]) -> None:
    """Reads of steps in scope that can have run are accepted without a warning."""
    assert parse_definition(document).warnings == ()


@pytest.mark.parametrize(("document", "path", "says"), REFUSED.values(), ids=REFUSED.keys())
def test_reads_out_of_scope_or_not_yet_run_are_refused(
    document: dict[str, Any], path: str, says: str
) -> None:
    """Each refused read is named at its path with where the step is and what to read instead."""
    with pytest.raises(DefinitionError) as info:
        parse_definition(document)
    found = dict(info.value.problems)
    assert path in found, info.value.problems
    assert says in found[path]
