"""The flow graph of a definition: which step a run can enter after which, and so which steps can have
run before a given point of the flow (what the reference checks in `references` ask).

Nodes are step ids and `END` (the run completes and renders the definition's `output`). An edge says
how a run gets from one step to the next: `next`, the order of the list, a choice branch, an approval's
`on_reject`/`on_timeout`. `edges_of` is the one place that knows each kind of step's ways out, so a new
kind of step (one that holds steps of its own, too) adds its edges there and every question below
follows. Loops are ordinary cycles: a step in a loop can have run before itself, on an earlier pass.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .model import ActivityStep, ApprovalStep, ChoiceStep, FailStep, Step, SucceedStep, WaitStep

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
        case ActivityStep() | WaitStep():
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
    """The graph of one definition's steps (the first step is where every run begins)."""

    def __init__(self, steps: Sequence[Step]) -> None:
        ids = [s.id for s in steps]
        known = set(ids)
        self.first = ids[0] if ids else END
        self.out: dict[str, list[Edge]] = {sid: [] for sid in [*ids, END]}
        self.into: dict[str, list[Edge]] = {sid: [] for sid in [*ids, END]}
        for i, s in enumerate(steps):
            for e in edges_of(s, ids[i + 1] if i + 1 < len(ids) else END):
                if e.target in known or e.target == END:  # an unknown target is check_graph's to report
                    self.out[s.id].append(e)
                    self.into[e.target].append(e)
        self.reached = frozenset(self._walk([self.first], self.out, forward=True)) | {self.first}

    @staticmethod
    def _walk(starts: Iterable[str], edges: dict[str, list[Edge]], *, forward: bool) -> set[str]:
        """Every node one or more edges away from `starts` (following edges forward or backward)."""
        seen: set[str] = set()
        todo = list(starts)
        while todo:
            for e in edges.get(todo.pop(), []):
                n = e.target if forward else e.source
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return seen

    def after(self, step_id: str) -> frozenset[str]:
        """The steps a run can enter after `step_id` (itself included when it is in a loop)."""
        return frozenset(self._walk([step_id], self.out, forward=True) - {END})

    def before(self, node: str) -> frozenset[str]:
        """The steps that can have run when a run enters `node` (a step id, or END): those on some path
        from the first step to it, itself included only when it is in a loop."""
        return frozenset(self._walk([node], self.into, forward=False) & self.reached)

    def around(self, step_id: str) -> frozenset[str]:
        """The steps that can have run by the time `step_id` is compensated: it ran, so anything before it,
        and the run went on after it until a later step failed or the run was cancelled."""
        return self.before(step_id) | {step_id} | self.after(step_id)

    def route(self, source: str, target: str) -> list[str] | None:
        """A shortest path of nodes from `source` to another node `target` (both included), or None."""
        back: dict[str, str] = {}
        todo = deque([source])
        while todo:
            n = todo.popleft()
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
