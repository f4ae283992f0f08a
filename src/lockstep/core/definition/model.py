"""The definition model: frozen records of a compiled definition (its steps, retry policies, the tenant
limits it was checked against), what every other part of the core reads while deciding.

A definition version is immutable and identified by the sha256 of its canonical JSON; the `Definition`
holds compiled expressions so the core never re-parses text while deciding. `parse.py` builds it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

import jsonschema

from ..canonical import JSONObject
from ..expr import Expr, ExprLimits, Template
from ..limits import SERVER_LIMITS, TENANT_LIMITS
from ..paths import step_id
from ..pointer import covers, format_pointer, overlaps, parse_pointer
from ..sensitive import NOT_SENSITIVE, Sensitivity
from .migration import MigrationApproval

__all__ = [
    "COMPENSATION_RETRY",
    "DELIVERIES",
    "FOUR_EYES_REPAIRS",
    "JOINS",
    "STEP_KINDS",
    "ActivityStep",
    "ApprovalStep",
    "Branch",
    "ChoiceStep",
    "Compensation",
    "Definition",
    "DefinitionError",
    "FailStep",
    "ForEachStep",
    "HttpStep",
    "Limits",
    "ParallelStep",
    "RetryPolicy",
    "RunStep",
    "Step",
    "SucceedStep",
    "WaitEventStep",
    "WaitStep",
]

DELIVERIES = ("idempotent", "at_most_once")
# Problems a DefinitionError's text lists (all of them stay in `.problems`).
SHOWN_PROBLEMS = 100
STEP_KINDS = (
    "activity",
    "choice",
    "wait",
    "fail",
    "succeed",
    "approval",
    "parallel",
    "for_each",
    "run",
    "wait_event",
    "http",
)
# How a parallel or for-each step ends: every lane, the first success, or K successes.
JOINS = ("all", "any", "n_of")
# The repairs a definition may put behind a second operator's confirmation (`four_eyes:`).
FOUR_EYES_REPAIRS = ("skip", "migrate", "resolve")


@dataclass(frozen=True)
class Limits:
    """Per-tenant static limits applied when a definition is published."""

    max_steps: int = 20
    max_wait: timedelta = timedelta(days=365)
    max_timeout: timedelta = timedelta(days=7)
    max_attempts: int = 100
    # Size, nesting and worst-case cost of every expression, against the tenant's data bounds.
    expressions: ExprLimits = field(default_factory=ExprLimits)
    # Sensitive places a definition declares (sensitive_input, output_sensitive, x-lockstep-sensitive).
    max_sensitive_pointers: int = SERVER_LIMITS["max_sensitive_pointers"].default
    max_pointer_length: int = SERVER_LIMITS["max_pointer_length"].default
    # The checks added after versions were first stored (references, condition types: references.py)
    # run when a definition is published; a stored version is loaded without them, so none that was
    # accepted once becomes unrunnable.
    publish_checks: bool = True
    # The shapes of a definition (parallel and for-each steps): nesting, items, worst-case size and
    # concurrency, each counted over the whole shape at publish time (definition/shapes.py).
    max_branch_depth: int = TENANT_LIMITS["max_branch_depth"].default
    max_items: int = TENANT_LIMITS["max_items"].default
    max_expanded_steps: int = TENANT_LIMITS["max_expanded_steps"].default
    max_active_attempts: int = TENANT_LIMITS["max_active_attempts"].default


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
    # Declared sensitive places of the activity's output (JSON pointers; "" is all of it).
    output_sensitive: tuple[str, ...] = ()
    kind: str = "activity"


@dataclass(frozen=True)
class HttpStep(ActivityStep):
    """An HTTP request made by lockstep's own workers: an activity step of the built-in activity
    `lockstep.http` whose input is the rendered request (definition/parse_http.py), so attempts,
    leases, fencing and retries are an activity's. `url` is kept for the publish-time policy warning."""

    url: Template | None = None
    kind: str = "http"


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
    # The fields approvers fill in (core/form.py), compiled; recorded in the policy only when declared,
    # so the policy (and digest) of a step without a form is what it always was.
    form: tuple[JSONObject, ...] = ()

    def policy(self) -> JSONObject:
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
        } | ({"form": [dict(f) for f in self.form]} if self.form else {})


