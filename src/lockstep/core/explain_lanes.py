"""Why a run inside a parallel or for-each step waits, lane by lane ("step review waits for its branches
(join all): branch legal: approval from alice (1 more of 1); branch finance: done"), computed from the
state alone like the rest of explain.py, which calls it."""

from __future__ import annotations

from datetime import datetime

from .join import describe_lane, this_visit
from .paths import lane_of
from .state import Group, Lane, RunState
from .timeutil import format_duration, parse_iso

__all__ = ["shape_waiting"]

_SHOWN = 6  # lanes described one by one; the rest are counted


def _in(at: str, now: datetime) -> str:
    delta = parse_iso(at) - now
    return "now" if delta.total_seconds() < 0 else f"in {format_duration(delta)}"


def _rule(g: Group) -> str:
    return {"all": "join all", "any": "join any"}.get(g.join, f"join n_of {g.need}")


def _lane_now(s: RunState, lid: str, ln: Lane, now: datetime, depth: int) -> str:
    """What one open lane waits for."""
    tail = " (being cancelled)" if ln.status == "cancelling" else ""
    if ln.attention is not None:
        return f"needs attention at step {ln.attention['step']}: {ln.attention['reason']}{tail}"
    a = ln.active
    if a is not None:
        what = "compensation" if a.kind == "compensation" else "activity"
        where = f"running on {a.worker}" if a.fencing is not None else "queued for a worker"
        return f"{what} {a.activity} (step {a.step}, attempt {a.attempt}) {where}{tail}"
    if ln.approval is not None:
        p = ln.approval["policy"]
        approved = sum(1 for d in ln.approval["decisions"] if d["decision"] == "approve")
        who = ", ".join([*p["users"], *(f"group {g}" for g in p["groups"])])
        more = p["quorum"] - approved
        expires = _in(ln.approval["expires_at"], now)
        return f"approval from {who} ({more} more of {p['quorum']}, expires {expires}){tail}"
    for key, child in sorted(s.children.items()):
        if lane_of(key) == lid:
            return f"child run {child['child_run_id']} of {child['definition']} (step {key}){tail}"
    for key, w in sorted(s.event_waits.items()):
        if lane_of(key) == lid:
            return (
                f"step {key} is waiting for event {w['name']} (key {w['key']}) until {w['expires_at']}{tail}"
            )
    for t in sorted(s.timers.values(), key=lambda t: t.fire_at):
        if t.kind != "deadline" and lane_of(t.step) == lid:
            kind = "waits" if t.kind == "wait" else "retries"
            return f"step {t.step} {kind} {_in(t.fire_at, now)} ({t.fire_at}){tail}"
    cur = ln.current_step
    if cur is not None and cur in s.groups and s.steps.get(cur) and s.steps[cur].status == "running":
        if depth < 3:
            return f"step {cur}: " + _summary(s, cur, now, depth + 1)
        return f"step {cur} runs its lanes{tail}"
    return f"moving to its next step{tail}"


def _summary(s: RunState, key: str, now: datetime, depth: int = 0) -> str:
    g = s.groups[key]
    visit = this_visit(s, key)
    parts: list[str] = []
    shown = 0
    counts: dict[str, int] = {}
    for lid, ln in visit:
        if ln.open and shown < _SHOWN:
            parts.append(f"{describe_lane(lid, g)}: {_lane_now(s, lid, ln, now, depth)}")
            shown += 1
        elif not ln.open and g.kind == "parallel":
            status = {"succeeded": "done"}.get(ln.status, ln.status)
            parts.append(f"{describe_lane(lid, g)}: {status}")
        else:
            counts[ln.status] = counts.get(ln.status, 0) + 1
    for status, n in sorted(counts.items()):
        word = {"succeeded": "done", "running": "running", "cancelling": "being cancelled"}.get(
            status, status
        )
        parts.append(f"{n} more {word}" if status in ("running", "cancelling") else f"{n} {word}")
    waiting = len(g.lanes) - len(visit)
    if waiting:
        parts.append(f"{waiting} not started yet ({g.concurrency} at a time)")
    lanes = "branches" if g.kind == "parallel" else f"{len(g.lanes)} items"
    return f"waits for its {lanes} ({_rule(g)}): " + "; ".join(parts)


def shape_waiting(s: RunState, key: str, now: datetime, prefix: str) -> dict[str, str | None]:
    """The Waiting of a run whose current top-level step `key` is a running parallel or for-each step."""
    g = s.groups[key]
    st = s.steps[key]
    fires = [t.fire_at for t in s.timers.values() if t.kind != "deadline" and t.step != "(run)"]
    lanes = "branches" if g.kind == "parallel" else "items"
    if g.outcome is not None:
        nxt = f"its join is decided ({g.outcome}): once the {lanes} being cancelled report, step {key} ends"
    else:
        need = "every one" if g.join == "all" else ("one" if g.join == "any" else f"{g.need}")
        nxt = (
            f"when {need} of its {lanes} succeed{'s' if need == 'one' else ''}, step {key} completes and the "
            f"run moves on"
        )
        if any(lid not in g.tolerant for lid in g.lanes):
            one = "item" if g.kind == "for_each" else "branch"
            nxt += f"; a failing {one} fails it (the others are cancelled)"
    return {
        "wait_reason": f"{prefix}step {key} {_summary(s, key, now)}",
        "waiting_since": st.started_at,
        "waiting_until": min(fires) if fires else None,
        "next_action": nxt,
    }
