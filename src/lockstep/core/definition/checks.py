"""The publish-time checks of a definition, each reporting its problems with the path and a fix.

`Checker` collects every problem of one document (parsing goes on after the first, so an author sees all
of them at once) and holds the checks every part of a document shares: known fields with did-you-mean,
durations within the tenant's limits, expressions and templates within the bounds of `ExprLimits`
(size, nesting and worst-case cost: `exprcheck`, run by `compile_expr`/`compile_template`). The checks
across steps (references, loops of choice steps) and of the document as a whole (is it JSON, how many
step outputs its context holds) follow.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from datetime import timedelta

from ..expr import Expr, ExprError, ExprLimits, Template, compile_expr, compile_template
from ..timeutil import format_duration, parse_duration
from .model import ApprovalStep, ChoiceStep, Step, WaitEventStep

__all__ = [
    "ACTIVITY_RE",
    "NAME_RE",
    "STEP_ID_RE",
    "Checker",
    "check_graph",
    "non_json",
    "step_header",
    "step_outputs",
    "unknown_key",
]

NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")
STEP_ID_RE = re.compile(r"^[a-z0-9_-]{1,64}$")
ACTIVITY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z_][A-Za-z0-9_-]*)*$")


class Checker:
    """The problems of one document, in the order found, as (path, reason)."""

    def __init__(self, expressions: ExprLimits | None = None) -> None:
        self.exl = expressions or ExprLimits()
        self.problems: list[tuple[str, str]] = []
        # What publishing accepts but tells the author about (e.g. a read of an undeclared input field).
        self.warnings: list[tuple[str, str]] = []

    def add(self, path: str, reason: str) -> None:
        self.problems.append((path, reason))

    def warn(self, path: str, reason: str) -> None:
        self.warnings.append((path, reason))

    def keys(self, path: str, obj: Mapping[str, object], allowed: tuple[str, ...]) -> list[str]:
        """Report every key of `obj` not in `allowed` at `path` (the level that holds it), naming the key
        and its closest allowed one, or listing the allowed ones; return the unknown keys."""
        unknown = [str(k) for k in obj if k not in allowed]
        for k in unknown:
            self.add(path, unknown_key(k, allowed))
        return unknown

    def duration(self, path: str, value: object, limit: timedelta | None = None) -> timedelta | None:
        try:
            d = parse_duration(value)
        except ValueError as exc:
            self.add(path, str(exc))
            return None
        if d <= timedelta(0):
            self.add(path, "must be greater than zero")
        elif limit is not None and d > limit:
            self.add(path, f"{value} exceeds the tenant limit of {format_duration(limit)}")
        return d

    def template(self, path: str, value: object) -> Template | None:
        try:
            t = compile_template(value, self.exl)
        except ExprError as exc:
            self.add(path, f"at {exc.at.lstrip('.')}: {exc}" if exc.at else str(exc))
            return None
        self.budget(path, t.cost(), "the expressions of this template together")
        return t

    def budget(self, path: str, cost: int, what: str) -> None:
        """One template is rendered, one choice is decided, in one transaction: bound their sum too."""
        limit = self.exl.max_cost
        if limit is not None and cost > limit:
            self.add(
                path,
                f"{what} have a worst-case cost of {cost:,}, over the limit of {limit:,} "
                f"(max_expression_cost): "
                f"use fewer expressions or simpler ones, or compute the values in an activity",
            )

    def expr(self, path: str, value: object) -> Expr | None:
        if not isinstance(value, str):
            self.add(path, 'must be a CEL expression string, e.g. "input.qty > 10"')
            return None
        src = value.strip()
        if "${" in src:
            inner = src[2:-1] if src.startswith("${") and src.endswith("}") else None
            if inner is None or "${" in inner:
                plain = src.replace("${", "").replace("}", "")
                self.add(path, f"a condition is one expression: write it without ${{...}}, e.g. {plain!r}")
                return None
            src = inner
        try:
            return compile_expr(src, self.exl)
        except ExprError as exc:
            self.add(path, str(exc))
            return None


def unknown_key(key: str, allowed: tuple[str, ...]) -> str:
    hint = difflib.get_close_matches(key, allowed, n=1)
    extra = f" (did you mean `{hint[0]}`?)" if hint else f" (allowed: {', '.join(allowed)})"
    return f"unknown key `{key}`{extra}"


def check_graph(c: Checker, steps: list[Step]) -> None:
    """Every step a step may go to exists, and no loop is made of choice steps alone."""
    ids = {s.id for s in steps}
    for s in steps:
        targets: list[tuple[str, str]] = []
        if s.next is not None:
            targets.append(("next", s.next))
        if isinstance(s, ChoiceStep):
            targets += [("choice", t) for _, t in s.branches]
            if s.default is not None:
                targets.append(("else", s.default))
        if isinstance(s, ApprovalStep):
            if s.on_timeout not in ("reject", "fail"):
                targets.append(("approval.on_timeout", s.on_timeout))
            if s.on_reject != "fail":
                targets.append(("approval.on_reject", s.on_reject))
        if isinstance(s, WaitEventStep) and s.on_timeout != "fail":
            targets.append(("wait_event.on_timeout", s.on_timeout))
        for where, t in targets:
            if t != "end" and t not in ids:
                hint = difflib.get_close_matches(t, sorted(ids), n=1)
                c.add(
                    f"steps({s.id}).{where}",
                    f"no step `{t}`" + (f" (did you mean `{hint[0]}`?)" if hint else ""),
                )
    # A loop made only of choice steps would spin inside one decision; require a wait or activity in it.
    choice_edges = {
        s.id: [t for _, t in s.branches] + ([s.default] if s.default else [])
        for s in steps
        if isinstance(s, ChoiceStep)
    }
    for start in choice_edges:
        seen, stack = set(), [start]
        while stack:
            n = stack.pop()
            for t in choice_edges.get(n, []):
                if t == start:
                    c.add(f"steps({start})", "choice steps form a loop with no wait or activity in it")
                    stack = []
                    break
                if t not in seen:
                    seen.add(t)
                    stack.append(t)


def non_json(
    value: object, path: str, seen: frozenset[int] = frozenset(), depth: int = 0
) -> list[tuple[str, str]]:
    """YAML also has timestamps, binary, non-string keys and recursive aliases; definitions are JSON,
    so name every such value with its path."""
    if depth > 64:
        return [(path, "nested more than 64 levels deep")]
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return [(path, "contains an invalid character (a lone UTF-16 surrogate)")]
        return []
    if value is None or isinstance(value, bool | int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return [(path, "NaN and infinity are not JSON numbers")]
        return []
    if id(value) in seen:
        return [(path, "a YAML alias refers to itself: definitions cannot be recursive")]
    inner = seen | {id(value)}
    if isinstance(value, Mapping):
        out: list[tuple[str, str]] = []
        for k, v in value.items():
            if not isinstance(k, str):
                out.append((f"{path}.{k}", "keys must be strings: quote it"))
            elif non_json(k, path):
                out.append((path, "a key contains an invalid character (a lone UTF-16 surrogate)"))
            out += non_json(v, f"{path}.{k}", inner, depth + 1)
        return out
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in non_json(v, f"{path}[{i}]", inner, depth + 1)]
    return [(path, f"{type(value).__name__} is not JSON: quote the value (YAML read {value!r})")]


def step_outputs(raw_steps: object) -> int:
    """How many step outputs a run's context can hold: one per activity step (the expressions' cost
    bounds scale with it)."""
    if not isinstance(raw_steps, list):
        return 1
    return max(1, _activities(raw_steps, 0))


def _activities(raw_steps: list[object], depth: int) -> int:
    """Activity steps of a raw list, those of parallel branches and for-each bodies included."""
    n = 0
    for s in raw_steps:
        if not isinstance(s, Mapping) or depth > 8:
            continue
        n += "activity" in s
        shape = s.get("parallel") or s.get("for_each")
        if isinstance(shape, Mapping):
            inner = shape.get("branches") if "parallel" in s else {"body": shape.get("body")}
            for b in inner.values() if isinstance(inner, Mapping) else ():
                listed = b.get("steps") if isinstance(b, Mapping) else b
                n += _activities(listed, depth + 1) if isinstance(listed, list) else 0
    return n


def step_header(
    c: Checker, i: int, raw: Mapping[str, object], at: str, kind: str
) -> tuple[str, str, str | None]:
    """A step's id, its path (`steps[i](id)`) and its `next`, checked alike for every kind parsed in a
    module of its own; the keys it may have are id, `kind`, next and description."""
    raw_id = raw.get("id")
    if isinstance(raw_id, str) and STEP_ID_RE.match(raw_id):
        sid = raw_id
    else:
        c.add(f"{at}[{i}].id", "required; lowercase letters, digits, - and _ (at most 64)")
        sid = f"#{i}"
    p = f"{at}[{i}]({sid})"
    c.keys(p, raw, ("id", kind, "next", "description"))
    nxt = raw.get("next")
    if nxt is not None and not isinstance(nxt, str):
        c.add(f"{p}.next", "must be a step id or `end`")
        nxt = None
    return sid, p, nxt if isinstance(nxt, str) else None