@dataclass(frozen=True)
class Branch:
    """One branch of a parallel step: its own list of steps. `on_failure: continue` lets the parallel
    step go on (and succeed) when this branch fails; otherwise its failure fails the step."""

    id: str
    steps: tuple[Step, ...]
    on_failure: str = "fail"  # "fail" | "continue"


@dataclass(frozen=True)
class ParallelStep:
    """Run every branch at once; `join` says when the step is done: `all` branches, `any` (the first
    success; the others are cancelled) or `n_of` `need` successes. Its output maps branch ids to the
    branches' outputs."""

    id: str
    next: str | None
    branches: tuple[Branch, ...]
    join: str  # one of JOINS
    need: int  # successes that complete the step (all: every branch)
    kind: str = "parallel"


@dataclass(frozen=True)
class ForEachStep:
    """Run `body` once per element of the list `items` renders, at most `concurrency` at a time, with
    `item` and `index` in scope; `join` and `on_failure` as for a parallel step (`need` None: every
    item). More than `max_items` elements fail the step with the reason. Its output is the list of the
    body's outputs, in item order."""

    id: str
    next: str | None
    items: Template
    body: tuple[Step, ...]
    concurrency: int
    join: str
    need: int | None
    on_failure: str
    max_items: int
    kind: str = "for_each"


@dataclass(frozen=True)
class RunStep:
    """Start a child run of another definition of the same tenant (`version` None: the latest when the
    step starts), wait for it without holding anything, and take its output as this step's."""

    id: str
    next: str | None
    definition: str
    version: int | None
    input: Template
    # Declared sensitive places of the child's output, as the parent records it (JSON pointers).
    output_sensitive: tuple[str, ...] = ()
    kind: str = "run"


@dataclass(frozen=True)
class WaitEventStep:
    """Wait, holding nothing, for an external event `name` whose correlation key is the rendered `key`
    (core/waitevent.py); its payload (valid against `schema`, if given) is the step's output."""

    id: str
    next: str | None
    name: str
    key: Template
    timeout: timedelta
    on_timeout: str  # "fail" | <step id>
    schema: JSONObject | None = None
    callback: bool = False
    # The tenant integration whose Standard Webhooks secret signs the callback's body (None: unsigned).
    integration: str | None = None
    kind: str = "wait_event"


Step = (
    ActivityStep
    | ChoiceStep
    | WaitStep
    | FailStep
    | SucceedStep
    | ApprovalStep
    | ParallelStep
    | ForEachStep
    | RunStep
    | WaitEventStep
)
# A nested step's place: the list it is in (a branch's, a body's) and its position there.
Place = tuple[tuple[Step, ...], int]


