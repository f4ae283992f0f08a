"""What the expressions of a definition read, checked against what there will be to read: the run's
input as `input_schema` declares it, the steps that can have run at the point the expression is
evaluated (over the flow graph, `flowgraph`), the fields of a step's and of the run's context; and
choice conditions that can never be true or false (`exprtypes`).

Each kind of step says where its expressions are and when they are evaluated (`sites`): an activity's
input when the step is entered, its compensation's input when it is compensated (any time after it
ran), the definition's `output` when the run completes. A new kind of step adds its sites there, and
its ways out in `flowgraph.edges_of`; the checks below follow.

A parallel step's branches and a for-each body are lists of their own, each with its flow graph. An
expression sees the steps of its own list and of the lists around it (core/tx.py's
`expression_context`), never those of a sibling branch or inside a shape step it is not in: a read of
such a step is refused with where the step is; a read of a step of a list around it asks whether that
step can have run before the shape step the expression is in.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..canonical import JSONValue
from ..expr import Expr, Template
from ..exprreads import reads
from ..exprtypes import condition_type
from .checks import Checker
from .flowgraph import END, FlowGraph
from .model import (
    ActivityStep,
    ApprovalStep,
    ChoiceStep,
    FailStep,
    ForEachStep,
    HttpStep,
    ParallelStep,
    RunStep,
    Step,
    SucceedStep,
    WaitEventStep,
    WaitStep,
)
from .sensitive_schema import Place, lookup
from .shapes import step_lists

__all__ = ["Point", "check_references", "sites"]

STEP_FIELDS = ("output", "status", "attempts")
RUN_FIELDS = ("id", "tenant", "definition", "version", "started_at")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Bounds of the checks' work on one definition (a tenant may raise max_steps; documents are bounded
# by max_definition_bytes): schema nodes visited by all lookups, step ids difflib compares with.
SCHEMA_BUDGET = 100_000
CLOSE_MATCH_IDS = 2_000
_COMPOSED = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref", "$dynamicRef")


@dataclass(frozen=True)
class Point:
    """When an expression is evaluated: on entering a step, while compensating one, or at the end."""

    kind: str  # "enter" | "compensate" | "end"
    step: str = ""


def sites(step: Step) -> list[tuple[str, Template | Expr | None, Point]]:
    """Where `step`'s expressions are (a path suffix after `steps[i](id)`) and when they are evaluated."""
    enter = Point("enter", step.id)
    match step:
        case HttpStep():
            return [(".http", step.input, enter), (".idempotency_key", step.idempotency_key, enter)]
        case ActivityStep():
            out: list[tuple[str, Template | Expr | None, Point]] = [
                (".input", step.input, enter),
                (".idempotency_key", step.idempotency_key, enter),
            ]
            if step.compensate is not None:
                out.append((".compensate.input", step.compensate.input, Point("compensate", step.id)))
            return out
        case ChoiceStep():
            return [(f".choice[{j}].if", cond, enter) for j, (cond, _) in enumerate(step.branches)]
        case WaitStep():
            return [(".wait.until", step.until, enter)]
        case FailStep():
            return [(".fail.message", step.message, enter)]
        case SucceedStep():
            return [(".succeed.output", step.output, enter)]
        case ApprovalStep():
            return [(".approval.details", step.details, enter)]
        case ForEachStep():
            return [(".for_each.items", step.items, enter)]
        case RunStep():
            return [(".run.input", step.input, enter)]
        case WaitEventStep():
            return [(".wait_event.key", step.key, enter)]
        case ParallelStep():
            return []  # its branches' steps have their own
    return []  # pragma: no cover - every kind of step is matched above


