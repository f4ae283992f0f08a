"""Parallel and for-each steps in a definition: their parsers (a branch or a body is a list of steps,
parsed like the top-level list), and the checks of the definition's shape as a whole. They are made at
publish time, over the whole shape, so that no run can grow past them whatever input it is given:

- `max_steps` counts every step, nested ones included;
- `max_branch_depth` bounds how deep parallel and for-each steps nest inside each other;
- `max_expanded_steps` bounds the steps one run can execute: a for-each body counts once per item it
  may get (its `max_items`, at most the tenant's), so items times nesting cannot explode;
- `max_active_attempts` bounds the attempts one run can have in flight at once (branches times
  concurrency, at every level);
- step ids are unique across the whole definition (a run names a nested step by its lanes and its id:
  core/paths.py), a step goes only to steps of its own list (`next`, choices, approval outcomes) or to
  `end` (which ends that list: the run, the branch or the item), and `item` and `index` are read only
  inside a for-each body.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping, Sequence

from ..expr import Expr, Template, compile_template
from ..limits import TENANT_LIMITS
from .checks import STEP_ID_RE, Checker, check_graph, step_header
from .model import (
    JOINS,
    STEP_KINDS,
    ActivityStep,
    ApprovalStep,
    Branch,
    ChoiceStep,
    FailStep,
    ForEachStep,
    Limits,
    ParallelStep,
    Place,
    RunStep,
    Step,
    SucceedStep,
    WaitEventStep,
    WaitStep,
)
from .parse_http import parse_http_step
from .parse_run import parse_run_step
from .parse_steps import parse_step
from .parse_wait_event import parse_wait_event_step

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_MAX_ITEMS",
    "SHAPE_KINDS",
    "all_steps",
    "check_shapes",
    "nested_places",
    "parse_any",
    "step_lists",
]

SHAPE_KINDS = ("parallel", "for_each")
DEFAULT_CONCURRENCY = 5
DEFAULT_MAX_ITEMS = TENANT_LIMITS["max_items"].default
Skips = dict[str, tuple[str, ...]]


def parse_any(
    c: Checker, i: int, raw: object, lim: Limits, at: str = "steps", skips: Skips | None = None
) -> tuple[Step | None, tuple[str, ...] | None]:
    """The step at `at`[i] of any kind (parse_step for the plain ones), and the roles that may skip it.
    The skip roles of nested steps go into `skips`."""
    if isinstance(raw, Mapping):
        kinds = [k for k in STEP_KINDS if k in raw]
        if len(kinds) == 1 and kinds[0] in SHAPE_KINDS:
            return _parse_shape(c, i, raw, lim, at, kinds[0], skips), None
        if len(kinds) == 1 and kinds[0] == "run":
            return parse_run_step(c, i, raw, lim, at), None
        if len(kinds) == 1 and kinds[0] == "wait_event":
            return parse_wait_event_step(c, i, raw, lim, at), None
        if len(kinds) == 1 and kinds[0] == "http":
            return parse_http_step(c, i, raw, lim, at), None
    return parse_step(c, i, raw, lim, at)


def _parse_shape(
    c: Checker, i: int, raw: Mapping[str, object], lim: Limits, at: str, kind: str, skips: Skips | None
) -> Step | None:
    sid, p, nxt = step_header(c, i, raw, at, kind)
    body = raw[kind]
    if kind == "parallel":
        return _parallel(c, p, sid, nxt, body, lim, skips)
    return _for_each(c, p, sid, nxt, body, lim, skips)


def _parse_list(c: Checker, path: str, raw: object, lim: Limits, skips: Skips | None) -> tuple[Step, ...]:
    if not isinstance(raw, list) or not raw:
        c.add(path, "must be a non-empty list of steps")
        return ()
    out: list[Step] = []
    for j, r in enumerate(raw):
        s, skip = parse_any(c, j, r, lim, path, skips)
        if s is not None:
            out.append(s)
            if skip is not None and skips is not None:
                skips[s.id] = skip
    return tuple(out)


def _on_failure(c: Checker, path: str, raw: object) -> str:
    if raw not in ("fail", "continue"):
        c.add(path, "must be fail (the default: the failure fails the step) or continue (the step goes on)")
        return "fail"
    return str(raw)


def _parallel(
    c: Checker, p: str, sid: str, nxt: str | None, body: object, lim: Limits, skips: Skips | None
) -> Step | None:
    pp = f"{p}.parallel"
    if not isinstance(body, Mapping):
        c.add(pp, "must be a mapping such as {branches: {legal: [steps...], finance: [steps...]}, join: all}")
        return None
    c.keys(pp, body, ("branches", "join"))
    raw_branches = body.get("branches")
    branches: list[Branch] = []
    if not isinstance(raw_branches, Mapping) or not raw_branches:
        c.add(f"{pp}.branches", "required: branch ids with their lists of steps, e.g. {legal: [...]}")
        raw_branches = {}
    for bid, braw in raw_branches.items():
        bp = f"{pp}.branches.{bid}"
        if not isinstance(bid, str) or not STEP_ID_RE.match(bid):
            c.add(bp, "a branch id: lowercase letters, digits, - and _ (at most 64)")
            continue
        on_failure, steps_raw, steps_path = "fail", braw, bp
        if isinstance(braw, Mapping):
            c.keys(bp, braw, ("steps", "on_failure"))
            steps_raw, steps_path = braw.get("steps"), f"{bp}.steps"
            on_failure = _on_failure(c, f"{bp}.on_failure", braw.get("on_failure", "fail"))
        branches.append(Branch(bid, _parse_list(c, steps_path, steps_raw, lim, skips), on_failure))
    join, need = _join(c, f"{pp}.join", body.get("join", "all"), len(branches), "branch(es)")
    return ParallelStep(id=sid, next=nxt, branches=tuple(branches), join=join, need=need or len(branches))


def _for_each(
    c: Checker, p: str, sid: str, nxt: str | None, body: object, lim: Limits, skips: Skips | None
) -> Step | None:
    fp = f"{p}.for_each"
    if not isinstance(body, Mapping):
        c.add(fp, 'must be a mapping such as {items: "${input.lines}", body: [steps...], concurrency: 5}')
        return None
    c.keys(fp, body, ("items", "body", "concurrency", "join", "on_failure", "max_items"))
    items: Template | None = None
    if "items" not in body:
        c.add(f"{fp}.items", 'required: a template that gives a list, e.g. "${input.lines}"')
    else:
        items = c.template(f"{fp}.items", body["items"])
        if items is not None and items.is_constant and not isinstance(body["items"], list):
            c.add(f"{fp}.items", 'must give a list: a list, or a template such as "${input.lines}"')
    steps = _parse_list(c, f"{fp}.body", body.get("body"), lim, skips)
    # The document alone says how many items a run may get (a stored version is compiled without the
    # tenant's limits): the default is the same for every tenant, and within the tenant's limit.
    most = body.get("max_items", DEFAULT_MAX_ITEMS)
    if isinstance(most, bool) or not isinstance(most, int) or most < 1:
        c.add(f"{fp}.max_items", "must be an integer >= 1 (the most elements this step accepts)")
        most = DEFAULT_MAX_ITEMS
    elif most > lim.max_items:
        what = f"{most}" if "max_items" in body else f"the default max_items of {most}"
        c.add(
            f"{fp}.max_items",
            f"{what} exceeds the tenant limit of {lim.max_items} (max_items): "
            f"declare max_items: {lim.max_items} or lower",
        )
    concurrency = body.get("concurrency", min(DEFAULT_CONCURRENCY, most))
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        c.add(f"{fp}.concurrency", "must be an integer >= 1 (items run at once)")
        concurrency = 1
    join, need = _join(c, f"{fp}.join", body.get("join", "all"), most, "item(s) at most (max_items)")
    return ForEachStep(
        id=sid,
        next=nxt,
        items=items or compile_template([]),
        body=steps,
        concurrency=concurrency,
        join=join,
        need=need,
        on_failure=_on_failure(c, f"{fp}.on_failure", body.get("on_failure", "fail")),
        max_items=most,
    )


def _join(c: Checker, path: str, raw: object, lanes: int, what: str) -> tuple[str, int | None]:
    """(join, successes needed): None for `all` (every lane)."""
    if raw == "all":
        return "all", None
    if raw == "any":
        return "any", 1
    if isinstance(raw, Mapping) and set(raw) == {"n_of"}:
        k = raw["n_of"]
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            c.add(f"{path}.n_of", "must be an integer >= 1 (successes needed)")
            return "n_of", 1
        if k > lanes > 0:
            c.add(f"{path}.n_of", f"{k} successes can never be met by {lanes} {what}")
        return "n_of", k
    c.add(path, f"must be one of {', '.join(j for j in JOINS if j != 'n_of')} or {{n_of: K}}")
    return "all", None


# --- the shape as a whole --------------------------------------------------------------------------


def step_lists(steps: Sequence[Step]) -> Iterator[tuple[Step | None, tuple[Step, ...]]]:
    """Every list of steps (the top-level one first, owned by None), with the shape step that owns it."""
    stack: list[tuple[Step | None, tuple[Step, ...]]] = [(None, tuple(steps))]
    while stack:
        owner, lst = stack.pop(0)
        yield owner, lst
        for s in lst:
            if isinstance(s, ParallelStep):
                stack.extend((s, b.steps) for b in s.branches)
            elif isinstance(s, ForEachStep):
                stack.append((s, s.body))


def all_steps(steps: Sequence[Step]) -> list[Step]:
    """Every step of a definition, nested ones included (the top-level ones first)."""
    return [s for _, lst in step_lists(steps) for s in lst]


def nested_places(steps: Sequence[Step]) -> dict[str, Place]:
    """Where each nested step is: its list and position (Definition.nested)."""
    out: dict[str, Place] = {}
    for owner, lst in step_lists(steps):
        if owner is not None:
            for j, s in enumerate(lst):
                out.setdefault(s.id, (lst, j))
    return out


def _depth(lst: Sequence[Step]) -> int:
    inner = [_depth(b.steps) for s in lst if isinstance(s, ParallelStep) for b in s.branches]
    inner += [_depth(s.body) for s in lst if isinstance(s, ForEachStep)]
    return 1 + max(inner) if inner else 0


def _expanded(lst: Sequence[Step]) -> int:
    """Steps one pass through `lst` can execute at most (a body once per item it may get)."""
    n = 0
    for s in lst:
        n += 1
        if isinstance(s, ParallelStep):
            n += sum(_expanded(b.steps) for b in s.branches)
        elif isinstance(s, ForEachStep):
            n += s.max_items * _expanded(s.body)
    return n


def _width(lst: Sequence[Step]) -> int:
    """Attempts `lst` can have in flight at once (its steps run one after the other)."""
    widths = [0]
    for s in lst:
        if isinstance(s, ActivityStep):
            widths.append(1)
        elif isinstance(s, ParallelStep):
            widths.append(sum(_width(b.steps) for b in s.branches))
        elif isinstance(s, ForEachStep):
            widths.append(min(s.concurrency, s.max_items) * _width(s.body))
    return max(widths)


def check_shapes(c: Checker, steps: Sequence[Step], lim: Limits, output: Template | None = None) -> None:
    """The checks of the module docstring (parse.py checks the top-level list itself)."""
    every = all_steps(steps)
    if len(steps) <= lim.max_steps < len(every):
        c.add(
            "steps",
            f"{len(every)} steps ({len(every) - len(steps)} of them inside parallel and for-each steps) "
            f"exceed the tenant limit of {lim.max_steps} (max_steps counts nested steps)",
        )
    if len(every) == len(steps):
        _scope(c, steps, False, output)
        return
    depth = _depth(steps)
    if depth > lim.max_branch_depth:
        c.add(
            "steps",
            f"parallel and for-each steps nest {depth} levels deep; the tenant allows "
            f"{lim.max_branch_depth} (max_branch_depth): flatten the inner part",
        )
    expanded = _expanded(steps)
    if expanded > lim.max_expanded_steps:
        c.add(
            "steps",
            f"a run of this definition could execute {expanded:,} steps (each for-each body counted "
            f"once per item its max_items allows); the tenant allows {lim.max_expanded_steps:,} "
            f"(max_expanded_steps): lower max_items on the for_each steps, or nest less",
        )
    width = _width(steps)
    if width > lim.max_active_attempts:
        c.add(
            "steps",
            f"a run of this definition could have {width} activity attempts in flight at once "
            f"(parallel branches times for-each concurrency); the tenant allows "
            f"{lim.max_active_attempts} (max_active_attempts): lower the concurrency of its for_each steps",
        )
    seen = {s.id for s in steps}
    everywhere = {s.id for s in every}
    for owner, lst in step_lists(steps):
        if owner is None:
            continue
        for s in lst:
            if s.id in seen:
                c.add(
                    f"steps({s.id}).id",
                    "duplicate step id: ids are unique across the whole definition, nested steps included",
                )
            elif s.id == "end":
                c.add(f"steps({s.id}).id", "`end` is reserved (next: end finishes the branch or item)")
            seen.add(s.id)
        _targets(c, lst, everywhere)
    _scope(c, steps, False, output)


def _step_targets(s: Step) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if s.next is not None:
        out.append(("next", s.next))
    if isinstance(s, ChoiceStep):
        out += [("choice", t) for _, t in s.branches]
        if s.default is not None:
            out.append(("else", s.default))
    if isinstance(s, ApprovalStep):
        if s.on_timeout not in ("reject", "fail"):
            out.append(("approval.on_timeout", s.on_timeout))
        if s.on_reject != "fail":
            out.append(("approval.on_reject", s.on_reject))
    if isinstance(s, WaitEventStep) and s.on_timeout != "fail":
        out.append(("wait_event.on_timeout", s.on_timeout))
    return out


def _targets(c: Checker, lst: tuple[Step, ...], everywhere: set[str]) -> None:
    """A nested step goes only to a step of its own list, or `end` (which ends the branch or item)."""
    ids = {s.id for s in lst}
    ok = True
    for s in lst:
        for where, t in _step_targets(s):
            if t == "end" or t in ids:
                continue
            ok = False
            if t in everywhere:
                c.add(
                    f"steps({s.id}).{where}",
                    f"step `{t}` is not in the same branch or body: a nested step goes only to steps of "
                    f"its own list, or `end` (which ends the branch, or the item)",
                )
            else:
                hint = difflib.get_close_matches(t, sorted(ids), n=1)
                c.add(
                    f"steps({s.id}).{where}",
                    f"no step `{t}`" + (f" (did you mean `{hint[0]}`?)" if hint else ""),
                )
    if ok:
        check_graph(c, list(lst))  # its loop check (its own target check finds nothing more now)


def _expressions(s: Step) -> list[Expr]:
    """The expressions a step evaluates in its own lane (a for-each's items too: in the lane around it)."""
    templates: list[Template | None] = []
    if isinstance(s, ActivityStep):
        templates += [s.input, s.idempotency_key, s.compensate.input if s.compensate else None]
    elif isinstance(s, WaitStep):
        templates.append(s.until)
    elif isinstance(s, FailStep):
        templates.append(s.message)
    elif isinstance(s, SucceedStep):
        templates.append(s.output)
    elif isinstance(s, ApprovalStep):
        templates.append(s.details)
    elif isinstance(s, ForEachStep):
        templates.append(s.items)
    elif isinstance(s, RunStep):
        templates.append(s.input)
    elif isinstance(s, WaitEventStep):
        templates.append(s.key)
    out = [e for t in templates if t is not None for e in t.expressions()]
    if isinstance(s, ChoiceStep):
        out += [e for e, _ in s.branches]
    return out


def _scope(c: Checker, lst: Sequence[Step], in_body: bool, output: Template | None) -> None:
    """`item` and `index` only inside a for-each body."""
    if output is not None and any({"item", "index"} & e.roots for e in output.expressions()):
        c.add("output", "item and index exist only inside a for_each body")
    for s in lst:
        if not in_body:
            for e in _expressions(s):
                used = sorted({"item", "index"} & e.roots)
                if used:
                    c.add(
                        f"steps({s.id})",
                        f"`{e.source}` reads {' and '.join(used)}, which exist only inside a for_each body",
                    )
                    break
        if isinstance(s, ParallelStep):
            for b in s.branches:
                _scope(c, b.steps, in_body, None)
        elif isinstance(s, ForEachStep):
            _scope(c, s.body, True, None)
