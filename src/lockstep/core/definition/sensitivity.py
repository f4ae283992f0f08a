"""What a definition declares sensitive, and what follows from it: the `Sensitivity` computed at parse.

Declared: the run's input (`x-lockstep-sensitive: true` on a property of `input_schema`, and/or
`sensitive_input: [JSON pointers]`) and activity outputs (`output_sensitive: true` or pointers). The rest
is a static taint analysis of the templates: a value rendered by a template is sensitive where the
expressions that produce it read a sensitive source (`input` at a place that overlaps a sensitive
pointer, or the output of a step whose output is sensitive there). A string that is exactly one field
path (`${input.customer}`) copies that value, so only the sensitive places inside it are; any other
expression is sensitive as a whole once it reads a sensitive source, and a source it cannot name
statically (`input[k]`, `input`, `steps`) counts as every sensitive field of that root (exprreads).

Two places are stored and used in clear, so a template there must not read a sensitive value, and
publishing refuses it: an activity's `idempotency_key` (a column other systems deduplicate by) and a
wait's `until` (the time the scheduler fires). A choice condition stores nothing, only its failures.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..canonical import JSONValue
from ..expr import Expr, Template
from ..exprreads import reads
from ..pointer import PointerError, escape, format_pointer, minimal, parse_pointer
from ..sensitive import NOT_SENSITIVE, Sensitivity, StepSensitivity
from .checks import Checker
from .model import (
    ActivityStep,
    ApprovalStep,
    ChoiceStep,
    FailStep,
    ForEachStep,
    Limits,
    ParallelStep,
    RunStep,
    Step,
    SucceedStep,
    WaitEventStep,
    WaitStep,
)
from .sensitive_schema import annotated, check_pointer, mentions

__all__ = ["classify", "pointer_list"]

Path = tuple[str, ...]


def pointer_list(c: Checker, path: str, raw: object, lim: Limits) -> tuple[str, ...]:
    """`true` (all of the value), `false`, or a list of JSON pointers into it, each checked for form."""
    if raw is True:
        return ("",)
    if raw is False:
        return ()
    if not isinstance(raw, list):
        c.add(path, "must be true (all of it) or a list of JSON pointers, e.g. [/card, /customer/iban]")
        return ()
    out: list[str] = []
    for i, p in enumerate(raw):
        at = f"{path}[{i}]"
        if not isinstance(p, str):
            c.add(at, "must be a JSON pointer such as /card (a string)")
            continue
        if len(p) > lim.max_pointer_length:
            c.add(
                at,
                f"a pointer of {len(p)} characters; the limit is {lim.max_pointer_length} "
                f"(max_pointer_length): mark the enclosing field instead",
            )
            continue
        try:
            parse_pointer(p)
        except PointerError as exc:
            fix = "/" + p.removeprefix("input.").replace(".", "/") if p and "/" not in p else ""
            c.add(at, f"{exc}" + (f" (did you mean `{fix}`?)" if fix else ""))
            continue
        if p in out:
            shown = p or 'the whole value ("")'
            c.add(at, f"lists {shown} twice")
            continue
        out.append(p)
    return tuple(out)


def classify(
    c: Checker,
    document: Mapping[str, JSONValue],
    schema: Mapping[str, JSONValue] | None,
    steps: list[Step],
    output: Template | None,
    lim: Limits,
) -> Sensitivity:
    """The definition's Sensitivity (NOT_SENSITIVE, at once, when it declares nothing); problems go to c."""
    declared = (
        pointer_list(c, "sensitive_input", document["sensitive_input"], lim)
        if "sensitive_input" in document
        else ()
    )
    if schema is not None:
        for i, p in enumerate(declared):
            reason = check_pointer(schema, p)
            if reason is not None:
                c.add(f"sensitive_input[{i}]", reason)
    marked: list[str] = []
    if schema is not None and mentions(schema):
        found, problems = annotated(schema)
        for path, reason in problems:
            c.add(path, reason)
        for p, where in found:
            if len(p) > lim.max_pointer_length:
                c.add(
                    where,
                    f"marks {p[:40]}..., a pointer of {len(p)} characters; the limit is "
                    f"{lim.max_pointer_length} (max_pointer_length): mark an enclosing property",
                )
            marked.append(p)
    outputs = {
        s.id: s.output_sensitive
        for s in steps
        if isinstance(s, ActivityStep | RunStep) and s.output_sensitive
    }
    forms = {s.id: form_pointers(s) for s in steps if isinstance(s, ApprovalStep) and form_pointers(s)}
    # A sensitive form field is a source: its merged value and every decision (which holds it).
    outputs |= {sid: (*(f"/values{p}" for p in ps), "/decisions") for sid, ps in forms.items()}
    total = len(declared) + len(set(marked)) + sum(len(v) for v in outputs.values())
    if total > lim.max_sensitive_pointers:
        c.add(
            "$",
            f"declares {total} sensitive places; the limit is {lim.max_sensitive_pointers} "
            f"(max_sensitive_pointers): mark an enclosing object instead of each of its fields",
        )
        return NOT_SENSITIVE  # refused anyway; the taint analysis is bounded by the limit
    inputs = minimal([*declared, *marked])
    if not inputs and not outputs:
        return NOT_SENSITIVE
    return _Taint(c, inputs, outputs).sensitivity(steps, output)


