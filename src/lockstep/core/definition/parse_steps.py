"""From one entry of a document's `steps` to its step record: one parser per kind of step, each
reporting every problem (with its path and a fix) to the `Checker` and going on with a default."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from datetime import timedelta

from ..canonical import JSONObject
from ..expr import Expr, compile_template
from ..form import parse_form
from .checks import ACTIVITY_RE, STEP_ID_RE, Checker
from .model import (
    COMPENSATION_RETRY,
    DELIVERIES,
    STEP_KINDS,
    ActivityStep,
    ApprovalStep,
    ChoiceStep,
    Compensation,
    FailStep,
    Limits,
    RetryPolicy,
    Step,
    SucceedStep,
    WaitStep,
)
from .parse_migration import parse_approvers
from .sensitivity import pointer_list

__all__ = ["STEP_KEYS", "parse_priority", "parse_queue", "parse_retry", "parse_step"]

# The keys each kind of step may have (besides skippable and skip_policy, which every kind may have).
STEP_KEYS: dict[str, tuple[str, ...]] = {
    "activity": (
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
        "output_sensitive",
    ),
    "choice": ("id", "choice", "description"),
    "wait": ("id", "wait", "next", "description"),
    "fail": ("id", "fail", "description"),
    "succeed": ("id", "succeed", "description"),
    "approval": ("id", "approval", "next", "description"),
}
_ANY_STEP_KEYS = tuple(dict.fromkeys([*STEP_KINDS, *(k for ks in STEP_KEYS.values() for k in ks)]))


def parse_step(
    c: Checker, i: int, raw: object, lim: Limits, at: str = "steps"
) -> tuple[Step | None, tuple[str, ...] | None]:
    """The step at steps[i] (`at`: the path of the list it is in), or None when it is too broken to
    build, and the roles that may skip it. Parallel and for-each steps are parsed in shapes.py."""
    p = f"{at}[{i}]"
    if not isinstance(raw, Mapping):
        c.add(p, "must be a mapping with an id and one of: " + ", ".join(STEP_KINDS))
        return None, None
    raw_id = raw.get("id")
    if isinstance(raw_id, str) and STEP_ID_RE.match(raw_id):
        sid = raw_id
    else:
        c.add(f"{p}.id", "required; lowercase letters, digits, - and _ (at most 64)")
        sid = f"#{i}"
    p = f"{at}[{i}]({sid})"
    kinds = [k for k in STEP_KINDS if k in raw]
    if not kinds:
        # A misspelt kind (`activty:`) is the likely cause: name the key and the kind it resembles.
        unknown = c.keys(p, raw, (*_ANY_STEP_KEYS, "skippable", "skip_policy"))
        if not any(difflib.get_close_matches(k, STEP_KINDS, n=1) for k in unknown):
            c.add(p, f"a step needs exactly one of {', '.join(STEP_KINDS)} (found none)")
        return None, None
    if len(kinds) != 1:
        c.add(p, f"a step needs exactly one of {', '.join(STEP_KINDS)} (found {', '.join(kinds)})")
        return None, None
    nxt = raw.get("next")
    if nxt is not None and not isinstance(nxt, str):
        c.add(f"{p}.next", "must be a step id or `end`")
        nxt = None
    skip = _skip_roles(c, p, raw)
    raw = {k: v for k, v in raw.items() if k not in ("skippable", "skip_policy")}
    kind = kinds[0]
    if kind == "activity":
        return _parse_activity(c, p, raw, sid, nxt, lim), skip
    if kind == "choice":
        return _parse_choice(c, p, raw, sid), skip
    if kind == "wait":
        return _parse_wait(c, p, raw, sid, nxt, lim), skip
    if kind == "fail":
        return _parse_fail(c, p, raw, sid), skip
    if kind == "succeed":
        return _parse_succeed(c, p, raw, sid), skip
    if kind == "approval":
        return _parse_approval(c, p, raw, sid, nxt, lim), skip
    c.add(p, f"a {kind} step cannot be parsed here")  # pragma: no cover - shapes.parse_any does
    return None, None


def _skip_roles(c: Checker, p: str, raw: Mapping[str, object]) -> tuple[str, ...] | None:
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


def _parse_activity(
    c: Checker, p: str, raw: Mapping[str, object], sid: str, nxt: str | None, lim: Limits
) -> Step:
    c.keys(p, raw, STEP_KEYS["activity"])
    activity = _activity_name(c, f"{p}.activity", raw.get("activity"))
    if activity.startswith("lockstep.") and lim.publish_checks:
        # Built-in activities (lockstep.http) take their input from their own kind of step, whose
        # parser checks it; an activity step naming one would bypass those checks.
        c.add(f"{p}.activity", f"{activity}: names starting with lockstep. are reserved for built-in steps")
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
        output_sensitive=pointer_list(c, f"{p}.output_sensitive", raw.get("output_sensitive", False), lim),
    )


def _retry(c: Checker, path: str, raw: object, default: RetryPolicy, limits: Limits) -> RetryPolicy:
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


def _activity_name(c: Checker, path: str, value: object) -> str:
    if not isinstance(value, str) or not ACTIVITY_RE.match(value):
        c.add(path, "must be an activity type name such as inventory.reserve")
        return ""
    return value


def _queue(c: Checker, path: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not STEP_ID_RE.match(value):
        c.add(path, "must be a queue name matching [a-z0-9_-]+")
        return None
    return value


def _priority(c: Checker, path: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -100 <= value <= 100:
        c.add(path, "must be an integer from -100 to 100 (higher is claimed first)")
        return 0
    return value


def _parse_choice(c: Checker, p: str, raw: Mapping[str, object], sid: str) -> Step:
    c.keys(p, raw, STEP_KEYS["choice"])
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
            unknown = c.keys(bp, br, ("if", "next", "else"))
            if "if" not in br or "next" not in br:
                if not unknown:
                    c.add(bp, "a branch needs both `if` (an expression) and `next` (a step id)")
                continue
            e = c.expr(f"{bp}.if", br["if"])
            if e is not None:
                branches.append((e, str(br["next"])))
    if len(branches) > 1:
        c.budget(f"{p}.choice", sum(e.cost for e, _ in branches), "the conditions of this choice together")
    return ChoiceStep(id=sid, branches=tuple(branches), default=default)


def _parse_wait(
    c: Checker, p: str, raw: Mapping[str, object], sid: str, nxt: str | None, lim: Limits
) -> Step:
    c.keys(p, raw, STEP_KEYS["wait"])
    w = raw["wait"]
    if isinstance(w, Mapping):
        unknown = c.keys(f"{p}.wait", w, ("until", "for"))
        if "until" in w:
            return WaitStep(id=sid, next=nxt, duration=None, until=c.template(f"{p}.wait.until", w["until"]))
        if "for" in w:
            return WaitStep(
                id=sid, next=nxt, duration=c.duration(f"{p}.wait.for", w["for"], lim.max_wait), until=None
            )
        if not unknown:
            c.add(f"{p}.wait", 'give a duration (wait: 2s) or {until: "${input.deadline}"}')
        return WaitStep(id=sid, next=nxt, duration=timedelta(seconds=1), until=None)
    return WaitStep(id=sid, next=nxt, duration=c.duration(f"{p}.wait", w, lim.max_wait), until=None)


def _parse_fail(c: Checker, p: str, raw: Mapping[str, object], sid: str) -> Step:
    c.keys(p, raw, STEP_KEYS["fail"])
    f = raw["fail"]
    if not isinstance(f, Mapping) or not isinstance(f.get("error"), str):
        c.add(f"{p}.fail", "must be {error: CODE, message: TEXT}")
        return FailStep(id=sid, error="Failed", message=compile_template(""))
    c.keys(f"{p}.fail", f, ("error", "message"))
    msg = c.template(f"{p}.fail.message", f.get("message", "")) or compile_template("")
    return FailStep(id=sid, error=f["error"], message=msg)


def _parse_succeed(c: Checker, p: str, raw: Mapping[str, object], sid: str) -> Step:
    c.keys(p, raw, STEP_KEYS["succeed"])
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


def _parse_approval(
    c: Checker, p: str, raw: Mapping[str, object], sid: str, nxt: str | None, lim: Limits
) -> Step | None:
    c.keys(p, raw, STEP_KEYS["approval"])
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
            "form",
        ),
    )
    form: list[JSONObject] = []
    if "form" in a:
        form, problems = parse_form(a["form"], f"{ap}.form")
        for where, why in problems:
            c.add(where, why)
    users, groups, quorum, rq = parse_approvers(c, ap, a)
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
        form=tuple(form),
    )


# What the parsers of other kinds of step share with the activity step's (parse_http.py).
parse_retry = _retry
parse_queue = _queue
parse_priority = _priority
