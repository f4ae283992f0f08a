"""One human sentence per event, for `lockstep events`, the demo and (later) the run page timeline."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from .timeutil import format_duration, parse_iso

__all__ = ["narrate"]


def _err(e: dict[str, Any] | None) -> str:
    return f"{e.get('code')}: {e.get('message')}" if e else "unknown error"


def narrate(type_: str, data: dict[str, Any], at: str | None = None) -> str:
    d = data
    what = "compensation" if d.get("compensation") else "activity"
    if type_ == "RunStarted":
        df = d["definition"]
        return f"run started on {df['name']} v{df['version']}" + (
            f" (start key {d['start_key']})" if d.get("start_key") else ""
        )
    if type_ in ("ActivityScheduled", "CompensationScheduled"):
        kind = "compensation" if type_ == "CompensationScheduled" else "activity"
        return (
            f"{kind} {d['activity']} scheduled for step {d['step']}, attempt {d['attempt']} "
            f"(idempotency key {d['idempotency_key']})"
        )
    if type_ == "ActivityStarted":
        return (
            f"{what} of step {d['step']} attempt {d['attempt']} leased by {d['worker']} "
            f"(fencing token {d['fencing']})"
        )
    if type_ == "ActivitySucceeded":
        shown = json.dumps(d.get("output"), ensure_ascii=False, sort_keys=True)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        return f"{what} of step {d['step']} attempt {d['attempt']} succeeded: {shown}"
    if type_ in ("ActivityFailed", "ActivityTimedOut"):
        verb = "timed out" if type_ == "ActivityTimedOut" else "failed"
        tail = (
            "; will retry"
            if d["will_retry"]
            else "; outcome unknown, not retried"
            if d.get("outcome_unknown")
            else "; no more attempts"
        )
        return f"{what} of step {d['step']} attempt {d['attempt']} {verb} ({_err(d.get('error'))}){tail}"
    if type_ == "ActivityCancelled":
        return f"attempt {d['attempt']} of step {d['step']} withdrawn before it started ({d['reason']})"
    if type_ == "ResultIgnored":
        res = d.get("result", {})
        return (
            f"late/duplicate {res.get('outcome', 'result')} for step {d['step']} attempt {d['attempt']} "
            f"ignored: {d['reason']}"
        )
    if type_ == "ChoiceEvaluated":
        cond = f"`{d['condition']}` is true" if d.get("condition") else "no condition matched (else)"
        return f"choice {d['step']}: {cond} -> {d['next']}"
    if type_ == "TimerScheduled":
        delay = ""
        if at:
            delay = f" (in {format_duration(max(parse_iso(d['fire_at']) - parse_iso(at), timedelta(0)))})"
        label = {
            "retry": f"retry of step {d['step']}",
            "approval": f"approval timeout of step {d['step']}",
            "deadline": "the run's time limit",
        }.get(d["kind"], f"wait of step {d['step']}")
        return f"durable timer set: {label} at {d['fire_at']}{delay}"
    if type_ == "TimerFired":
        return f"timer fired: {d['kind']} of step {d['step']}"
    if type_ == "TimerCancelled":
        return f"timer of step {d['step']} made stale ({d.get('reason', '')})"
    if type_ == "StepFailed":
        return f"step {d['step']} failed ({_err(d['error'])})"
    if type_ == "NeedsAttention":
        return f"NEEDS ATTENTION at step {d['step']}: {d['reason']}"
    if type_ == "CancelRequested":
        return f"cancellation requested by {d.get('actor') or 'someone'}: {d['reason']}"
    if type_ == "CompensationStarted":
        return f"compensating {', '.join(d['steps'])} (in this order) after the run {d['cause']}"
    if type_ == "ApprovalRequested":
        p = d["policy"]
        who = ", ".join([*p["users"], *(f"group {g}" for g in p["groups"])])
        return (
            f"approval requested at step {d['step']}: {p['quorum']} of {{{who}}} must approve by "
            f"{d['expires_at']} ({d['details']})"
        )
    if type_ == "ApprovalLinkIssued":
        return f"approval link {d['link_id']} issued to {d['approver']} (expires {d['expires_at']})"
    if type_ == "ApprovalLinkRevoked":
        by = d.get("actor") or "an operator"
        return f"approval link {d['link_id']} of {d['approver']} revoked by {by}: {d['reason']}"
    if type_ == "ApprovalDecisionRecorded":
        note = f": {d['comment']}" if d.get("comment") else ""
        groups = ", ".join(d.get("groups", [])) or "none"
        return f"{d['approver']} decided {d['decision']} (groups: {groups}){note}"
    if type_ == "ApprovalGranted":
        return f"approval granted by {', '.join(d['approvers'])}"
    if type_ == "ApprovalRejected":
        return f"approval rejected ({d['reason']})"
    if type_ == "ApprovalTimedOut":
        return f"approval request expired at {d['expires_at']} without a decision"
    if type_ == "ApprovalCancelled":
        return f"approval request closed: {d['reason']}"
    if type_ == "ApproverReplaced":
        return (
            f"approver {d['old']} replaced by {d['new']} by {d.get('actor') or 'an operator'}: {d['reason']}"
        )
    if type_ == "RunPaused":
        return f"paused by {d.get('actor') or 'an operator'}: {d['reason']}"
    if type_ == "RunResumed":
        held = ", ".join(x["action"].replace("_", " ") for x in d.get("deferred", [])) or "nothing"
        return f"resumed by {d.get('actor') or 'an operator'}: {d['reason']} (carried out: {held})"
    if type_ == "TransitionDeferred":
        return (
            f"held back while paused: {d['action'].replace('_', ' ')} {d.get('args', {}).get('step') or ''}"
        )
    if type_ == "StepSkipped":
        return f"step {d['step']} skipped by {d.get('actor') or 'an operator'}: {d['reason']}"
    if type_ == "InputEdited":
        return f"input replaced by {d.get('actor') or 'an operator'}: {d['reason']}"
    if type_ == "StepResolved":
        return (
            f"step {d['step']} resolved as {d['outcome']} by {d.get('actor') or 'an operator'}: {d['reason']}"
        )
    if type_ == "StepRetried":
        key = " with a new idempotency key" if d.get("new_key") else ""
        return f"step {d['step']} retried{key} by {d.get('actor') or 'an operator'}: {d['reason']}"
    if type_ == "ActivityDeadLettered":
        return f"task of step {d['step']} went to the dead-letter state: {d['reason']}"
    if type_ == "WorkflowMigrated":
        p, n = d["previous"], d["definition"]
        added = f"; added {', '.join(d['steps_added'])}" if d.get("steps_added") else ""
        return (
            f"migrated from v{p['version']} to v{n['version']} by {d.get('actor') or 'an operator'}: "
            f"{d['reason']}{added}"
        )
    if type_ == "RepairProposed":
        c = d.get("command", {})
        target = f"version {c.get('to_version')}" if d["kind"] == "migrate" else f"step {c.get('step')}"
        return f"{d['actor']} proposed to {d['kind']} {target} (awaits a second operator): {d['reason']}"
    if type_ == "RepairConfirmed":
        return (
            f"{d['by']} confirmed {d['proposed_by']}'s {d['kind']} proposal {d['proposal_id']}: {d['reason']}"
        )
    if type_ == "RepairRejected":
        verb = "withdrew" if d.get("withdrawn") else "rejected"
        return f"{d['by']} {verb} {d['proposed_by']}'s {d['kind']} proposal {d['proposal_id']}: {d['reason']}"
    if type_ == "RunCompleted":
        return "run completed"
    if type_ == "RunFailed":
        return f"run failed ({_err(d.get('error'))})"
    if type_ == "RunCancelled":
        return f"run cancelled ({d.get('reason')})"
    return type_