class _Taint:
    def __init__(self, c: Checker, inputs: tuple[str, ...], outputs: Mapping[str, tuple[str, ...]]) -> None:
        self.c = c
        self.inputs = inputs
        self.outputs = {k: minimal(v) for k, v in outputs.items()}
        self.sources: list[Path] = [("input", *parse_pointer(p)) for p in inputs] + [
            ("steps", sid, "output", *parse_pointer(p)) for sid, ps in self.outputs.items() for p in ps
        ]
        self._reads: dict[str, frozenset[Path]] = {}

    def shapes(self, steps: list[Step]) -> dict[str, StepSensitivity]:
        """Parallel and for-each steps: a shape's output (a branch's or an item's output is one of its
        steps') is sensitive, all of it, when a step inside can give a sensitive output, and then a
        source for the steps after it; `item` is a source once any for-each's items read one (nested
        shapes need a few passes: each finds what the one inside gave)."""
        out: dict[str, StepSensitivity] = {}
        for _ in range(6):
            before = len(self.sources)
            for s in steps:
                if isinstance(s, ParallelStep | ForEachStep):
                    inner = _inside(s)
                    outputs = any(
                        self.outputs.get(x.id)
                        or (isinstance(x, SucceedStep) and self.pointers(x.output))
                        or (
                            isinstance(x, ParallelStep | ForEachStep)
                            and ("steps", x.id, "output") in self.sources
                        )
                        for x in inner
                    )
                    items = self.pointers(s.items) if isinstance(s, ForEachStep) else ()
                    if items and ("item",) not in self.sources:
                        self.sources.append(("item",))
                    if outputs and ("steps", s.id, "output") not in self.sources:
                        self.sources.append(("steps", s.id, "output"))
                    out[s.id] = StepSensitivity(output=("",) if outputs else (), items=items)
            if len(self.sources) == before:
                break
        return out

    def reads_sensitive(self, e: Expr) -> bool:
        got = self._reads.get(e.source)
        if got is None:
            got = self._reads[e.source] = reads(e)
        return any(_overlap(r, src) for r in got for src in self.sources)

    def pointers(self, t: Template | None) -> tuple[str, ...]:
        """Where the value `t` renders is sensitive (pointers relative to that value)."""
        if t is None:
            return ()
        out: list[str] = []
        for at, parts in t.leaves():
            base = format_pointer(at)
            only = parts[0] if len(parts) == 1 else None
            if isinstance(only, Expr) and only.path is not None:
                read = only.path  # a copy of the value at that path: the sensitive places inside it
                for src in self.sources:
                    if src[: len(read)] == read:
                        out.append(base + format_pointer(src[len(read) :]))
                    elif read[: len(src)] == src:
                        out.append(base)
            elif any(isinstance(e, Expr) and self.reads_sensitive(e) for e in parts):
                out.append(base)
        return minimal(out)

    def refuse(self, path: str, t: Template | None, why: str) -> None:
        if t is not None and self.pointers(t):
            self.c.add(path, f"reads a sensitive value, but {why}")

    def sensitivity(self, steps: list[Step], output: Template | None) -> Sensitivity:
        shapes = self.shapes(steps)
        per_step: dict[str, StepSensitivity] = {}
        run_out: list[str] = list(self.pointers(output))
        run_messages = bool(run_out)
        for s in steps:
            if isinstance(s, ActivityStep):
                self.refuse(
                    f"steps({s.id}).idempotency_key",
                    s.idempotency_key,
                    "an idempotency key is stored in clear and handed to other systems to deduplicate "
                    "by: build it from fields that are not sensitive (an order id, the run id)",
                )
                inp, out = self.pointers(s.input), self.outputs.get(s.id, ())
                comp = self.pointers(s.compensate.input) if s.compensate is not None else ()
                per_step[s.id] = StepSensitivity(
                    input=inp,
                    output=out,
                    compensation_input=comp,
                    compensation_output=bool(comp or out),
                    messages=bool(inp or out or comp),
                )
            elif isinstance(s, RunStep):  # a child run: its input as an activity's, its output as declared
                inp, out = self.pointers(s.input), self.outputs.get(s.id, ())
                per_step[s.id] = StepSensitivity(input=inp, output=out, messages=bool(inp or out))
            elif isinstance(s, ChoiceStep):
                per_step[s.id] = StepSensitivity(messages=any(self.reads_sensitive(e) for e, _ in s.branches))
            elif isinstance(s, WaitStep):
                self.refuse(
                    f"steps({s.id}).wait.until",
                    s.until,
                    "the time a wait fires is stored in clear (the scheduler reads it): wait on a field "
                    "that is not sensitive",
                )
            elif isinstance(s, WaitEventStep):
                self.refuse(
                    f"steps({s.id}).wait_event.key",
                    s.key,
                    "the correlation key is stored in clear (the waits index matches events by it): "
                    "correlate on a field that is not sensitive",
                )
            elif isinstance(s, FailStep):
                per_step[s.id] = StepSensitivity(messages=bool(self.pointers(s.message)))
            elif isinstance(s, ApprovalStep):
                details = bool(self.pointers(s.details))
                per_step[s.id] = StepSensitivity(
                    details=details,
                    messages=details,
                    values=form_pointers(s),
                    output=self.outputs.get(s.id, ()),
                )
            elif isinstance(s, SucceedStep) and s.output is not None:
                mine = self.pointers(s.output)
                run_out += mine
                run_messages = run_messages or bool(mine)
        for s in steps:  # failure messages of a shape step quote those of the steps inside it
            if s.id in shapes:
                messages = any(per_step.get(x.id, StepSensitivity()).messages for x in _inside(s))
                shaped = shapes[s.id]
                per_step[s.id] = StepSensitivity(
                    output=shaped.output, items=shaped.items, messages=messages or bool(shaped.output)
                )
                if shaped.output:
                    run_out.append("")  # it may be the last output, so the run's
        if output is None:  # a run may end with the last step output as its own
            run_out += [p for ps in self.outputs.values() for p in ps]
        return Sensitivity.build(
            input=self.inputs,
            output=minimal(run_out),
            steps=per_step,
            run_messages=run_messages,
            step_ids=frozenset(s.id for s in steps),
        )


def form_pointers(s: ApprovalStep) -> tuple[str, ...]:
    """The pointers (into a decision's values) of the step's form fields declared `sensitive: true`."""
    return tuple("/" + escape(f["name"]) for f in s.form if f.get("sensitive"))


def _inside(s: Step) -> list[Step]:
    """Every step inside a parallel or for-each step, at any depth."""
    out: list[Step] = []
    stack = [b.steps for b in s.branches] if isinstance(s, ParallelStep) else []
    if isinstance(s, ForEachStep):
        stack.append(s.body)
    while stack:
        for x in stack.pop():
            out.append(x)
            if isinstance(x, ParallelStep):
                stack.extend(b.steps for b in x.branches)
            elif isinstance(x, ForEachStep):
                stack.append(x.body)
    return out


def _overlap(a: Path, b: Path) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]
