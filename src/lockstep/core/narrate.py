"""One human sentence per event, for `lockstep events`, the demo and (later) the run page timeline."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import assert_never

from .canonical import JSONValue
from .events import (
    ActivityCancelled,
    ActivityDeadLettered,
    ActivityFailed,
    ActivityScheduled,
    ActivityStarted,
    ActivitySucceeded,
    ActivityTimedOut,
    ApprovalCancelled,
    ApprovalDecisionRecorded,
    ApprovalGranted,
    ApprovalLinkIssued,
    ApprovalLinkRevoked,
    ApprovalRejected,
    ApprovalRequested,
    ApprovalTimedOut,
    ApproverReplaced,
    CallbackIssued,
    CancelRequested,
    ChildRunCancelRequested,
    ChildRunEnded,
    ChildRunRequested,
    ChoiceEvaluated,
    CompensationScheduled,
    CompensationStarted,
    EventData,
    EventReceived,
    EventWaitCancelled,
    EventWaitEvent,
    EventWaitRecord,
    EventWaitStarted,
    EventWaitTimedOut,
    ForEachStarted,
    InputEdited,
    JoinDecided,
    LaneFinished,
    LaneStarted,
    NeedsAttention,
    ParallelStarted,
    RepairConfirmed,
    RepairProposed,
    RepairRejected,
    ResultIgnored,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunPaused,
    RunResumed,
    RunStarted,
    StepFailed,
    StepJoined,
    StepResolved,
    StepRetried,
    StepSkipped,
    TimerCancelled,
    TimerFired,
    TimerScheduled,
    TransitionDeferred,
    WorkflowMigrated,
    data_of,
)
from .sealed import REDACTED, text_of
from .timeutil import format_duration, parse_iso

__all__ = ["narrate", "sentence"]


def narrate(type_: str, data: Mapping[str, JSONValue], at: str | None = None) -> str:
    """The sentence for an event as a view shows it (its type and its data as JSON)."""
    try:
        record = data_of(type_, data)
    except ValueError:  # a type this build does not know
        return type_
    return sentence(record, at)


def _err(e: Mapping[str, JSONValue] | None) -> str:
    if e and REDACTED in e:  # the whole error was sealed
        return text_of(e)
    return f"{e.get('code')}: {text_of(e.get('message'))}" if e else "unknown error"


def _by(actor: str | None) -> str:
    return actor or "an operator"


def sentence(d: EventData, at: str | None = None) -> str:
    """One sentence for one event; `at` (when it was recorded) lets a timer say how far ahead it is."""
    match d:
        case RunStarted():
            df = d.definition
            key = f" (start key {d.start_key})" if d.start_key else ""
            return f"run started on {df['name']} v{df['version']}{key}"
        case ActivityScheduled() | CompensationScheduled():
            kind = "compensation" if isinstance(d, CompensationScheduled) else "activity"
            return (
                f"{kind} {d.activity} scheduled for step {d.step}, attempt {d.attempt} "
                f"(idempotency key {d.idempotency_key})"
            )
        case ActivityStarted():
            return (
                f"{_what(d.compensation)} of step {d.step} attempt {d.attempt} leased by {d.worker} "
                f"(fencing token {d.fencing})"
            )
        case ActivitySucceeded():
            shown = json.dumps(d.output, ensure_ascii=False, sort_keys=True)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            return f"{_what(d.compensation)} of step {d.step} attempt {d.attempt} succeeded: {shown}"
        case ActivityFailed() | ActivityTimedOut():
            verb = "timed out" if isinstance(d, ActivityTimedOut) else "failed"
            tail = (
                "; will retry"
                if d.will_retry
                else "; outcome unknown, not retried"
                if d.outcome_unknown
                else "; no more attempts"
            )
            return (
                f"{_what(d.compensation)} of step {d.step} attempt {d.attempt} {verb} ({_err(d.error)}){tail}"
            )
        case ActivityCancelled():
            return f"attempt {d.attempt} of step {d.step} withdrawn before it started ({d.reason})"
        case ResultIgnored():
            outcome = d.result.get("outcome", "result")
            return f"late/duplicate {outcome} for step {d.step} attempt {d.attempt} ignored: {d.reason}"
        case ChoiceEvaluated():
            cond = f"`{d.condition}` is true" if d.condition else "no condition matched (else)"
            return f"choice {d.step}: {cond} -> {d.next}"
        case TimerScheduled():
            return _timer(d, at)
        case TimerFired():
            return f"timer fired: {d.kind} of step {d.step}"
        case TimerCancelled():
            return f"timer of step {d.step} made stale ({d.reason})"
        case StepFailed():
            return f"step {d.step} failed ({_err(d.error)})"
        case NeedsAttention():
            return f"NEEDS ATTENTION at step {d.step}: {d.reason}"
        case CancelRequested():
            return f"cancellation requested by {d.actor or 'someone'}: {d.reason}"
        case CompensationStarted():
            return f"compensating {', '.join(d.steps)} (in this order) after the run {d.cause}"
        case RunCompleted():
            return "run completed"
        case RunFailed():
            return f"run failed ({_err(d.error)})"
        case RunCancelled():
            return f"run cancelled ({d.reason})"
        case (
            ParallelStarted()
            | ForEachStarted()
            | LaneStarted()
            | LaneFinished()
            | JoinDecided()
            | StepJoined()
        ):
            return _shapes(d)
        case ChildRunRequested():
            version = f"v{d.version}" if d.version is not None else "the latest version"
            return f"step {d.step} requested child run {d.child_run_id} of {d.definition} ({version})"
        case ChildRunCancelRequested():
            return f"cancellation of child run {d.child_run_id} (step {d.step}) requested: {d.reason}"
        case ChildRunEnded():
            why = f" ({_err(d.error)})" if d.error else ""
            return f"child run {d.child_run_id} of step {d.step} ended {d.status}{why}"
        case EventWaitRecord():
            return _event_waits(d)
        case _:
            return _approvals_and_repairs(d)


def _event_waits(d: EventWaitEvent) -> str:
    match d:
        case EventWaitStarted():
            signed = f", signed by integration {d.integration}" if d.integration else ""
            via = f" (callback allowed{signed})" if d.callback else ""
            return f"step {d.step} waits for event {d.name} (key {d.key}) until {d.expires_at}{via}"
        case CallbackIssued():
            return f"callback {d.callback_id} minted for step {d.step} by {d.by}, expires {d.expires_at}"
        case EventReceived():
            how = f"callback {d.callback_id}" if d.via == "callback" else "the events API"
            return f"step {d.step} received event {d.name} (key {d.key}, id {d.event_id}) through {how}"
        case EventWaitTimedOut():
            return f"step {d.step}: no event {d.name} (key {d.key}) arrived before {d.expires_at}"
        case EventWaitCancelled():
            return f"step {d.step} stopped waiting for its event: {d.reason}"
        case _:
            assert_never(d)


def _lane(lane: str) -> str:
    """E.g. "branch legal" or "item 3" (the last part of a lane id, see core/paths.py)."""
    if lane.endswith("]"):
        return f"item {lane[lane.rfind('[') + 1 : -1]}"
    return f"branch {lane[lane.rfind('.') + 1 :]}"


def _shapes(
    d: ParallelStarted | ForEachStarted | LaneStarted | LaneFinished | JoinDecided | StepJoined,
) -> str:
    match d:
        case ParallelStarted():
            branches = ", ".join(_lane(x).removeprefix("branch ") for x in d.lanes)
            join = d.join if d.join != "n_of" else f"n_of {d.need}"
            return f"parallel step {d.step} opened branches {branches} (join {join})"
        case ForEachStarted():
            join = d.join if d.join != "n_of" else f"n_of {d.need}"
            return (
                f"for-each step {d.step} runs over {len(d.items)} item(s), {d.concurrency} at a time "
                f"(join {join})"
            )
        case LaneStarted():
            return f"{_lane(d.lane)} of step {d.step} started"
        case LaneFinished():
            why = (
                f" ({_err(d.error)})" if d.error else (f" ({d.reason})" if isinstance(d.reason, str) else "")
            )
            return f"{_lane(d.lane)} of step {d.step} {d.outcome}{why}"
        case JoinDecided():
            cancel = f"; cancelling {', '.join(_lane(x) for x in d.cancelling)}" if d.cancelling else ""
            return f"join of step {d.step} decided: {d.outcome} ({d.reason}){cancel}"
        case StepJoined():
            return (
                f"step {d.step} joined: {d.succeeded} succeeded, {d.failed} failed, {d.cancelled} cancelled"
            )
        case _:
            assert_never(d)


def _what(compensation: bool) -> str:
    return "compensation" if compensation else "activity"


def _timer(d: TimerScheduled, at: str | None) -> str:
    delay = ""
    if at:
        delay = f" (in {format_duration(max(parse_iso(d.fire_at) - parse_iso(at), timedelta(0)))})"
    label = {
        "retry": f"retry of step {d.step}",
        "approval": f"approval timeout of step {d.step}",
        "deadline": "the run's time limit",
    }.get(d.kind, f"wait of step {d.step}")
    return f"durable timer set: {label} at {d.fire_at}{delay}"


Rest = (
    ApprovalRequested
    | ApprovalLinkIssued
    | ApprovalLinkRevoked
    | ApprovalDecisionRecorded
    | ApprovalGranted
    | ApprovalRejected
    | ApprovalTimedOut
    | ApprovalCancelled
    | ApproverReplaced
    | RunPaused
    | RunResumed
    | TransitionDeferred
    | StepSkipped
    | InputEdited
    | StepResolved
    | StepRetried
    | ActivityDeadLettered
    | WorkflowMigrated
    | RepairProposed
    | RepairConfirmed
    | RepairRejected
)


def _approvals_and_repairs(d: Rest) -> str:
    match d:
        case ApprovalRequested():
            p = d.policy
            who = ", ".join([*p["users"], *(f"group {g}" for g in p["groups"])])
            warned = f"; warning: {'; '.join(d.warnings)}" if d.warnings else ""
            return (
                f"approval requested at step {d.step}: {p['quorum']} of {{{who}}} must approve by "
                f"{d.expires_at} ({text_of(d.details)}){warned}"
            )
        case ApprovalLinkIssued():
            return f"approval link {d.link_id} issued to {d.approver} (expires {d.expires_at})"
        case ApprovalLinkRevoked():
            return f"approval link {d.link_id} of {d.approver} revoked by {_by(d.actor)}: {d.reason}"
        case ApprovalDecisionRecorded():
            note = f": {d.comment}" if d.comment else ""
            return f"{d.approver} decided {d.decision} (groups: {', '.join(d.groups) or 'none'}){note}"
        case ApprovalGranted():
            return f"approval granted by {', '.join(d.approvers)}"
        case ApprovalRejected():
            return f"approval rejected ({d.reason})"
        case ApprovalTimedOut():
            return f"approval request expired at {d.expires_at} without a decision"
        case ApprovalCancelled():
            return f"approval request closed: {d.reason}"
        case ApproverReplaced():
            return f"approver {d.old} replaced by {d.new} by {_by(d.actor)}: {d.reason}"
        case RunPaused():
            return f"paused by {_by(d.actor)}: {d.reason}"
        case RunResumed():
            held = ", ".join(x["action"].replace("_", " ") for x in d.deferred) or "nothing"
            return f"resumed by {_by(d.actor)}: {d.reason} (carried out: {held})"
        case TransitionDeferred():
            return f"held back while paused: {d.action.replace('_', ' ')} {d.args.get('step') or ''}"
        case StepSkipped():
            return f"step {d.step} skipped by {_by(d.actor)}: {d.reason}"
        case InputEdited():
            return f"input replaced by {_by(d.actor)}: {d.reason}"
        case StepResolved():
            return f"step {d.step} resolved as {d.outcome} by {_by(d.actor)}: {d.reason}"
        case StepRetried():
            key = " with a new idempotency key" if d.new_key else ""
            return f"step {d.step} retried{key} by {_by(d.actor)}: {d.reason}"
        case ActivityDeadLettered():
            return f"task of step {d.step} went to the dead-letter state: {d.reason}"
        case WorkflowMigrated():
            added = f"; added {', '.join(d.steps_added)}" if d.steps_added else ""
            granted = ""
            if isinstance(d.request_id, str) and isinstance(d.decisions, list):
                yes = [x["approver"] for x in d.decisions if x.get("decision") == "approve"]
                granted = f", approved by {', '.join(yes)} (request {d.request_id})"
            return (
                f"migrated from v{d.previous['version']} to v{d.definition['version']} by {_by(d.actor)}"
                f"{granted}: {d.reason}{added}"
            )
        case RepairProposed():
            c = d.command
            target = f"version {c.get('to_version')}" if d.kind == "migrate" else f"step {c.get('step')}"
            return f"{d.actor} proposed to {d.kind} {target} (awaits a second operator): {d.reason}"
        case RepairConfirmed():
            return f"{d.by} confirmed {d.proposed_by}'s {d.kind} proposal {d.proposal_id}: {d.reason}"
        case RepairRejected():
            verb = "withdrew" if d.withdrawn else "rejected"
            return f"{d.by} {verb} {d.proposed_by}'s {d.kind} proposal {d.proposal_id}: {d.reason}"
        case _:
            assert_never(d)