def check_references(
    c: Checker, steps: list[Step], output: Template | None, schema: Mapping[str, JSONValue] | None
) -> None:
    """Refuse (or warn about) every read of something that will not be there; see the module's doc."""
    refs = _References(c, steps, schema)
    for n, (_, lst) in enumerate(refs.lists):
        graph = refs.graphs[n]
        for i, step in enumerate(lst):
            at = f"steps[{i}]({step.id})" if n == 0 else f"steps({step.id})"  # nested: as shapes.py names
            if step.id not in graph.reached:  # what it reads is never read: say so, once
                where = "" if n == 0 else " of its list"
                c.warn(at, f"no path from the first step `{lst[0].id}`{where} leads here: it never runs")
                continue
            for suffix, value, point in sites(step):
                refs.check(f"{at}{suffix}", value, point)
            if isinstance(step, ChoiceStep):
                for j, (cond, _) in enumerate(step.branches):
                    refs.condition(f"{at}.choice[{j}].if", cond)
    if output is not None and END not in refs.graph.reached:  # no run completes with this output
        c.warn(
            "output",
            "never rendered: every path ends in a fail step or a succeed step with an output of its own",
        )
    else:
        refs.check("output", output, Point("end"))
    if refs.schema_budget[0] <= 0:
        c.warn(
            "input_schema",
            "too large for the checks of what expressions read from the input (they visit at most "
            f"{SCHEMA_BUDGET:,} schema nodes): some reads of input were not checked",
        )
    if refs.unchecked:
        c.warn(
            "steps",
            f"{refs.unchecked} read(s) of steps were not checked against the flow ({len(steps)} steps are "
            f"more than these checks follow in bounded time): make sure each step it reads can have run",
        )


