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
from ..limits import SERVER_LIMITS
from ..pointer import covers, format_pointer, overlaps, parse_pointer
from ..sensitive import NOT_SENSITIVE, Sensitivity

__all__ = [
    "COMPENSATION_RETRY",
    "DELIVERIES",
    "FOUR_EYES_REPAIRS",
    "STEP_KINDS",
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
]

DELIVERIES = ("idempotent", "at_most_once")
# Problems a DefinitionError's text lists (all of them stay in `.problems`).
SHOWN_PROBLEMS = 100
STEP_KINDS = ("activity", "choice", "wait", "fail", "succeed", "approval")
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
        }


Step = ActivityStep | ChoiceStep | WaitStep | FailStep | SucceedStep | ApprovalStep


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
    # What its runs hold that is sensitive (core/sensitive.py); `.any` is False when nothing is.
    sensitivity: Sensitivity = NOT_SENSITIVE
    # What publishing accepted but tells the author, as (path, reason): not part of the version.
    warnings: tuple[tuple[str, str], ...] = ()
    # For one decision only: why an approval step's approvers cannot decide in the tenant as it is now
    # (app/approvers.py), by step id; recorded in the ApprovalRequested the step makes. The app, which
    # reads the tenant's users, supplies it; a compiled definition has none.
    approver_warnings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def step(self, step_id: str) -> Step:
        return self.steps[self.index[step_id]]

    def following(self, step_id: str) -> str | None:
        """The step after step_id: its `next`, else the next in order, else None (the run completes)."""
        step = self.step(step_id)
        if step.next is not None:
            return None if step.next == "end" else step.next
        i = self.index[step_id] + 1
        return self.steps[i].id if i < len(self.steps) else None

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
