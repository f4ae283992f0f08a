"""Why a run waits and what happens next, computed from its state alone (so CLI, API and UI agree)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TypedDict

from .canonical import JSONObject
from .explain_lanes import shape_waiting
from .lanes import approvals, attempts, attentions
from .sealed import text_of
from .state import RunState
from .timeutil import format_duration, parse_iso

__all__ = ["WAIT_KINDS", "Explanation", "Waiting", "describe_proposal", "explain", "wait_kind"]


def _ago(at: str, now: datetime) -> str:
    return format_duration(now - parse_iso(at))


def _in(at: str, now: datetime) -> str:
    """`in 5m`, or `overdue by 1s` once the time has passed (the scheduler has not acted yet)."""
    delta = parse_iso(at) - now
    return (
        f"overdue by {format_duration(-delta)}"
        if delta.total_seconds() < 0
        else f"in {format_duration(delta)}"
    )


WAIT_KINDS = (
    "queued",
    "running",
    "timer",
    "retry",
    "approval",
    "child",
    "event",
    "attention",
    "paused",
    "cancelling",
    "compensating",
    "transition",
)


class Waiting(TypedDict):
    """Why the run waits (None when it finished), since and until when, and what happens next."""

    wait_reason: str | None
    waiting_since: str | None
    waiting_until: str | None
    next_action: str | None


class Explanation(Waiting):
    wait_kind: str | None  # one of WAIT_KINDS


def wait_kind(s: RunState) -> str | None:
    """A short category of what the run waits for (filterable); None for a finished run."""
    if s.terminal:
        return None
    if s.attention is not None or (s.lanes and attentions(s)):
        return "attention"
    if s.paused is not None:
        return "paused"
    if s.compensating is not None:
        return "compensating"
    if s.cancel is not None:
        return "cancelling"
    if s.active is not None:
        return "queued" if s.active.fencing is None else "running"
    if s.lanes:  # inside parallel or for-each steps: what any lane waits for, in the same order
        every = list(attempts(s))
        if every:
            return "running" if any(a.fencing is not None for a in every) else "queued"
        if approvals(s):
            return "approval"
    if s.approval is not None:
        return "approval"
    if s.children:
        return "child"
    if s.event_waits:
        return "event"
    timers = [t for t in s.timers.values() if t.kind != "deadline"]
    if timers:
        return "timer" if any(t.kind == "wait" for t in timers) else "retry"
    return "transition"


def explain(s: RunState, now: datetime) -> Explanation:
    """wait_kind, wait_reason, waiting_since, waiting_until and next_action; all None when finished."""
    out: Explanation = {"wait_kind": wait_kind(s), **_explain(s, now)}
    if s.proposal is not None and out["wait_reason"] is not None:
        p, pid = s.proposal, s.proposal["proposal_id"]
        since = _ago(p["at"], now)
        out["wait_reason"] += f"; {describe_proposal(p)} awaits a second operator since {since} ago"
        out["next_action"] = (
            f"another operator confirms it (`lockstep confirm RUN {pid} --reason ...`) or anyone rejects "
            f"it (`lockstep reject-proposal RUN {pid} --reason ...`); if the run moves on first, it "
            f"lapses. Otherwise: {out['next_action']}"
        )
    return out


def describe_proposal(p: JSONObject) -> str:
    """E.g. "proposal p7 (skip of step ship by alice: carrier is down)"."""
    c = p["command"]
    what = {
        "skip": f"skip of step {c.get('step')}",
        "resolve": f"resolve of step {c.get('step')} as {c.get('outcome')}",
        "migrate": f"migration to version {c.get('to_version')}",
    }.get(p["kind"], p["kind"])
    return f"proposal {p['proposal_id']} ({what} by {p['actor']}: {p['reason']})"


def _explain(s: RunState, now: datetime) -> Waiting:
    none: Waiting = {
        "wait_reason": None,
        "waiting_since": None,
        "waiting_until": None,
        "next_action": None,
    }
    if s.terminal:
        return none
    lane_attentions = attentions(s) if s.lanes else []
    att = s.attention if s.attention is not None else (lane_attentions[0] if lane_attentions else None)
    if att is not None:
        more = len(lane_attentions) - 1
        also = f" (and {more} more step(s) in other lanes)" if more > 0 else ""
        return {
            "wait_reason": f"needs attention since {_ago(att['since'], now)} ago: {att['reason']}{also}",
            "waiting_since": att["since"],
            "waiting_until": None,
            "next_action": _attention_next(att),
        }
    if s.paused is not None:
        p = s.paused
        pending = ", ".join(d["action"].replace("_", " ") for d in p["deferred"]) or "nothing yet"
        live = [x for x in attempts(s) if x.fencing is not None]
        running = (
            f"; attempt {live[0].attempt} of step {live[0].step} is still running and will be recorded"
            + (f" (and {len(live) - 1} more)" if len(live) > 1 else "")
            if live
            else ""
        )
        return {
            "wait_reason": f"paused by {p.get('actor') or 'an operator'} {_ago(p['at'], now)} ago: "
            f"{p['reason']}{running}",
            "waiting_since": p["at"],
            "waiting_until": None,
            "next_action": "nothing starts until an operator resumes it (`lockstep resume RUN --reason ...`)"
            f"; held back for resume: {pending}",
        }
    a = s.active
    many = list(attempts(s)) if s.lanes else []
    if a is None and many:
        a = next((x for x in many if x.fencing is not None), many[0])
    prefix = ""
    if s.compensating is not None:
        cause = "cancellation" if s.compensation_cause == "cancelled" else "a failed step"
        prefix = f"compensating after {cause} ({len(s.compensating)} step(s) left); "
    elif s.cancel is not None:
        prefix = f"cancellation requested ({s.cancel['reason']}); "
    cur = s.current_step
    if (
        s.compensating is None
        and s.cancel is None
        and cur is not None
        and cur in s.groups
        and s.steps[cur].status == "running"
    ):
        return shape_waiting(s, cur, now, prefix)  # type: ignore[return-value]
    if a is not None and len(many) > 1:
        prefix += f"{len(many)} attempts not over yet, e.g. "
    if a is not None:
        what = "compensation" if a.kind == "compensation" else "activity"
        label = f"{what} {a.activity} (step {a.step}, attempt {a.attempt})"
        if a.fencing is None:
            return {
                "wait_reason": f"{prefix}{label} is queued for a worker since "
                f"{_ago(a.scheduled_at, now)} ago",
                "waiting_since": a.scheduled_at,
                "waiting_until": None,
                "next_action": f"a worker serving {a.activity} takes it and has "
                f"{format_duration(_ms(a.timeout_ms))} to finish",
            }
        nxt = (
            "then the run ends cancelled or compensates"
            if s.cancel
            else "on success the run moves on; on failure the retry policy applies"
        )
        return {
            "wait_reason": f"{prefix}{label} is running on {a.worker} since "
            f"{_ago(a.started_at or '', now)} ago",
            "waiting_since": a.started_at,
            "waiting_until": a.deadline,
            "next_action": f"{nxt}; if no result by {a.deadline} "
            f"({_in(a.deadline or '', now)}) the attempt times out",
        }
    if s.approval is not None:
        return _explain_approval(s.approval, now)
    waiting_for = approvals(s) if s.lanes else []
    if waiting_for:
        return _explain_approval(waiting_for[0], now)
    if s.children:
        key, child = next(iter(sorted(s.children.items())))
        pinned = f"v{child['version']}" if child["version"] is not None else "its latest version"
        others = f" (and {len(s.children) - 1} more)" if len(s.children) > 1 else ""
        return {
            "wait_reason": f"{prefix}step {key} waits for child run {child['child_run_id']} of "
            f"{child['definition']} ({pinned}) since {_ago(child['at'], now)} ago{others}",
            "waiting_since": child["at"],
            "waiting_until": None,
            "next_action": f"when the child run ends, step {key} takes its output (or its failure) and the "
            "run moves on; cancelling this run cancels the child first",
        }
    if s.event_waits:
        key, w = next(iter(sorted(s.event_waits.items())))
        others = f" (and {len(s.event_waits) - 1} more)" if len(s.event_waits) > 1 else ""
        back = " or its callback" if w.get("callback") else ""
        return {
            "wait_reason": f"{prefix}{_event_wait_text(key, w)} ({_in(w['expires_at'], now)}){others}",
            "waiting_since": w["at"],
            "waiting_until": w["expires_at"],
            "next_action": f"when POST /v1/events{back} delivers {w['name']} with key {w['key']}, step {key} "
            "takes its payload and the run moves on; if none arrives in time, its on_timeout applies",
        }
    timers = [t for t in s.timers.values() if t.kind != "deadline"]
    if timers:
        t = min(timers, key=lambda t: t.fire_at)
        if t.kind == "wait":
            return {
                "wait_reason": f"{prefix}step {t.step} waits on a durable timer until {t.fire_at} "
                f"({_in(t.fire_at, now)})",
                "waiting_since": t.scheduled_at,
                "waiting_until": t.fire_at,
                "next_action": f"when the timer fires, step {t.step} completes and the run moves on",
            }
        st = s.steps.get(t.step)
        err = (st.error or {}) if st else {}
        comp = t.key.endswith(":compensation")
        n = ((st.compensation or {}).get("attempts", 0) if comp else st.attempts) if st else 0
        return {
            "wait_reason": f"{prefix}{'compensation of ' if comp else ''}step {t.step} attempt {n} failed "
            f"({err.get('code')}: {text_of(err.get('message'))}); backing off until {t.fire_at} "
            f"({_in(t.fire_at, now)})",
            "waiting_since": t.scheduled_at,
            "waiting_until": t.fire_at,
            "next_action": f"attempt {n + 1} of step {t.step} is scheduled when the backoff ends",
        }
    return {
        "wait_reason": f"{prefix}moving to the next step",
        "waiting_since": s.updated_at,
        "waiting_until": None,
        "next_action": "the next transition is being recorded",
    }


def _ms(ms: int) -> timedelta:
    return timedelta(milliseconds=ms)


def _explain_approval(a: JSONObject, now: datetime) -> Waiting:
    p = a["policy"]
    approved = [d for d in a["decisions"] if d["decision"] == "approve"]
    rejected = [d for d in a["decisions"] if d["decision"] == "reject"]
    need = p["quorum"] - len(approved)
    who = ", ".join([*p["users"], *p["groups"]])
    parts = [f"waiting for {need} more approval{'s' if need != 1 else ''} of {p['quorum']} from {{{who}}}"]
    parts += [f"{d['approver']} approved {_ago(d['at'], now)} ago" for d in approved]
    parts += [f"{d['approver']} rejected {_ago(d['at'], now)} ago" for d in rejected]
    left = parse_iso(a["expires_at"]) - now
    parts.append(
        f"expires in {format_duration(left)}"
        if left.total_seconds() >= 0
        else f"expired {format_duration(-left)} ago; its timeout is being applied"
    )
    parts += a.get("warnings", [])  # recorded when the request was made (app/approvers.py)
    on_timeout = {"reject": "it counts as rejected", "fail": "the run fails"}.get(
        p["on_timeout"], f"the run goes to step {p['on_timeout']}"
    )
    return {
        "wait_reason": "; ".join(parts),
        "waiting_since": a["requested_at"],
        "waiting_until": a["expires_at"],
        "next_action": f"when {p['quorum']} approver(s) approve, step {a['step']} completes and the run "
        f"moves on; {p['reject_quorum']} rejection(s) reject it; if nobody decides by {a['expires_at']}, "
        f"{on_timeout}",
    }


def _attention_next(att: JSONObject) -> str:
    step = att.get("step")
    resolve = f"`lockstep resolve RUN {step} --as succeeded|failed --reason ...`"
    retry = f"`lockstep retry RUN {step} --reason ...`"
    return {
        "outcome_unknown": f"an operator checks the downstream system, then {resolve} (or {retry} if it did "
        f"not happen), or cancels the run",
        "dead_letter": f"an operator starts a worker for it and runs {retry}, or cancels the run",
        "compensation_failed": f"an operator retries the compensation ({retry}) or undoes it by hand "
        f"and resolves it",
    }.get(
        att.get("code") or "",
        "an operator decides: retry, resolve, skip or cancel the run (each needs --reason)",
    )


def _event_wait_text(key: str, w: JSONObject) -> str:
    """E.g. "step delivered waits for event parcel-delivered (key ABC) until 2026-12-08T10:00:00Z"."""
    return f"step {key} is waiting for event {w['name']} (key {w['key']}) until {w['expires_at']}"