class _References:
    def __init__(self, c: Checker, steps: list[Step], schema: Mapping[str, JSONValue] | None) -> None:
        self.c = c
        # Every list of steps (the definition's first) with the shape step that holds it, its graph,
        # and for each step id the list it is in.
        self.lists = list(step_lists(steps))
        share = max(10_000, 2_000_000 // len(self.lists))
        self.graphs = [
            FlowGraph(lst, 2_000_000 if n == 0 else share) for n, (_, lst) in enumerate(self.lists)
        ]
        self.list_of: dict[str, int] = {}
        for n, (_, lst) in enumerate(self.lists):
            for st in lst:
                self.list_of.setdefault(st.id, n)
        self.ids = [st.id for _, lst in self.lists for st in lst]
        self.known = set(self.ids)
        self.graph = self.graphs[0]
        self.schema = schema
        # Schema nodes all lookups of this definition may visit, and what each read path found.
        self.schema_budget = [SCHEMA_BUDGET]
        self._places: dict[tuple[str, ...], Place] = {}
        self._schemas: dict[tuple[str, ...], list[JSONValue]] = {}  # lookup's, by prefix
        self.unchecked = 0  # reads of steps whose reachability the graph's budget left unknown

    def chain(self, sid: str) -> list[tuple[int, str]]:
        """Step `sid`'s list and id, then its shape step's list and id, and so on out to the top."""
        out = [(self.list_of[sid], sid)]
        while out[-1][0] != 0:
            owner = self.lists[out[-1][0]][0]
            if owner is None:  # pragma: no cover - only the top-level list has no owner
                break
            out.append((self.list_of[owner.id], owner.id))
        return out

    def scope(self, sid: str, point: Point) -> tuple[int, Point] | str:
        """The list in which to ask whether `sid` can have run at `point`, and the point there (the
        shape step around `point` that is in `sid`'s list); or why `point` cannot see `sid` at all."""
        around = [(0, END)] if point.kind == "end" else self.chain(point.step)
        mine = self.list_of[sid]
        for n, at in around:
            if n == mine:
                return n, point if at in (point.step, END) else Point(point.kind, at)
        lists = dict(around)
        outer = next((n, q) for n, q in self.chain(sid)[1:] if n in lists)  # the top list is in both
        shape = outer[1]
        if lists[outer[0]] != shape:
            return (
                f"step `{sid}` is inside `{shape}`, whose steps are seen only inside it: read "
                f"`{_text(('steps', shape, 'output'))}` (its branches' or items' outputs) instead"
            )
        if shape == point.step:
            return f"step `{sid}` is inside `{shape}`: the step's own expressions run before its steps"
        return (
            f"step `{sid}` is on another branch of `{shape}` and may not have run: read what it gives "
            f"after `{shape}`, from `{_text(('steps', shape, 'output'))}`"
        )

    def ran(self, sid: str, point: Point, n: int = 0) -> bool | None:
        """Whether step `sid` can have run at `point` of list `n` (None: not known within the budget)."""
        g = self.graphs[n]
        if sid not in g.reached:
            return False
        if point.kind == "end":
            return g.reaches(sid, END)
        if point.kind == "enter":
            return g.reaches(sid, point.step)
        # Compensated: it ran, so anything before it, and the run went on after it until a later
        # step failed or the run was cancelled.
        if sid == point.step:
            return True
        before = g.reaches(sid, point.step)
        after = g.reaches(point.step, sid)
        return True if before or after else None if before is None or after is None else False

    def place(self, segments: tuple[str, ...]) -> Place:
        if segments not in self._places:
            schema = self.schema if self.schema is not None else {}
            self._places[segments] = lookup(schema, segments, self.schema_budget, self._schemas)
        return self._places[segments]

    def check(self, path: str, value: Template | Expr | None, point: Point) -> None:
        if value is None:
            return
        found: list[tuple[str, Expr]] = []
        if isinstance(value, Expr):
            found.append((path, value))
        else:
            for at, parts in value.leaves():
                where = path + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in at)
                found.extend((where, e) for e in parts if isinstance(e, Expr))
        seen: set[tuple[str, str]] = set()
        for where, expr in sorted(found, key=lambda f: f[0]):
            for read in sorted(reads(expr)):
                problem = self.read(read, point)
                if problem is not None and (where, problem[1]) not in seen:
                    seen.add((where, problem[1]))
                    (self.c.warn if problem[0] else self.c.add)(where, problem[1])

    def read(self, read: tuple[str, ...], point: Point) -> tuple[bool, str] | None:
        """(only a warning?, why) for a read of something that will not be there, else None."""
        root, rest = read[0], list(read[1:])
        if root == "input" and rest and self.schema is not None:
            return self.input(rest)
        if root == "run" and rest and rest[0] not in RUN_FIELDS:
            return False, _unknown(
                f"`{_text(read[:2])}`: the run has no field `{rest[0]}`", rest[0], RUN_FIELDS
            )
        if root != "steps" or not rest:
            return None
        sid = rest[0]
        if sid not in self.known:
            hint = difflib.get_close_matches(sid, self.ids[:CLOSE_MATCH_IDS], n=1)
            listed = f"; the steps are {', '.join(self.ids[:12])}" if not hint else ""
            tail = f" (did you mean `{_text(('steps', hint[0]))}`?)" if hint else listed
            return False, f"`{_text(read[:2])}`: no step `{sid}`{tail}"
        if len(rest) > 1 and rest[1] not in STEP_FIELDS:
            return False, _unknown(
                f"`{_text(read[:3])}`: a step's context has {', '.join(STEP_FIELDS)}, not `{rest[1]}`",
                rest[1],
                STEP_FIELDS,
            )
        scoped = self.scope(sid, point)
        if isinstance(scoped, str):
            return False, f"`{_text(read[:3])}`: {scoped}"
        n, there = scoped
        ran = self.ran(sid, there, n)
        if ran is None:
            self.unchecked += 1
        elif not ran:
            return False, f"`{_text(read[:3])}`: {self.never_ran(sid, there, n)}"
        return None

    def never_ran(self, sid: str, point: Point, n: int = 0) -> str:
        """Why step `sid` cannot have run at `point` of list `n`, with the paths that show it."""
        g = self.graphs[n]
        first = self.lists[n][1][0].id
        if sid not in g.reached:
            return f"step `{sid}` never runs: no path from the first step `{first}` leads to it"
        if point.kind == "end":
            return (
                f"step `{sid}` cannot have run when the run completes with this output: every path "
                f"through it ends in a fail step or a succeed step with an output of its own"
            )
        at = point.step
        if sid == at:
            return (
                f"step `{sid}` reads its own context before it has run (it is in no loop, so it is "
                f"always empty here): read what it needs from the input or from an earlier step"
            )
        if point.kind == "compensate":
            return (
                f"step `{sid}` cannot have run when `{at}` is compensated: no path goes through both "
                f"({_route(g.route(first, sid))}; {_route(g.route(first, at))})"
            )
        later = g.route(at, sid)
        if later is not None:
            return (
                f"step `{sid}` runs only after `{at}` ({_route(later)}) and no path leads from it back to "
                f"`{at}`: read it in a step after `{sid}`"
            )
        return (
            f"step `{sid}` cannot have run before `{at}`: they are on different branches "
            f"({_route(g.route(first, sid))}; {_route(g.route(first, at))}) and no path goes from "
            f"`{sid}` to `{at}`"
        )

    def input(self, rest: list[str]) -> tuple[bool, str] | None:
        if self.schema is None:
            return None
        place = self.place(tuple(rest))
        if place.found:
            return None
        seg = rest[place.depth]
        text = _text(("input", *rest[: place.depth + 1]))
        where = _text(("input", *rest[: place.depth]))
        if place.scalar and not place.names and not place.arrays:
            return False, f"`{text}`: {where} is a {place.scalar} in input_schema: it has no field `{seg}`"
        if place.arrays and not place.names:
            return False, (
                f"`{text}`: {where} is an array in input_schema: it has no field `{seg}` (read an item "
                f"with {where}[0], or all of them with a macro such as {where}.exists(i, ...))"
            )
        hint = difflib.get_close_matches(seg, sorted(place.names), n=1)
        mean = f" (did you mean `{_text(('input', *rest[: place.depth], hint[0]))}`?)" if hint else ""
        if place.unlisted:
            return True, (
                f"`{text}`: input_schema does not declare `{seg}` at {where}{mean}; it allows other "
                f"properties, so this is a warning only: declare it, or set additionalProperties: false "
                f"to make it an error"
            )
        return False, (
            f"`{text}`: input_schema has no property `{seg}` at {where}{mean} and allows no other "
            f"(additionalProperties: false): fix the expression, or add `{seg}` to the schema"
        )

    def condition(self, path: str, cond: Expr) -> None:
        """A condition whose type is known and is not boolean can never choose its branch."""
        kind = condition_type(cond.source, self.schema_type)
        if kind is None or kind == "boolean":
            return
        source = cond.source.strip()
        if not reads(cond):
            self.c.add(path, f"`{source}` is a constant {kind}, never true or false: {_compare('', '')}")
            return
        origin = " (input_schema)" if any(r[0] == "input" for r in reads(cond)) else ""
        self.c.add(path, f"`{source}` is {_a(kind)}{origin}, never true or false: {_compare(source, kind)}")

    def schema_type(self, read: tuple[str, ...]) -> str | None:
        """The type input_schema gives the place `read`, when one schema with a `type` describes it."""
        if read[0] != "input" or self.schema is None:
            return None
        place = self.place(read[1:])
        node = place.schema
        if not place.found or not isinstance(node, Mapping) or any(k in node for k in _COMPOSED):
            return None
        kinds = node.get("type")
        names = [kinds] if isinstance(kinds, str) else kinds if isinstance(kinds, list) else []
        if not names or not all(isinstance(k, str) for k in names) or "boolean" in names:
            return None
        shown = {"integer": "number", "array": "list"}
        return " or ".join(sorted({shown.get(str(k), str(k)) for k in names}))


