"""The process as a picture: a definition's steps drawn by Graphviz as an SVG, server-side.

The graph is the definition's flow graph (core/definition/flowgraph.edges_of says every kind of step's
ways out): one node per step, choices as diamonds with their conditions on the edges, approvals' and
waits' timeouts and rejections as labelled edges, a parallel step as a fork and a join around one box per
branch, a for-each step as a box around its body. On a run page each node also carries what the run did
there (`Mark`): a CSS class colours it (done, current, failed, compensated, not taken...) and a link
leads to its first event in the timeline.

Every label is tenant-controlled text: it goes into the DOT source through `graphviz.escape` (no HTML
label, no `\\N`-style escapes) and node names are our own `n0, n1...`; Graphviz XML-escapes the text it
writes into the SVG (tests/e2e/test_diagram_browser.py attacks it). `dot` runs as a subprocess with a
timeout, outside any transaction; without Graphviz installed the pages say so instead of a picture.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import graphviz
from markupsafe import Markup

from ..core.definition.flowgraph import END, edges_of
from ..core.definition.model import (
    ActivityStep,
    ApprovalStep,
    ChoiceStep,
    Definition,
    FailStep,
    ForEachStep,
    ParallelStep,
    RunStep,
    Step,
    SucceedStep,
    WaitEventStep,
    WaitStep,
)
from ..core.timeutil import format_duration

__all__ = ["DOT_TIMEOUT", "Mark", "diagram", "dot_source"]

DOT_TIMEOUT = 10.0  # seconds: a definition is bounded by max_steps, so dot is fast or something is wrong
_LABEL_MAX = 48
Attrs = dict[str, str]
# The marks of a step the run entered, and of one it left (so the edge out of it was followed).
_RAN = frozenset({"done", "current", "failed", "compensated", "skipped", "cancelled"})
_LEFT = frozenset({"done", "compensated", "skipped"})


@dataclass(frozen=True)
class Mark:
    """What a run did at one step id (every key of it: each for-each item, each pass of a loop)."""

    state: str  # done | current | failed | compensated | skipped | cancelled | not-taken | pending
    took: str = ""  # a duration for people, "" when the step never ran
    anchor: str | None = None  # the id of its first event in the timeline
    count: int = 1  # how many keys (items) ran it


def _short(text: str, limit: int = _LABEL_MAX) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _kind_line(step: Step) -> str:
    """The second line of a node: what the step does."""
    match step:
        case ActivityStep():
            return step.activity
        case WaitStep():
            return f"wait {format_duration(step.duration)}" if step.duration else "wait until a time"
        case ApprovalStep():
            who = [*step.users, *(f"group {g}" for g in step.groups)]
            return "approval: " + ", ".join(who) if who else "approval"
        case WaitEventStep():
            return f"event {step.name}"
        case RunStep():
            return f"run {step.definition}" + (f" v{step.version}" if step.version else "")
        case ChoiceStep():
            return "choice"
        case FailStep():
            return f"fail {step.error}"
        case SucceedStep():
            return "succeed"
        case ParallelStep():
            return f"parallel, join {step.join}"
        case ForEachStep():
            return f"for each, join {step.join}"
    return step.kind  # pragma: no cover - every kind of step is matched above


_SHAPES = {
    "choice": "diamond",
    "wait": "box",
    "approval": "box",
    "wait_event": "box",
    "run": "component",
    "fail": "doubleoctagon",
    "succeed": "doublecircle",
    "parallel": "box",
    "for_each": "box",
}
_STYLES = {"wait": "rounded,dashed", "approval": "rounded,bold", "wait_event": "rounded,dashed"}


def _edge_label(step: Step, via: str) -> str:
    if via.startswith("choice[") and isinstance(step, ChoiceStep):
        return _short(step.branches[int(via[7:-1])][0].source, 40)
    return {
        "else": "else",
        "approval.on_reject": "rejected",
        "approval.on_timeout": "timed out",
        "wait_event.on_timeout": "timed out",
    }.get(via, "")


class _Builder:
    def __init__(self, marks: Mapping[str, Mark] | None) -> None:
        self.g = graphviz.Digraph("process", graph_attr={"rankdir": "TB", "bgcolor": "transparent"})
        self.g.attr("node", shape="box", style="rounded", fontname="sans-serif", fontsize="11")
        self.g.attr("edge", fontname="sans-serif", fontsize="10")
        self.marks = marks
        self.ids: dict[str, str] = {}
        self.count = 0

    def name(self, key: str) -> str:
        if key not in self.ids:
            self.ids[key] = f"n{len(self.ids)}"
        return self.ids[key]

    def node(self, g: graphviz.Digraph, step: Step) -> None:
        label = [step.id, _kind_line(step)]
        attrs: dict[str, str] = {"shape": _SHAPES.get(step.kind, "box")}
        if step.kind in _STYLES:
            attrs["style"] = _STYLES[step.kind]
        css = [f"k-{step.kind}"]
        mark = self.marks.get(step.id) if self.marks is not None else None
        if self.marks is not None:
            mark = mark or Mark("pending")
            css.append(f"st-{mark.state}")
            extra = {"pending": "to come", "not-taken": "not taken"}.get(mark.state, mark.state)
            if mark.took:
                extra += f" · {mark.took}"
            if mark.count > 1:
                extra += f" · {mark.count} times"
            label.append(extra)
            if mark.anchor:
                attrs["href"] = f"#{mark.anchor}"
        attrs["class"] = " ".join(css)
        attrs["id"] = f"step-{self.name(step.id)}"
        g.node(self.name(step.id), graphviz.escape("\n".join(_short(x) for x in label)), **attrs)

    def steps(self, g: graphviz.Digraph, steps: Sequence[Step], end: str) -> str:
        """Draw one list of steps into `g`; its END goes to node `end`. Returns its entry node."""
        if not steps:
            return end
        ids = [s.id for s in steps]
        for s in steps:
            self.node(g, s)
        for i, s in enumerate(steps):
            exit_ = self.shape(g, s)
            for e in edges_of(s, ids[i + 1] if i + 1 < len(ids) else END):
                target = end if e.target == END else self.name(e.target)
                if e.target != END and e.target not in ids:
                    continue  # an unknown target is the publish checks' to report
                label = _edge_label(s, e.via)
                attrs = {"label": graphviz.escape(label)} if label else {}
                if e.via in ("approval.on_reject", "approval.on_timeout", "wait_event.on_timeout"):
                    attrs["style"] = "dashed"
                self.edge(g, exit_, target, s.id, e.target, attrs)
        return self.name(ids[0])

    def edge(
        self, g: graphviz.Digraph, tail: str, head: str, source: str | None, target: str, attrs: Attrs
    ) -> None:
        """An edge; on a run it is `taken` once the run left `source` along it (its target ran)."""
        if self.marks is not None:
            attrs["class"] = "taken" if self.taken(source, target) else "untaken"
        g.edge(tail, head, **attrs)

    def taken(self, source: str | None, target: str) -> bool:
        marks = self.marks or {}
        a = marks.get(source) if source is not None else None
        if source is not None and (a is None or a.state not in _LEFT):
            return False
        b = marks.get(target)
        return target == END or (b is not None and b.state in _RAN)

    def shape(self, g: graphviz.Digraph, step: Step) -> str:
        """A parallel or for-each step's inside; returns the node its way out leaves from."""
        if not isinstance(step, ParallelStep | ForEachStep):
            return self.name(step.id)
        join = self.name(step.id + "\x00join")
        me = self.name(step.id)
        with g.subgraph(name=f"cluster_{me}") as box:
            box.attr(label=graphviz.escape(_short(step.id)), style="rounded,dotted", fontname="sans-serif")
            box.node(join, "", shape="point", width="0.12")
            lanes = (
                [(b.id, b.steps) for b in step.branches]
                if isinstance(step, ParallelStep)
                else [("each item", step.body)]
            )
            for lane, body in lanes:
                with box.subgraph(name=f"cluster_{me}_{len(self.ids)}") as sub:
                    sub.attr(label=graphviz.escape(_short(lane)), style="rounded")
                    entry = self.steps(sub, body, join)
                first = body[0].id if body else END
                self.edge(g, me, entry, None, first, {"style": "bold"})  # a fork: once its lane began
        return join


