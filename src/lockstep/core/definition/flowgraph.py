"""The flow graph of a definition: which step a run can enter after which, and so which steps can have
run before a given point of the flow (what the reference checks in `references` ask).

Nodes are step ids and `END` (the run completes and renders the definition's `output`). An edge says
how a run gets from one step to the next: `next`, the order of the list, a choice branch, an approval's
`on_reject`/`on_timeout`. `edges_of` is the one place that knows each kind of step's ways out, so a new
kind of step adds its edges there and every question below follows. One graph is one list of steps:
the definition's, or a parallel step's branch, or a for-each body (whose END ends the branch or the
item, as `next: end` there does). Loops are ordinary cycles: a step in a loop can have run before
itself, on an earlier pass.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from .model import (
    ActivityStep,
    ApprovalStep,
    ChoiceStep,
    FailStep,
    ForEachStep,
    ParallelStep,
    RunStep,
    Step,
    SucceedStep,
    WaitEventStep,
    WaitStep,
)

__all__ = ["END", "Edge", "FlowGraph", "edges_of"]

END = "(end)"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str  # a step id, or END
    via: str  # how the run gets there: "next", "in order", "choice[0]", "else", "approval.on_reject"...


def edges_of(step: Step, in_order: str) -> list[Edge]:
    """The ways out of `step`; `in_order` is the step after it in the list (END after the last one)."""

    def to(target: str | None, via: str) -> Edge:
        return Edge(step.id, END if target in (None, "end") else str(target), via)

    following = to(step.next, "next") if step.next is not None else to(in_order, "in order")
    match step:
        case ActivityStep() | WaitStep() | RunStep() | ParallelStep() | ForEachStep():
            # A shape step's branches and body are lists of their own, each with its own graph (the
            # checks in `references` relate them): in this list the step is one node, like an activity.
            return [following]
        case ApprovalStep():
            out = [following]
            rejected = step.on_reject if step.on_reject != "fail" else None
            if rejected is not None:
                out.append(to(rejected, "approval.on_reject"))
            if step.on_timeout == "reject" and rejected is not None:
                out.append(to(rejected, "approval.on_timeout"))
            elif step.on_timeout not in ("reject", "fail"):
                out.append(to(step.on_timeout, "approval.on_timeout"))
            return out
        case WaitEventStep():
            out = [following]
            if step.on_timeout != "fail":
                out.append(to(step.on_timeout, "wait_event.on_timeout"))
            return out
        case ChoiceStep():
            out = [to(target, f"choice[{j}]") for j, (_, target) in enumerate(step.branches)]
            return [*out, to(step.default, "else")] if step.default is not None else out
        case SucceedStep():
            # With an output of its own the run completes with that one: the definition's is not rendered.
            return [to(None, "succeed")] if step.output is None else []
        case FailStep():
            return []
    return []  # pragma: no cover - every kind of step is matched above


class FlowGraph:
    """The graph of one definition's steps (the first step is where every run begins).

    Which steps a run can enter after a step is a search from it, remembered per step; all searches of
    one graph share `budget` (edges followed), so a definition of tens of thousands of steps (a tenant
    may raise max_steps; max_definition_bytes bounds the document) costs bounded time: past it the
    questions below answer None, "not known"."""

    def __init__(self, steps: Sequence[Step], budget: int = 2_000_000) -> None:
        ids = [s.id for s in steps]
        known = set(ids)
        self.first = ids[0] if ids else END
        self.budget = budget
        self.out: dict[str, list[Edge]] = {sid: [] for sid in [*ids, END]}
        for i, s in enumerate(steps):
            for e in edges_of(s, ids[i + 1] if i + 1 < len(ids) else END):
                if e.target in known or e.target == END:  # an unknown target is check_graph's to report
                    self.out[s.id].append(e)
        self._after: dict[str, frozenset[str]] = {}
        first = self.after(self.first, charged=False)
        self.reached = (first or frozenset()) | {self.first}

    def after(self, node: str, *, charged: bool = True) -> frozenset[str] | None:
        """The nodes a run can reach from `node` along one or more edges (END included; `node` itself
        when it is in a loop); None once the budget is spent."""
        if node in self._after:
            return self._after[node]
        seen: set[str] = set()
        todo = [node]
        while todo:
            edges = self.out.get(todo.pop(), [])
            if charged:
                self.budget -= len(edges) + 1
                if self.budget < 0:
                    return None
            for e in edges:
                if e.target not in seen:
                    seen.add(e.target)
                    todo.append(e.target)
        self._after[node] = frozenset(seen)
        return self._after[node]

    def reaches(self, source: str, target: str) -> bool | None:
        """Whether a run can enter `target` after `source` (None: not known, the budget is spent)."""
        found = self.after(source)
        return None if found is None else target in found

    def route(self, source: str, target: str) -> list[str] | None:
        """A shortest path of nodes from `source` to another node `target` (both included), or None."""
        back: dict[str, str] = {}
        todo = deque([source])
        while todo and self.budget > 0:
            n = todo.popleft()
            self.budget -= 1
            for e in self.out.get(n, []):
                if e.target not in back and e.target != source:
                    back[e.target] = n
                    if e.target == target:
                        path = [target]
                        while path[-1] != source:
                            path.append(back[path[-1]])
                        return path[::-1]
                    todo.append(e.target)
        return None