def _unknown(what: str, name: str, allowed: tuple[str, ...]) -> str:
    hint = difflib.get_close_matches(name, allowed, n=1)
    return what + (f" (did you mean `{hint[0]}`?)" if hint else "")


def _text(path: tuple[str, ...] | list[str]) -> str:
    """A read as written in an expression: `steps.charge.output`, `steps["cooling-off"]`."""
    out = path[0]
    for part in path[1:]:
        out += f".{part}" if _IDENT.match(part) else f'["{part}"]'
    return out


def _route(nodes: list[str] | None) -> str:
    return " → ".join("end" if n == END else n for n in nodes) if nodes else "path not shown"


def _a(kind: str) -> str:
    return ("an " if kind[:1] in "aeiou" else "a ") + kind


def _compare(source: str, kind: str) -> str:
    """How to turn a value of `kind` into a condition."""
    if kind.startswith("number"):
        return f"compare it, e.g. `{source} > 0`"
    if kind.startswith("string"):
        return f'compare it, e.g. `{source} == "yes"`, or test `size({source}) > 0`'
    if kind.startswith("list"):
        return f"test its size, e.g. `size({source}) > 0`, or its items with `{source}.exists(i, ...)`"
    if kind.startswith("object"):
        return f"test one of its fields, e.g. `has({source}.field)`"
    return "write a comparison, e.g. `input.qty > 10`"
