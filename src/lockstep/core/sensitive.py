"""Which values of a run are sensitive: the compiled classification of a definition (`Sensitivity`, on
`Definition.sensitivity`) and, for one event, the JSON pointers into its data that hold sensitive values
(`sensitive_pointers`). The JSON-pointer helpers it works with are re-exported from `pointer`.

A definition declares sensitive run input (`x-lockstep-sensitive: true` in `input_schema`, or
`sensitive_input: [pointers]`) and activity outputs (`output_sensitive: true` or pointers); publishing
derives the rest by taint analysis of its templates (definition/sensitivity.py): the activity and
compensation inputs, approval details and run output that read a sensitive value, and the failure
messages of steps whose expressions or activities see one. Events do not change: the pointers are
computed from an event's data and the definition it was decided under, so the classification of a
stored event never depends on a later version (a run migrated to a version that classifies differently
keeps its history as it was written; its later events follow the new version: `batch_pointers`).

Every pointer returned names a place that holds a value in the event's data as stored
(`Event.to_json()["data"]`), none is inside another, and a null is never listed (it holds nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .canonical import JSONValue
from .events import (
    ActivityFailed,
    ActivityScheduled,
    ActivitySucceeded,
    ActivityTimedOut,
    ApprovalDecisionRecorded,
    ApprovalRequested,
    ApproverReplaced,
    ChildRunEnded,
    ChildRunRequested,
    CompensationScheduled,
    CompensationStarted,
    EventData,
    EventReceived,
    ForEachStarted,
    InputEdited,
    JoinDecided,
    LaneFinished,
    NeedsAttention,
    RepairProposed,
    ResultIgnored,
    RunCompleted,
    RunFailed,
    RunResumed,
    RunStarted,
    StepFailed,
    StepJoined,
    StepResolved,
    StepRetried,
    StepSkipped,
    TransitionDeferred,
    WorkflowMigrated,
)
from .pointer import (
    PointerError,
    covers,
    escape,
    exists_at,
    format_pointer,
    get_at,
    join,
    minimal,
    overlaps,
    parse_pointer,
    replace_at,
    replace_many,
)

__all__ = [
    "CLASSIFIED",
    "CLEAR",
    "CLEAR_STEP",
    "NOT_SENSITIVE",
    "HasSensitivity",
    "PointerError",
    "Sensitivity",
    "StepSensitivity",
    "batch_pointers",
    "covers",
    "escape",
    "exists_at",
    "format_pointer",
    "get_at",
    "join",
    "minimal",
    "overlaps",
    "parse_pointer",
    "replace_at",
    "replace_many",
    "sensitive_pointers",
]

Pointers = tuple[str, ...]


@dataclass(frozen=True)
class StepSensitivity:
    """What one step's events hold that is sensitive. Pointers are relative to the value they name
    (`""`: all of it)."""

    input: Pointers = ()  # the activity's resolved input (ActivityScheduled.input)
    output: Pointers = ()  # its output, as declared (ActivitySucceeded, skips, resolutions)
    compensation_input: Pointers = ()  # CompensationScheduled.input
    compensation_output: bool = False  # the compensation's own result, all of it
    items: Pointers = ()  # a for-each's list (ForEachStarted.items)
    details: bool = False  # ApprovalRequested.details (one string: all or nothing)
    values: Pointers = ()  # the approval form's sensitive fields (ApprovalDecisionRecorded.values)
    # Failure messages and attention reasons of the step: the activity may echo its input, and an
    # expression's error may quote the value it failed on.
    messages: bool = False


CLEAR_STEP = StepSensitivity()


@dataclass(frozen=True)
class Sensitivity:
    """The classification of one definition version, computed when it is parsed (`Definition.sensitivity`).

    `any` is False for a definition that declares nothing sensitive: then nothing of its runs is, and
    every question below is answered without looking further."""

    input: Pointers = ()  # the run's input (RunStarted.input, InputEdited.old/new)
    output: Pointers = ()  # the run's output (RunCompleted.output)
    steps: Mapping[str, StepSensitivity] = field(default_factory=dict)  # only steps with something
    run_messages: bool = False  # failure messages of no step (the run output's template failed)
    step_ids: frozenset[str] = frozenset()  # every step of the definition
    any: bool = False

    @staticmethod
    def build(
        input: Pointers,
        output: Pointers,
        steps: Mapping[str, StepSensitivity],
        run_messages: bool,
        step_ids: frozenset[str],
    ) -> Sensitivity:
        kept = {k: v for k, v in steps.items() if v != CLEAR_STEP}
        if not (input or output or kept or run_messages):
            return NOT_SENSITIVE
        return Sensitivity(input, output, kept, run_messages, step_ids, True)

    def step(self, step_id: str) -> StepSensitivity:
        """Of a step id, or of a step key (a nested step's lanes and id: core/paths.py)."""
        return self.steps.get(step_id) or self.steps.get(_id_of(step_id), CLEAR_STEP)

    def messages(self, step_id: object) -> bool:
        """Whether failure messages of `step_id` are sensitive: None is the run's own (its output
        template); an id this version does not have (or none at all) could be any step's."""
        if step_id is None:
            return self.run_messages
        if isinstance(step_id, str) and _id_of(step_id) in self.step_ids:
            return self.step(step_id).messages
        return self.run_messages or any(s.messages for s in self.steps.values())

    def outputs(self, step_id: str, compensation: bool = False) -> Pointers:
        """The sensitive pointers of an output reported for `step_id` (an action's, or a compensation's);
        for an id this version does not have, those of any step."""
        if _id_of(step_id) in self.step_ids:
            st = self.step(step_id)
            if compensation:
                return ("",) if st.compensation_output else ()
            return st.output
        every = [p for s in self.steps.values() for p in s.output]
        if any(s.compensation_output for s in self.steps.values()):
            every.append("")
        return minimal(every)


NOT_SENSITIVE = Sensitivity()


def _id_of(key: str) -> str:
    """The step id of a step key (core/paths.py: the part after the last dot)."""
    return key[key.rfind(".") + 1 :]


class HasSensitivity(Protocol):
    """What `sensitive_pointers` needs of a definition (a `Definition` is one)."""

    @property
    def sensitivity(self) -> Sensitivity: ...


def sensitive_pointers(data: EventData, definition: HasSensitivity) -> tuple[str, ...]:
    """The pointers into one event's data that hold sensitive values, under the definition the event was
    decided with (nothing, at once, for a definition that declares nothing sensitive)."""
    s = definition.sensitivity
    if not s.any:
        return ()
    handler = _HANDLERS.get(type(data))
    return tuple(handler(data, s)) if handler is not None else ()


def batch_pointers(
    batch: Iterable[EventData], definition: HasSensitivity, target: HasSensitivity | None = None
) -> list[tuple[str, ...]]:
    """`sensitive_pointers` of each event of one decision, in order. A migration decides the events
    after its WorkflowMigrated under the version it migrates to (`target`), the others under the one
    the run was on."""
    out: list[tuple[str, ...]] = []
    current = definition
    for data in batch:
        out.append(sensitive_pointers(data, current))
        if target is not None and type(data) is WorkflowMigrated:
            current = target
    return out


# --- one handler per kind of event that holds tenant data --------------------------------------------

_UNKNOWN = "?"  # no step id: a step of this version can never be called that


def _under(base: str, value: JSONValue, pointers: Pointers) -> list[str]:
    """`pointers` (relative to `value`, which the event holds at `base`) that name a value there."""
    out = []
    for p in pointers:
        try:
            if get_at(value, p) is not None:
                out.append(base + p)
        except KeyError:
            continue
    return out


def _error(base: str, error: object, s: Sensitivity, step: object) -> list[str]:
    """An error document ({code, message, step, ...}): its message, when that step's messages are
    sensitive (the document's own `step` wins; codes stay clear)."""
    if not isinstance(error, Mapping) or error.get("message") is None:
        return []
    return [f"{base}/message"] if s.messages(error.get("step", step)) else []


def _transitions(base: str, items: object, s: Sensitivity) -> list[str]:
    """Deferred transitions ({action, args}): a deferred `fail` holds its error."""
    if not isinstance(items, list):
        return []
    out: list[str] = []
    for i, t in enumerate(items):
        if isinstance(t, Mapping) and t.get("action") == "fail" and isinstance(t.get("args"), Mapping):
            out += _error(f"{base}/{i}/args/error", t["args"].get("error"), s, _UNKNOWN)
    return out


def _run_started(d: RunStarted, s: Sensitivity) -> list[str]:
    return _under("/input", d.input, s.input)


def _input_edited(d: InputEdited, s: Sensitivity) -> list[str]:
    return _under("/old", d.old, s.input) + _under("/new", d.new, s.input)


def _scheduled(d: ActivityScheduled, s: Sensitivity) -> list[str]:
    return _under("/input", d.input, s.step(d.step).input)


def _compensation_scheduled(d: CompensationScheduled, s: Sensitivity) -> list[str]:
    return _under("/input", d.input, s.step(d.step).compensation_input)


def _succeeded(d: ActivitySucceeded, s: Sensitivity) -> list[str]:
    return _under("/output", d.output, s.outputs(d.step, d.compensation))


def _failed(d: ActivityFailed, s: Sensitivity) -> list[str]:
    return _error("/error", d.error, s, d.step)


def _ignored(d: ResultIgnored, s: Sensitivity) -> list[str]:
    """A stale report: what the worker said, output or message, as sensitive as a live one."""
    compensation = d.task_id.rsplit("/", 1)[-1].startswith("c")
    out = _under("/result/output", d.result.get("output"), s.outputs(d.step, compensation))
    if d.result.get("message") is not None and s.messages(d.step):
        out.append("/result/message")
    return out


def _step_failed(d: StepFailed, s: Sensitivity) -> list[str]:
    return _error("/error", d.error, s, d.step)


def _compensation_started(d: CompensationStarted, s: Sensitivity) -> list[str]:
    return _error("/error", d.error, s, _UNKNOWN)


def _run_failed(d: RunFailed, s: Sensitivity) -> list[str]:
    return _error("/error", d.error, s, _UNKNOWN)


def _attention(d: NeedsAttention, s: Sensitivity) -> list[str]:
    # The reason quotes the activity's error message (or an expression's error); its code stays clear.
    return ["/reason"] if s.messages(d.step) else []


def _completed(d: RunCompleted, s: Sensitivity) -> list[str]:
    return _under("/output", d.output, s.output)


def _approval(d: ApprovalRequested, s: Sensitivity) -> list[str]:
    return ["/details"] if s.step(d.step).details else []


def _skipped(d: StepSkipped, s: Sensitivity) -> list[str]:
    out = s.outputs(d.step)
    before = d.before.get("output") if isinstance(d.before, Mapping) else None
    return (
        _under("/output", d.output, out)
        + _under("/before/output", before, out)
        + _transitions("/superseded", d.superseded, s)
    )


def _resolved(d: StepResolved, s: Sensitivity) -> list[str]:
    out = _under("/output", d.output, s.outputs(d.step, d.compensation))
    return out + _transitions("/superseded", d.superseded, s)


def _retried(d: StepRetried, s: Sensitivity) -> list[str]:
    return _transitions("/superseded", d.superseded, s)


def _resumed(d: RunResumed, s: Sensitivity) -> list[str]:
    return _transitions("/deferred", d.deferred, s)


def _deferred(d: TransitionDeferred, s: Sensitivity) -> list[str]:
    return _error("/args/error", d.args.get("error"), s, _UNKNOWN) if d.action == "fail" else []


def _migrated(d: WorkflowMigrated, s: Sensitivity) -> list[str]:
    # Decided under the version the run leaves: the transitions it supersedes were computed there.
    return _transitions("/superseded", d.superseded, s)


def _proposed(d: RepairProposed, s: Sensitivity) -> list[str]:
    """A four-eyes skip or resolve records the operator's output for the step until it is confirmed."""
    cmd = d.command
    if d.kind not in ("skip", "resolve") or not isinstance(cmd.get("step"), str):
        return []
    return _under("/command/output", cmd.get("output"), s.outputs(cmd["step"]))


def _for_each(d: ForEachStarted, s: Sensitivity) -> list[str]:
    return _under("/items", d.items, s.step(d.step).items)


def _lane_finished(d: LaneFinished, s: Sensitivity) -> list[str]:
    """A branch's or an item's output is one of its steps' outputs; its error, one of their errors."""
    return _under("/output", d.output, s.step(d.step).output) + _error("/error", d.error, s, d.step)


def _join_decided(d: JoinDecided, s: Sensitivity) -> list[str]:
    return _error("/error", d.error, s, d.step)


def _joined(d: StepJoined, s: Sensitivity) -> list[str]:
    return _under("/output", d.output, s.step(d.step).output)


def _child_requested(d: ChildRunRequested, s: Sensitivity) -> list[str]:
    return _under("/input", d.input, s.step(d.step).input)


def _child_ended(d: ChildRunEnded, s: Sensitivity) -> list[str]:
    """The child's output as the `run` step declares it (output_sensitive); its error's message."""
    return _under("/output", d.output, s.outputs(d.step)) + _error("/error", d.error, s, d.step)


def _decision(d: ApprovalDecisionRecorded, s: Sensitivity) -> list[str]:
    """The form values an approver gave in the fields declared `sensitive: true`."""
    if not isinstance(d.values, dict):
        return []
    return _under("/values", d.values, s.step(d.step).values)


def _nothing(d: EventData, s: Sensitivity) -> list[str]:
    """Reviewed: the fields named like data hold none of the tenant's (ActivityTimedOut's error is the
    engine's own text about the lease; ApproverReplaced.new is a user name; an approver's comment is
    what a person typed, which no definition can classify)."""
    return []


_HANDLERS: dict[type[Any], Callable[[Any, Sensitivity], list[str]]] = {
    RunStarted: _run_started,
    InputEdited: _input_edited,
    ActivityScheduled: _scheduled,
    CompensationScheduled: _compensation_scheduled,
    ActivitySucceeded: _succeeded,
    ActivityFailed: _failed,
    ActivityTimedOut: _nothing,
    ResultIgnored: _ignored,
    StepFailed: _step_failed,
    CompensationStarted: _compensation_started,
    RunFailed: _run_failed,
    NeedsAttention: _attention,
    RunCompleted: _completed,
    ApprovalRequested: _approval,
    StepSkipped: _skipped,
    StepResolved: _resolved,
    StepRetried: _retried,
    RunResumed: _resumed,
    TransitionDeferred: _deferred,
    WorkflowMigrated: _migrated,
    RepairProposed: _proposed,
    ApprovalDecisionRecorded: _decision,
    ApproverReplaced: _nothing,
    ForEachStarted: _for_each,
    LaneFinished: _lane_finished,
    JoinDecided: _join_decided,
    StepJoined: _joined,
    ChildRunRequested: _child_requested,
    ChildRunEnded: _child_ended,
    # An external event's payload: what a partner sent, which no definition classifies (yet): stored
    # as received, like an approver's comment.
    EventReceived: _nothing,
}

# The event types whose data may hold tenant values, each with its handler above; CLEAR: the types
# reviewed to hold none (ids, step names, times, policies, people, codes, the engine's own reasons).
# tests/core/test_sensitive_events.py fails when an event type is in neither, or when a type in CLEAR
# has a field named like data (input, output, error, message, details, ...).
CLASSIFIED = frozenset(cls.type for cls in _HANDLERS)
CLEAR = frozenset(
    {
        "ActivityStarted",
        "ActivityCancelled",
        "ActivityDeadLettered",  # its reason is the engine's (a task no worker took)
        "ChoiceEvaluated",  # the condition's source text, not its values
        "TimerScheduled",
        "TimerFired",
        "TimerCancelled",
        "CancelRequested",
        "RunCancelled",
        "ApprovalLinkIssued",
        "ApprovalGranted",
        "ApprovalRejected",
        "ApprovalTimedOut",
        "ApprovalCancelled",
        "ApprovalLinkRevoked",
        "RunPaused",
        "RepairConfirmed",
        "RepairRejected",
        "ParallelStarted",  # lane ids and the join rule
        "LaneStarted",
        "ChildRunCancelRequested",  # the parent's cancel reason (CancelRequested's, also clear)
        "EventWaitStarted",  # the event's name, its correlation key (refused if sensitive), the expiry
        "CallbackIssued",  # the sha256 of the token, never the token
        "EventWaitTimedOut",
        "EventWaitCancelled",
    }
)
