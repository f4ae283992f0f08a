"""Definitions as data: parse, validate statically (every error with its path), compile, digest.

A definition version is immutable and identified by the sha256 of its canonical JSON; the parsed
`Definition` holds compiled expressions so the core never re-parses text while deciding.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import jsonschema

from .canonical import digest
from .expr import Expr, ExprError, ExprLimits, Template, compile_expr, compile_template
from .timeutil import format_duration, parse_duration

__all__ = [
    "ActivityStep",
    "ApprovalStep",
    "ChoiceStep",
    "Compensation",
    "Definition",
    "DefinitionError",
    "FailStep",
    "Limits",
    "RetryPolicy",
    "Step",
    "SucceedStep",
    "WaitStep",
    "parse_definition",
]

NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")
STEP_ID_RE = re.compile(r"^[a-z0-9_-]{1,64}$")
ACTIVITY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z_][A-Za-z0-9_-]*)*$")
DELIVERIES = ("idempotent", "at_most_once")
STEP_KINDS = ("activity", "choice", "wait", "fail", "succeed", "approval")


@dataclass(frozen=True)
class Limits:
    """Per-tenant static limits applied when a definition is published."""

    max_steps: int = 20
    max_wait: timedelta = timedelta(days=365)
    max_timeout: timedelta = timedelta(days=7)
    max_attempts: int = 100
    # Size, nesting and worst-case cost of every expression, against the tenant's data bounds.
    expressions: ExprLimits = field(default_factory=ExprLimits)


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 3
    initial_interval: timedelta = timedelta(seconds=1)
    backoff: float = 2.0
    max_interval: timedelta = timedelta(minutes=1)
    non_retryable: tuple[str, ...] = ()
    # When retries run out: "fail" the step (compensate, end failed) or "dead_letter" (the run waits in
    # needs_attention for an operator to retry, resolve or cancel).
    on_exhausted: str = "fail"

    def delay(self, failed_attempt: int) -> timedelta:
        """Backoff before the attempt after `failed_attempt` (1-based): initial * backoff^(n-1), capped."""
        seconds = self.initial_interval.total_seconds() * (self.backoff ** (failed_attempt - 1))
        return min(timedelta(seconds=seconds), self.max_interval)


COMPENSATION_RETRY = RetryPolicy(max_attempts=10, initial_interval=timedelta(seconds=1))


@dataclass(frozen=True)
class Compensation:
    activity: str
    input: Template
    timeout: timedelta
    retry: RetryPolicy
    queue: str | None = None


@dataclass(frozen=True)
class ActivityStep:
    id: str
    next: str | None
    activity: str
    input: Template
    timeout: timedelta
    retry: RetryPolicy
    delivery: str
    idempotency_key: Template | None
    compensate: Compensation | None
    queue: str | None = None
    priority: int = 0
    kind: str = "activity"


@dataclass(frozen=True)
class ChoiceStep:
    id: str
    branches: tuple[tuple[Expr, str], ...]
    default: str | None
    next: str | None = None
    kind: str = "choice"


@dataclass(frozen=True)
class WaitStep:
    id: str
    next: str | None
    duration: timedelta | None
    until: Template | None
    kind: str = "wait"


@dataclass(frozen=True)
class FailStep:
    id: str
    error: str
    message: Template
    next: str | None = None
    kind: str = "fail"


@dataclass(frozen=True)
class SucceedStep:
    id: str
    output: Template | None
    next: str | None = None
    kind: str = "succeed"


@dataclass(frozen=True)
class ApprovalStep:
    """Wait for people: `quorum` distinct approvers from `users`/`groups` approve, or one rejection
    (`reject_quorum`, default 1) rejects. Decisions are commands; no worker is held while waiting."""

    id: str
    next: str | None
    users: tuple[str, ...]
    groups: tuple[str, ...]
    quorum: int
    reject_quorum: int
    timeout: timedelta
    on_timeout: str  # "reject" | "fail" | <step id>
    on_reject: str  # "fail" | <step id>
    allow_initiator: bool
    details: Template
    kind: str = "approval"

    def policy(self) -> dict[str, Any]:
        """The policy as recorded in ApprovalRequested (and hashed into its policy digest)."""
        return {
            "users": list(self.users),
            "groups": list(self.groups),
            "quorum": self.quorum,
            "reject_quorum": self.reject_quorum,
            "timeout_ms": int(self.timeout.total_seconds() * 1000),
            "on_timeout": self.on_timeout,
            "on_reject": self.on_reject,
            "allow_initiator": self.allow_initiator,
        }


Step = ActivityStep | ChoiceStep | WaitStep | FailStep | SucceedStep | ApprovalStep


@dataclass(frozen=True)
class Definition:
    name: str
    digest: str
    document: dict[str, Any]
    steps: tuple[Step, ...]
    input_schema: dict[str, Any] | None
    output: Template | None
    description: str = ""
    index: dict[str, int] = field(default_factory=dict)
    # Steps an operator may skip, and which roles may do it (`skippable: true` means operator and admin).
    skip_roles: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Repairs that need a second operator's confirmation on runs of this definition (`four_eyes:`).
    four_eyes: frozenset[str] = frozenset()

    def step(self, step_id: str) -> Step:
        return self.steps[self.index[step_id]]

    def following(self, step_id: str) -> str | None:
        """The step after step_id: its `next`, else the next in order, else None (the run completes)."""
        step = self.step(step_id)
        if step.next is not None:
            return None if step.next == "end" else step.next
        i = self.index[step_id] + 1
        return self.steps[i].id if i < len(self.steps) else None

    def check_input(self, value: Any) -> None:
        """Raise DefinitionError if value fails the input schema."""
        if self.input_schema is None:
            return
        validator = jsonschema.Draft202012Validator(self.input_schema)
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        if errors:
            raise DefinitionError(
                [(_json_path("input", list(e.absolute_path)), e.message) for e in errors[:5]],
                title=f"input does not match the input_schema of {self.name}",
            )


class DefinitionError(ValueError):
    """Static errors: a list of (path, reason); str() gives one line per problem."""

    def __init__(self, problems: list[tuple[str, str]], title: str = "invalid definition") -> None:
        self.problems = problems
        self.title = title
        super().__init__(self.__str__())

    def __str__(self) -> str:
        lines = "; ".join(f"{p}: {r}" for p, r in self.problems)
        return f"{self.title}: {lines}"


def _json_path(root: str, parts: list[Any]) -> str:
    out = root
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


class _Checker:
    def __init__(self, expressions: ExprLimits | None = None) -> None:
        self.exl = expressions or ExprLimits()
        self.problems: list[tuple[str, str]] = []
        self.skip_roles: dict[str, tuple[str, ...]] = {}

    def add(self, path: str, reason: str) -> None:
        self.problems.append((path, reason))

    def keys(self, path: str, obj: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
        for k in obj:
            if k not in allowed:
                hint = difflib.get_close_matches(str(k), allowed, n=1)
                extra = f" (did you mean `{hint[0]}`?)" if hint else f" (allowed: {', '.join(allowed)})"
                self.add(f"{path}.{k}", f"unknown field{extra}")

    def duration(self, path: str, value: Any, limit: timedelta | None = None) -> timedelta | None:
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

    def template(self, path: str, value: Any) -> Template | None:
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

    def expr(self, path: str, value: Any) -> Expr | None:
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


def _retry(c: _Checker, path: str, raw: Any, default: RetryPolicy, limits: Limits) -> RetryPolicy:
    if raw is None:
        return default
    if not isinstance(raw, Mapping):
        c.add(path, "must be a mapping such as {max_attempts: 5, initial_interval: 1s}")
        return default
    c.keys(
        path,
        raw,
        ("max_attempts", "initial_interval", "backoff", "max_interval", "non_retryable", "on_exhausted"),
    )
    attempts = raw.get("max_attempts", default.max_attempts)
    if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1:
        c.add(f"{path}.max_attempts", "must be an integer >= 1")
        attempts = default.max_attempts
    elif attempts > limits.max_attempts:
        c.add(f"{path}.max_attempts", f"{attempts} exceeds the tenant limit of {limits.max_attempts}")
    backoff = raw.get("backoff", default.backoff)
    if isinstance(backoff, bool) or not isinstance(backoff, int | float) or backoff < 1:
        c.add(f"{path}.backoff", "must be a number >= 1.0")
        backoff = default.backoff
    initial = default.initial_interval
    if "initial_interval" in raw:
        initial = c.duration(f"{path}.initial_interval", raw["initial_interval"]) or initial
    maximum = default.max_interval
    if "max_interval" in raw:
        maximum = c.duration(f"{path}.max_interval", raw["max_interval"]) or maximum
    nr = raw.get("non_retryable", list(default.non_retryable))
    if not isinstance(nr, list) or not all(isinstance(x, str) for x in nr):
        c.add(f"{path}.non_retryable", "must be a list of error codes, e.g. [OutOfStock]")
        nr = []
    exhausted = raw.get("on_exhausted", default.on_exhausted)
    if exhausted not in ("fail", "dead_letter"):
        c.add(f"{path}.on_exhausted", "must be fail or dead_letter")
        exhausted = "fail"
    return RetryPolicy(int(attempts), initial, float(backoff), max(maximum, initial), tuple(nr), exhausted)


def _activity_name(c: _Checker, path: str, value: Any) -> str:
    if not isinstance(value, str) or not ACTIVITY_RE.match(value):
        c.add(path, "must be an activity type name such as inventory.reserve")
        return ""
    return value


def _queue(c: _Checker, path: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not STEP_ID_RE.match(value):
        c.add(path, "must be a queue name matching [a-z0-9_-]+")
        return None
    return value


def _parse_activity(c: _Checker, p: str, raw: Mapping[str, Any], sid: str, nxt: Any, lim: Limits) -> Step:
    c.keys(
        p,
        raw,
        (
            "id",
            "activity",
            "input",
            "timeout",
            "retry",
            "delivery",
            "idempotency_key",
            "compensate",
            "next",
            "queue",
            "priority",
            "description",
        ),
    )
    activity = _activity_name(c, f"{p}.activity", raw.get("activity"))
    if "timeout" not in raw:
        c.add(f"{p}.timeout", "required on activity steps (the limit of one attempt), e.g. timeout: 30s")
        timeout = timedelta(seconds=30)
    else:
        timeout = c.duration(f"{p}.timeout", raw["timeout"], lim.max_timeout) or timedelta(seconds=30)
    delivery = raw.get("delivery", "idempotent")
    if delivery not in DELIVERIES:
        c.add(f"{p}.delivery", f"must be one of {', '.join(DELIVERIES)}")
        delivery = "idempotent"
    key = raw.get("idempotency_key")
    key_t = None
    if key is not None:
        if not isinstance(key, str) or not key:
            c.add(f"{p}.idempotency_key", 'must be a non-empty string template, e.g. "charge-${input.order}"')
        else:
            key_t = c.template(f"{p}.idempotency_key", key)
    comp = None
    if "compensate" in raw:
        craw = raw["compensate"]
        cp = f"{p}.compensate"
        if not isinstance(craw, Mapping):
            c.add(cp, "must be a mapping such as {activity: inventory.release, input: {...}}")
        else:
            c.keys(cp, craw, ("activity", "input", "timeout", "retry", "queue"))
            ctimeout = timeout
            if "timeout" in craw:
                ctimeout = c.duration(f"{cp}.timeout", craw["timeout"], lim.max_timeout) or timeout
            comp = Compensation(
                activity=_activity_name(c, f"{cp}.activity", craw.get("activity")),
                input=c.template(f"{cp}.input", craw.get("input", {})) or compile_template({}),
                timeout=ctimeout,
                retry=_retry(c, f"{cp}.retry", craw.get("retry"), COMPENSATION_RETRY, lim),
                queue=_queue(c, f"{cp}.queue", craw.get("queue")),
            )
    return ActivityStep(
        id=sid,
        next=nxt,
        activity=activity,
        input=c.template(f"{p}.input", raw.get("input", {})) or compile_template({}),
        timeout=timeout,
        retry=_retry(c, f"{p}.retry", raw.get("retry"), RetryPolicy(), lim),
        delivery=delivery,
        idempotency_key=key_t,
        compensate=comp,
        queue=_queue(c, f"{p}.queue", raw.get("queue")),
        priority=_priority(c, f"{p}.priority", raw.get("priority", 0)),
    )


def _priority(c: _Checker, path: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -100 <= value <= 100:
        c.add(path, "must be an integer from -100 to 100 (higher is claimed first)")
        return 0
    return value


def _parse_choice(c: _Checker, p: str, raw: Mapping[str, Any], sid: str) -> Step:
    c.keys(p, raw, ("id", "choice", "description"))
    branches: list[tuple[Expr, str]] = []
    default = None
    items = raw["choice"]
    if not isinstance(items, list) or not items:
        c.add(
            f"{p}.choice", "must be a non-empty list of {if: EXPR, next: STEP} and an optional {else: STEP}"
        )
        items = []
    for j, br in enumerate(items):
        bp = f"{p}.choice[{j}]"
        if not isinstance(br, Mapping):
            c.add(bp, "must be {if: EXPR, next: STEP} or {else: STEP}")
        elif "else" in br:
            c.keys(bp, br, ("else",))
            if default is not None:
                c.add(bp, "only one else branch is allowed")
            if j != len(items) - 1:
                c.add(bp, "the else branch must come last")
            default = str(br["else"])
        else:
            c.keys(bp, br, ("if", "next"))
            if "if" not in br or "next" not in br:
                c.add(bp, "a branch needs both `if` (an expression) and `next` (a step id)")
                continue
            e = c.expr(f"{bp}.if", br["if"])
            if e is not None:
                branches.append((e, str(br["next"])))
    if len(branches) > 1:
        c.budget(f"{p}.choice", sum(e.cost for e, _ in branches), "the conditions of this choice together")
    return ChoiceStep(id=sid, branches=tuple(branches), default=default)


def _parse_wait(c: _Checker, p: str, raw: Mapping[str, Any], sid: str, nxt: Any, lim: Limits) -> Step:
    c.keys(p, raw, ("id", "wait", "next", "description"))
    w = raw["wait"]
    if isinstance(w, Mapping):
        c.keys(f"{p}.wait", w, ("until", "for"))
        if "until" in w:
            return WaitStep(id=sid, next=nxt, duration=None, until=c.template(f"{p}.wait.until", w["until"]))
        if "for" in w:
            return WaitStep(
                id=sid, next=nxt, duration=c.duration(f"{p}.wait.for", w["for"], lim.max_wait), until=None
            )
        c.add(f"{p}.wait", 'give a duration (wait: 2s) or {until: "${input.deadline}"}')
        return WaitStep(id=sid, next=nxt, duration=timedelta(seconds=1), until=None)
    return WaitStep(id=sid, next=nxt, duration=c.duration(f"{p}.wait", w, lim.max_wait), until=None)


def _parse_fail(c: _Checker, p: str, raw: Mapping[str, Any], sid: str) -> Step:
    c.keys(p, raw, ("id", "fail", "description"))
    f = raw["fail"]
    if not isinstance(f, Mapping) or not isinstance(f.get("error"), str):
        c.add(f"{p}.fail", "must be {error: CODE, message: TEXT}")
        return FailStep(id=sid, error="Failed", message=compile_template(""))
    c.keys(f"{p}.fail", f, ("error", "message"))
    msg = c.template(f"{p}.fail.message", f.get("message", "")) or compile_template("")
    return FailStep(id=sid, error=f["error"], message=msg)


def _parse_succeed(c: _Checker, p: str, raw: Mapping[str, Any], sid: str) -> Step:
    c.keys(p, raw, ("id", "succeed", "description"))
    s = raw["succeed"]
    if s is None or s is True:
        return SucceedStep(id=sid, output=None)
    if not isinstance(s, Mapping):
        c.add(f"{p}.succeed", "must be true or {output: TEMPLATE}")
        return SucceedStep(id=sid, output=None)
    c.keys(f"{p}.succeed", s, ("output",))
    return SucceedStep(
        id=sid, output=c.template(f"{p}.succeed.output", s["output"]) if "output" in s else None
    )


def _skip_roles(c: _Checker, p: str, raw: Mapping[str, Any]) -> tuple[str, ...] | None:
    """`skippable: true` (operators and admins may skip) or `skip_policy: {roles: [...]}`."""
    if "skip_policy" in raw:
        pol = raw["skip_policy"]
        roles = pol.get("roles") if isinstance(pol, Mapping) else None
        if not isinstance(roles, list) or not roles or not all(isinstance(r, str) for r in roles):
            c.add(f"{p}.skip_policy", "must be {roles: [operator, admin]}: the roles that may skip this step")
            return None
        return tuple(roles)
    skippable = raw.get("skippable", False)
    if not isinstance(skippable, bool):
        c.add(f"{p}.skippable", "must be true or false")
        return None
    return ("operator", "admin") if skippable else None


def _parse_step(c: _Checker, i: int, raw: Any, lim: Limits) -> Step | None:
    p = f"steps[{i}]"
    if not isinstance(raw, Mapping):
        c.add(p, "must be a mapping with an id and one of: " + ", ".join(STEP_KINDS))
        return None
    sid = raw.get("id")
    if not isinstance(sid, str) or not STEP_ID_RE.match(sid):
        c.add(f"{p}.id", "required; lowercase letters, digits, - and _ (at most 64)")
        sid = f"#{i}"
    p = f"steps[{i}]({sid})"
    kinds = [k for k in STEP_KINDS if k in raw]
    if len(kinds) != 1:
        what = "none" if not kinds else ", ".join(kinds)
        c.add(p, f"a step needs exactly one of {', '.join(STEP_KINDS)} (found {what})")
        return None
    nxt = raw.get("next")
    if nxt is not None and not isinstance(nxt, str):
        c.add(f"{p}.next", "must be a step id or `end`")
        nxt = None
    skip = _skip_roles(c, p, raw)
    if skip is not None:
        c.skip_roles[sid] = skip
    raw = {k: v for k, v in raw.items() if k not in ("skippable", "skip_policy")}
    kind = kinds[0]
    if kind == "activity":
        return _parse_activity(c, p, raw, sid, nxt, lim)
    if kind == "choice":
        return _parse_choice(c, p, raw, sid)
    if kind == "wait":
        return _parse_wait(c, p, raw, sid, nxt, lim)
    if kind == "fail":
        return _parse_fail(c, p, raw, sid)
    if kind == "succeed":
        return _parse_succeed(c, p, raw, sid)
    return _parse_approval(c, p, raw, sid, nxt, lim)


def _names(c: _Checker, path: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and NAME_RE.match(v) for v in value):
        c.add(path, "must be a list of names (lowercase letters, digits, -), e.g. [alice, bob]")
        return ()
    return tuple(dict.fromkeys(value))


def _parse_approval(
    c: _Checker, p: str, raw: Mapping[str, Any], sid: str, nxt: Any, lim: Limits
) -> Step | None:
    c.keys(p, raw, ("id", "approval", "next", "description"))
    a = raw["approval"]
    ap = f"{p}.approval"
    if not isinstance(a, Mapping):
        c.add(ap, "must be a mapping with approvers, quorum and timeout")
        return None
    c.keys(
        ap,
        a,
        (
            "approvers",
            "quorum",
            "reject_quorum",
            "timeout",
            "on_timeout",
            "on_reject",
            "allow_initiator",
            "details",
        ),
    )
    who = a.get("approvers")
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    if not isinstance(who, Mapping):
        c.add(f"{ap}.approvers", "required: {users: [alice, bob], groups: [finance]}")
    else:
        c.keys(f"{ap}.approvers", who, ("users", "groups"))
        users = _names(c, f"{ap}.approvers.users", who.get("users"))
        groups = _names(c, f"{ap}.approvers.groups", who.get("groups"))
        if not users and not groups:
            c.add(f"{ap}.approvers", "name at least one user or group who may decide")
    quorum = a.get("quorum", 1)
    if isinstance(quorum, bool) or not isinstance(quorum, int) or quorum < 1:
        c.add(f"{ap}.quorum", "must be an integer >= 1 (distinct approvers needed)")
        quorum = 1
    elif not groups and users and quorum > len(users):
        c.add(f"{ap}.quorum", f"quorum {quorum} can never be met by the {len(users)} listed user(s)")
    rq = a.get("reject_quorum", 1)
    if isinstance(rq, bool) or not isinstance(rq, int) or rq < 1:
        c.add(f"{ap}.reject_quorum", "must be an integer >= 1 (rejections needed to reject)")
        rq = 1
    if "timeout" not in a:
        c.add(f"{ap}.timeout", "required: how long people have to decide, e.g. timeout: 3d")
        timeout = timedelta(days=1)
    else:
        timeout = c.duration(f"{ap}.timeout", a["timeout"], lim.max_wait) or timedelta(days=1)
    on_timeout = a.get("on_timeout", "reject")
    on_reject = a.get("on_reject", "fail")
    if not isinstance(on_timeout, str) or not on_timeout:
        c.add(f"{ap}.on_timeout", "must be reject, fail or a step id")
        on_timeout = "reject"
    if not isinstance(on_reject, str) or not on_reject:
        c.add(f"{ap}.on_reject", "must be fail or a step id")
        on_reject = "fail"
    allow = a.get("allow_initiator", False)
    if not isinstance(allow, bool):
        c.add(f"{ap}.allow_initiator", "must be true or false")
        allow = False
    details = c.template(f"{ap}.details", a.get("details", "")) or compile_template("")
    return ApprovalStep(
        id=sid,
        next=nxt,
        users=users,
        groups=groups,
        quorum=quorum,
        reject_quorum=rq,
        timeout=timeout,
        on_timeout=on_timeout,
        on_reject=on_reject,
        allow_initiator=allow,
        details=details,
    )


def _check_graph(c: _Checker, steps: list[Step]) -> None:
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


def _non_json(
    value: Any, path: str, seen: frozenset[int] = frozenset(), depth: int = 0
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
        out = []
        for k, v in value.items():
            if not isinstance(k, str):
                out.append((f"{path}.{k}", "keys must be strings: quote it"))
            elif _non_json(k, path):
                out.append((path, "a key contains an invalid character (a lone UTF-16 surrogate)"))
            out += _non_json(v, f"{path}.{k}", inner, depth + 1)
        return out
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _non_json(v, f"{path}[{i}]", inner, depth + 1)]
    return [(path, f"{type(value).__name__} is not JSON: quote the value (YAML read {value!r})")]


def _step_outputs(raw_steps: Any) -> int:
    """How many step outputs a run's context can hold: one per activity step."""
    if not isinstance(raw_steps, list):
        return 1
    return max(1, sum(1 for s in raw_steps if isinstance(s, Mapping) and "activity" in s))


