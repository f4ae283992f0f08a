"""Property: on any flow of steps (next, order, choices with and without else, approvals' on_reject and
on_timeout, fail and succeed steps, loops), a read of `steps.X` is refused exactly when no run can have
completed X at the point the read is evaluated: entering a step, compensating a step, rendering the
definition's output. The oracle walks its own reading of the document (what `decide` does), not
flowgraph.edges_of; and a bounded graph answers "not known" instead of working without end."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from lockstep.core.definition import DefinitionError, Limits, parse_definition
from lockstep.core.definition.flowgraph import FlowGraph

IDS = ["a", "b", "c", "d", "e", "f"]
DONE, FAILED = "(completes)", "(fails)"  # the run renders the definition's output / ends failed


@st.composite
def flows(draw: Any) -> list[dict[str, Any]]:
    n = draw(st.integers(1, len(IDS)))
    ids = IDS[:n]
    target = st.sampled_from([*ids, "end"])
    steps: list[dict[str, Any]] = []
    for sid in ids:
        kind = draw(
            st.sampled_from(["activity", "activity", "wait", "choice", "approval", "fail", "succeed"])
        )
        if kind == "activity":
            step: dict[str, Any] = {"id": sid, "activity": "svc.call", "timeout": "5s"}
        elif kind == "wait":
            step = {"id": sid, "wait": "1s"}
        elif kind == "choice":
            branches = [{"if": "input.x == 1", "next": t} for t in draw(st.lists(target, max_size=2))]
            step = {"id": sid, "choice": branches + ([{"else": draw(target)}] if draw(st.booleans()) else [])}
            if not step["choice"]:
                step["choice"] = [{"else": draw(target)}]
        elif kind == "approval":
            policy: dict[str, Any] = {"approvers": {"users": ["al"]}, "timeout": "1d"}
            policy["on_reject"] = draw(st.sampled_from(["fail", *ids, "end"]))
            policy["on_timeout"] = draw(st.sampled_from(["reject", "fail", *ids, "end"]))
            step = {"id": sid, "approval": policy}
        elif kind == "fail":
            step = {"id": sid, "fail": {"error": "E"}}
        else:
            step = {"id": sid, "succeed": draw(st.sampled_from([True, {"output": "done"}]))}
        if kind in ("activity", "wait", "approval") and draw(st.booleans()):
            step["next"] = draw(target)
        steps.append(step)
    return steps


def successors(steps: list[dict[str, Any]], i: int) -> list[str]:
    """Where a run can go from steps[i], read from the document the way `decide` runs it."""
    s = steps[i]

    def go(t: str) -> str:
        return DONE if t == "end" else t

    in_order = s.get("next", steps[i + 1]["id"] if i + 1 < len(steps) else "end")
    if "activity" in s or "wait" in s:
        return [go(in_order), FAILED]
    if "approval" in s:
        p = s["approval"]
        rejected = FAILED if p["on_reject"] == "fail" else go(p["on_reject"])
        timed_out = {"reject": rejected, "fail": FAILED}.get(p["on_timeout"], go(p["on_timeout"]))
        return [go(in_order), rejected, timed_out]
    if "choice" in s:
        out = [go(b["next"]) if "next" in b else go(b["else"]) for b in s["choice"]]
        return out if any("else" in b for b in s["choice"]) else [*out, FAILED]
    if "fail" in s:
        return [FAILED]
    return [DONE if s["succeed"] is True else FAILED]  # its own output: not the definition's


def reach(steps: list[dict[str, Any]], start: str) -> set[str]:
    """Nodes one or more moves away from `start`."""
    index = {s["id"]: i for i, s in enumerate(steps)}
    seen: set[str] = set()
    todo = [start]
    while todo:
        n = todo.pop()
        for t in successors(steps, index[n]) if n in index else []:
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


FUZZ = settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


def refused_at(doc: dict[str, Any], path: str) -> bool:
    """Whether publishing refuses `doc`; a refusal must be of the read at `path` and nothing else."""
    problems: list[tuple[str, str]] = []
    try:
        parse_definition(doc)
    except DefinitionError as exc:
        problems = exc.problems
    assert {p for p, _ in problems} <= {path}, problems
    return bool(problems)


@given(
    steps=flows(), x=st.sampled_from(IDS), t=st.sampled_from(IDS), where=st.sampled_from(["enter", "undo"])
)
@FUZZ
def test_a_read_is_refused_exactly_when_no_run_can_have_completed_the_step(
    steps: list[dict[str, Any]], x: str, t: str, where: str
) -> None:
    """Entering T: X completed before iff X is reached and T follows X. Compensating T: iff X and T
    are on one run (in either order)."""
    ids = [s["id"] for s in steps]
    assume(x in ids and t in ids)
    try:
        parse_definition({"name": "p", "steps": steps})
    except DefinitionError:
        assume(False)  # e.g. a loop of choice steps only
    first = ids[0]
    i = ids.index(t)
    # T becomes an activity that reads X (keeping its `next`); the oracle answers for that flow.
    reader: dict[str, Any] = {"id": t, "activity": "svc.call", "timeout": "5s"}
    if "next" in steps[i]:
        reader["next"] = steps[i]["next"]
    read = f"${{steps.{x}.output}}"
    if where == "undo":
        reader["compensate"] = {"activity": "svc.undo", "input": {"r": read}}
        path = f"steps[{i}]({t}).compensate.input.r"
    else:
        reader["input"] = {"r": read}
        path = f"steps[{i}]({t}).input.r"
    flow = [*steps[:i], reader, *steps[i + 1 :]]
    doc = {"name": "p", "steps": flow}
    reached = reach(flow, first) | {first}
    assume(t in reached)  # an unreached step's reads are never evaluated (a warning, not a check)
    if where == "enter":
        can = x in reached and t in reach(flow, x)
    else:
        can = x in reached and (x == t or t in reach(flow, x) or x in reach(flow, t))
    assert refused_at(doc, path) is not can, (doc, x, t, where)


@given(steps=flows(), x=st.sampled_from(IDS))
@FUZZ
def test_the_output_reads_what_can_have_completed_when_the_run_completes(
    steps: list[dict[str, Any]], x: str
) -> None:
    """The definition's output may read X iff some run completes X and then completes with that output
    (not through a fail step, nor a succeed step with its own output)."""
    ids = [s["id"] for s in steps]
    assume(x in ids)
    doc = {"name": "p", "steps": steps, "output": {"r": f"${{steps.{x}.output}}"}}
    try:
        parse_definition({"name": "p", "steps": steps})
    except DefinitionError:
        assume(False)
    first = ids[0]
    reached = reach(steps, first) | {first}
    assume(DONE in reached)  # otherwise the output is never rendered: a warning, not a check
    can = x in reached and DONE in reach(steps, x)
    assert refused_at(doc, "output.r") is not can, (doc, x)


def test_a_graph_past_its_budget_answers_not_known() -> None:
    """Reachability searches share one budget of edges: past it the answer is None, not a wrong one, and
    a definition too large to follow is accepted with a warning."""
    doc = {"name": "p", "steps": [{"id": f"s{i}", "wait": "1s"} for i in range(50)]}
    steps = parse_definition(doc, Limits(max_steps=50)).steps
    g = FlowGraph(steps, budget=60)
    assert g.reaches("s0", "s49") is True  # one search of 50 nodes
    assert g.reaches("s1", "s49") is None  # the next one is over the budget
    assert g.reaches("s0", "s10") is True  # remembered: costs nothing
    n = 1_600  # each step reads the one before: 1,600 searches of up to 1,600 nodes, over 2,000,000
    doc = {
        "name": "big",
        "steps": [
            {
                "id": f"s{i}",
                "activity": "svc.call",
                "timeout": "1s",
                "input": f"${{steps.s{max(i - 1, 0)}.status}}",
            }
            for i in range(n)
        ],
    }
    doc["steps"][0]["input"] = {}
    warnings = parse_definition(doc, Limits(max_steps=n)).warnings
    assert warnings[-1][0] == "steps"
    assert "were not checked against the flow" in warnings[-1][1]