def dot_source(definition: Definition, marks: Mapping[str, Mark] | None = None) -> str:
    """The DOT text of a definition's diagram (with a run's marks on its nodes when given)."""
    b = _Builder(marks)
    b.g.node("start", "start", shape="circle", width="0.3", fixedsize="true", fontsize="8")
    b.g.node("end", "end", shape="doublecircle", width="0.3", fixedsize="true", fontsize="8")
    entry = b.steps(b.g, definition.steps, "end")
    b.edge(b.g, "start", entry, None, definition.steps[0].id if definition.steps else END, {})
    source: str = b.g.source
    return source


_PROLOG = re.compile(r"^.*?(?=<svg\b)", re.S)
_SIZE = re.compile(r'<svg width="[^"]*" height="[^"]*"')


@lru_cache(maxsize=256)
def _render(source: str) -> str | None:
    dot = shutil.which("dot")
    if dot is None:
        return None
    try:
        proc = subprocess.run(  # noqa: S603 - our argv; the graph goes in on stdin
            [dot, "-Tsvg"], input=source.encode(), capture_output=True, timeout=DOT_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    svg = _PROLOG.sub("", proc.stdout.decode())
    # The viewBox stays: the picture scales to its box (CSS) instead of a fixed size in points.
    return _SIZE.sub('<svg role="img" aria-labelledby="diagram-title" class="diagram"', svg, count=1)


def diagram(definition: Definition, marks: Mapping[str, Mark] | None = None) -> Markup | None:
    """The SVG of a definition's diagram, ready to put in a page; None when Graphviz is not installed."""
    svg = _render(dot_source(definition, marks))
    return Markup(svg) if svg is not None else None  # noqa: S704 - Graphviz escaped every label