def parse_definition(document: Any, limits: Limits | None = None) -> Definition:
    """Validate a parsed YAML/JSON document and compile it; raise DefinitionError listing every problem."""
    lim = limits or Limits()
    if not isinstance(document, Mapping):
        raise DefinitionError([("$", "a definition must be a mapping with name and steps")])
    c = _Checker(replace(lim.expressions, step_outputs=_step_outputs(document.get("steps"))))
    not_json = _non_json(document, "$")
    if not_json:
        raise DefinitionError(not_json)
    c.keys("$", document, ("name", "description", "input_schema", "steps", "output", "four_eyes"))
    name = document.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        c.add("name", "required; lowercase letters, digits and -, e.g. order-fulfilment")
        name = ""
    schema = document.get("input_schema")
    if schema is not None:
        if not isinstance(schema, Mapping):
            c.add("input_schema", "must be a JSON Schema object")
            schema = None
        else:
            try:
                jsonschema.Draft202012Validator.check_schema(schema)
            except jsonschema.SchemaError as exc:
                c.add("input_schema", f"not a valid JSON Schema: {exc.message}")
                schema = None
    raw_steps = document.get("steps")
    steps: list[Step] = []
    if not isinstance(raw_steps, list) or not raw_steps:
        c.add("steps", "required: a non-empty list of steps")
    else:
        if len(raw_steps) > lim.max_steps:
            c.add("steps", f"{len(raw_steps)} steps exceed the tenant limit of {lim.max_steps}")
        for i, raw in enumerate(raw_steps):
            s = _parse_step(c, i, raw, lim)
            if s is not None:
                steps.append(s)
        seen: set[str] = set()
        for s in steps:
            if s.id in seen:
                c.add(f"steps({s.id}).id", "duplicate step id")
            seen.add(s.id)
        if s_ids := [s for s in steps if s.id == "end"]:
            c.add(f"steps({s_ids[0].id}).id", "`end` is reserved (next: end finishes the run)")
        _check_graph(c, steps)
    output = c.template("output", document["output"]) if "output" in document else None
    four_eyes = _four_eyes(c, document.get("four_eyes", []))
    desc = document.get("description", "")
    if not isinstance(desc, str):
        c.add("description", "must be a string")
        desc = ""
    if c.problems:
        raise DefinitionError(c.problems)
    doc = dict(document)
    return Definition(
        name=str(name),
        digest=digest(doc),
        document=doc,
        steps=tuple(steps),
        input_schema=dict(schema) if schema is not None else None,
        output=output,
        description=desc,
        index={s.id: i for i, s in enumerate(steps)},
        skip_roles=dict(c.skip_roles),
        four_eyes=four_eyes,
    )


FOUR_EYES_REPAIRS = ("skip", "migrate", "resolve")


def _four_eyes(c: _Checker, raw: Any) -> frozenset[str]:
    """`four_eyes: [skip, migrate, resolve]`: these repairs are proposals until a second operator confirms."""
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        c.add("four_eyes", f"must be a list of repairs, some of: {', '.join(FOUR_EYES_REPAIRS)}")
        return frozenset()
    for x in raw:
        if x not in FOUR_EYES_REPAIRS:
            hint = difflib.get_close_matches(x, FOUR_EYES_REPAIRS, n=1)
            c.add(
                "four_eyes",
                f"unknown repair {x!r}"
                + (f" (did you mean `{hint[0]}`?)" if hint else "")
                + f"; allowed: {', '.join(FOUR_EYES_REPAIRS)}",
            )
    if len(set(raw)) != len(raw):
        c.add("four_eyes", "lists a repair twice")
    return frozenset(x for x in raw if x in FOUR_EYES_REPAIRS)