@dataclass(frozen=True)
class Definition:
    name: str
    digest: str
    document: JSONObject
    steps: tuple[Step, ...]
    input_schema: JSONObject | None
    output: Template | None
    description: str = ""
    index: dict[str, int] = field(default_factory=dict)
    # Steps an operator may skip, and which roles may do it (`skippable: true` means operator and admin).
    skip_roles: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Repairs that need a second operator's confirmation on runs of this definition (`four_eyes:`).
    four_eyes: frozenset[str] = frozenset()
    # Who must approve a migration of a run to this version (`migration: requires_approval`; None: nobody).
    migration_approval: MigrationApproval | None = None
    # What its runs hold that is sensitive (core/sensitive.py); `.any` is False when nothing is.
    sensitivity: Sensitivity = NOT_SENSITIVE
    # What publishing accepted but tells the author, as (path, reason): not part of the version.
    warnings: tuple[tuple[str, str], ...] = ()
    # For one decision only: why an approval step's approvers cannot decide in the tenant as it is now
    # (app/approvers.py), by step id; recorded in the ApprovalRequested the step makes. The app, which
    # reads the tenant's users, supplies it; a compiled definition has none.
    approver_warnings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Steps inside parallel and for-each steps, by id (ids are unique across the whole definition).
    nested: dict[str, Place] = field(default_factory=dict)

    def step(self, key: str) -> Step:
        """The step of an id or of a step key (`review.legal.check`: see core/paths.py)."""
        i = self.index.get(key)
        if i is not None:
            return self.steps[i]
        sid = step_id(key)
        i = self.index.get(sid)
        if i is not None:
            return self.steps[i]
        steps, at = self.nested[sid]
        return steps[at]

    def has_step(self, key: str) -> bool:
        sid = step_id(key)
        return sid in self.index or sid in self.nested

    def following(self, key: str) -> str | None:
        """The id of the step after `key` in its own list (the run's, a branch's, a body's): its `next`,
        else the next in order, else None (the run, the branch or the item completes)."""
        step = self.step(key)
        if step.next is not None:
            return None if step.next == "end" else step.next
        sid = step.id
        if sid in self.index:
            steps, at = self.steps, self.index[sid]
        else:
            steps, at = self.nested[sid]
        return steps[at + 1].id if at + 1 < len(steps) else None

    def first(self, key: str, branch: str | None = None) -> str:
        """The id of the first step of a parallel step's branch, or of a for-each step's body."""
        step = self.step(key)
        if isinstance(step, ParallelStep):
            return next(b for b in step.branches if b.id == branch).steps[0].id
        if isinstance(step, ForEachStep):
            return step.body[0].id
        raise KeyError(f"step {key} has no branches")

    def check_input(self, value: object, also_sensitive: tuple[str, ...] = ()) -> None:
        """Raise DefinitionError if value fails the input schema. A problem at a sensitive place (of this
        version, or `also_sensitive`: those of the version a run migrates from) names the place and the
        rule, never the value (jsonschema's own messages quote it)."""
        if self.input_schema is None:
            return
        validator = jsonschema.Draft202012Validator(self.input_schema)
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        if errors:
            sensitive = self.sensitivity.input + also_sensitive
            raise DefinitionError(
                [_problem(e, sensitive) for e in errors[:5]],
                title=f"input does not match the input_schema of {self.name}",
            )


class DefinitionError(ValueError):
    """Static errors: a list of (path, reason); str() gives `path: reason` for each problem, on one
    line, or, when a reason has lines of its own (an expression with a caret under an error), one
    problem per line with its further lines indented below it."""

    def __init__(self, problems: list[tuple[str, str]], title: str = "invalid definition") -> None:
        self.problems = problems
        self.title = title
        super().__init__(self.__str__())

    def __str__(self) -> str:
        shown = self.problems[:SHOWN_PROBLEMS]  # a 1 MiB document can have tens of thousands
        more = len(self.problems) - len(shown)
        tail = f" (and {more} more problem{'s' if more != 1 else ''} like these)" if more else ""
        if not any("\n" in r for _, r in shown):
            lines = "; ".join(f"{p}: {r}" for p, r in shown)
            return f"{self.title}: {lines}{tail}"
        if len(shown) == 1 and not more:
            p, r = shown[0]
            return f"{self.title}: {p}: {r}"
        return (
            f"{self.title}:"
            + "".join("\n  " + f"{p}: {r}".replace("\n", "\n  ") for p, r in shown)
            + (f"\n {tail}" if tail else "")
        )


def _problem(e: jsonschema.ValidationError, sensitive: tuple[str, ...]) -> tuple[str, str]:
    """(path, reason) of one schema violation, redacted where the value is sensitive."""
    parts = list(e.absolute_path)
    at = format_pointer(parts)
    hits = [p for p in sensitive if overlaps(p, at)]
    if not hits:
        return _json_path("input", parts), e.message
    outer = [p for p in hits if covers(p, at)]
    shown = _json_path("input", parts)
    if outer:  # inside a sensitive value even the member names are its own: stop the path at its top
        top = parse_pointer(min(outer, key=len))
        shown = _json_path("input", top) + (" (inside)" if len(top) < len(parts) else "")
    if e.validator == "required":  # names a property of the schema, never a value
        return shown, e.message
    rule = repr(e.validator_value)
    short = len(rule) <= 80 and not isinstance(e.validator_value, dict)
    what = f"`{e.validator}: {rule}`" if short else f"`{e.validator}`"
    return shown, f"a sensitive value (not shown) fails the schema's {what}"


def _json_path(root: str, parts: Iterable[str | int]) -> str:
    out = root
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out
