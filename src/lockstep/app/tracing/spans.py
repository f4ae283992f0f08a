"""The spans of a run, derived from its committed events: which spans a transition ends, with their ids,
parents, times and attributes. Pure (no OpenTelemetry here: sdk.py hands the records to the SDK).

A span is emitted once, when it ends, by the process that committed the event that ended it: its start
time is read from the state before that event (the run's, a step visit's, an attempt's lease, a
timer's arming, an approval's request, the compensation's start) and its end time is the event's `at`.
Folding the events of a transition over the state before it gives the state before each event, so a
batch (a report, the next schedule and its eager lease) ends each span at its own event.

What a span carries is listed here and nowhere else (docs/operations.md documents it): ids, names, step
and activity names, workers, fencing tokens, error codes, outcomes, counts, idempotency keys, and the
actors and reasons of operators. Never an input, an output, an error message, an attention reason, an
approval's details or comments: those may be sensitive (core/sensitive.py), so no code here reads them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ...core.events import (
    ActivityCancelled,
    ActivityDeadLettered,
    ActivityFailed,
    ActivitySucceeded,
    ActivityTimedOut,
    ChoiceEvaluated,
    Event,
    LaneFinished,
    NeedsAttention,
    ResultIgnored,
    StepFailed,
    WorkflowMigrated,
)
from ...core.evolve import evolve
from ...core.lanes import approval_at, approvals, attempts
from ...core.paths import lane_of, lane_step
from ...core.state import STEP_OPEN, Attempt, Lane, RunState, Timer
from .ids import RunTrace, run_trace
from .operator import operator_span
from .records import Attr, SpanEvent, SpanRecord, ns

__all__ = ["ended_spans", "history_spans"]

_TEXT = 256  # the longest reason a span carries; longer ones are cut


def history_spans(events: Sequence[Event]) -> list[SpanRecord]:
    """Every span a whole history has ended (what the live listener emitted, commit by commit)."""
    return ended_spans(None, events)


def ended_spans(
    before: RunState | None, events: Sequence[Event], after: RunState | None = None
) -> list[SpanRecord]:
    """The spans that `events` (one committed transition) end, over the state `before` it (`after`,
    the state they lead to, if known, spares folding the last one again)."""
    out: list[SpanRecord] = []
    state = before
    closed: dict[str, int] = {}  # step -> index in `out` of the visit span this transition ended
    trace: RunTrace | None = None  # the same for the whole run: computed once
    common: tuple[object, dict[str, Attr]] = (None, {})
    last = len(events) - 1
    for i, e in enumerate(events):
        nxt = after if i == last and after is not None and after.seq == e.seq else evolve(state, e)
        if state is not None:
            trace = trace or run_trace(state)
            if common[0] is not state.definition:  # changes only with a migration
                common = (state.definition, _common(state))
            _settle(closed, out, nxt, e.at)
            for record in _Ended(state, nxt, e, trace, common[1]).spans():
                if record.kind == "step":
                    closed[str(record.attributes["lockstep.step"])] = len(out)
                out.append(record)
        state = nxt
    return out


def _common(s: RunState) -> dict[str, Attr]:
    """What every span of the run carries."""
    return {
        "lockstep.tenant": s.tenant,
        "lockstep.definition": str(s.definition.get("name")),
        "lockstep.version": int(s.definition.get("version") or 0),
        "lockstep.run_id": s.run_id,
    }


def _settle(closed: dict[str, int], out: list[SpanRecord], after: RunState, at: str) -> None:
    """A visit ended earlier in the same command takes the status its step settles on in that command
    (a skip cancels a wait's timer, then skips it: the visit ends skipped, not cancelled). A command's
    events share their time, so the whole history, folded at once, settles the same way."""
    for step, i in list(closed.items()):
        st = after.steps.get(step)
        if st is None or st.status in STEP_OPEN or out[i].end != at:
            del closed[step]  # entered again (a loop), or moved away by a migration
        elif out[i].attributes["lockstep.status"] != st.status and not after.terminal:
            error = _code(st.error) if st.status in ("failed", "dead_letter") else None
            attrs = {**out[i].attributes, "lockstep.status": st.status}
            out[i] = replace(out[i], attributes=attrs, error=error)


class _Ended:
    """The spans one event ends: `b` is the state before it, `a` after."""

    def __init__(self, b: RunState, a: RunState, e: Event, trace: RunTrace, common: dict[str, Attr]) -> None:
        self.b, self.a, self.e = b, a, e
        self.trace = trace
        self.common = common
        self.out: list[SpanRecord] = []

    def spans(self) -> list[SpanRecord]:
        b, a, d = self.b, self.a, self.e.data
        ending = a.terminal and not b.terminal
        # Attempts and approvals of every lane: a run inside a parallel or for-each step has several.
        still = {(x.task_id, x.fencing) for x in attempts(a)} if not ending else set()
        for act in attempts(b):
            if act.fencing is not None and (act.task_id, act.fencing) not in still:
                self._attempt(act)
        for key, t in b.timers.items():
            now_t = a.timers.get(key)
            if ending or now_t is None or now_t.generation != t.generation:
                self._timer(t)
        pending = {x["request_id"] for x in approvals(a)} if not ending else set()
        for req in approvals(b):
            if req["request_id"] not in pending:
                self._approval(req)
        step = getattr(d, "step", None)
        if isinstance(step, str):
            self._step_moved(step)
        if isinstance(d, WorkflowMigrated):
            self._migrated(d)
        if isinstance(d, NeedsAttention):
            self._attention(d)
        if isinstance(d, ResultIgnored):
            self._ignored(d)
        if isinstance(d, LaneFinished) and d.lane in b.lanes:
            self._lane(d.lane, b.lanes[d.lane], d.outcome)
        op = operator_span(d, _TEXT)
        if op is not None:
            name, attrs = op
            self._add("operator", name, self.trace.span("event", self.e.seq), self.trace.root, attrs)
        if (
            b.compensating is not None
            and b.compensation_seq is not None
            and (ending or a.compensating is None)
        ):
            self._compensation()
        if ending:
            for sid, st in b.steps.items():
                if st.status in STEP_OPEN and sid != step:
                    self._step(sid, st.entered_seq, st.entered_at, a.status)
            for lid, ln in b.lanes.items():
                if ln.open and not (isinstance(d, LaneFinished) and d.lane == lid):
                    self._lane(lid, ln, a.status)
            self._root()
        return self.out

    # --- helpers ---------------------------------------------------------------------------------
    def _add(
        self,
        kind: str,
        name: str,
        span_id: int,
        parent: int | None,
        attrs: Mapping[str, Attr],
        start: str | None = None,
        events: tuple[SpanEvent, ...] = (),
        error: str | None = None,
    ) -> None:
        at = self.e.at
        record = SpanRecord(
            kind, name, self.trace, span_id, parent, start or at, at, {**self.common, **attrs}, events, error
        )
        self.out.append(record)

    def _visit(self, step: str) -> int:
        """The span of `step`'s current visit (before this event), else the run's root."""
        st = self.b.steps.get(step)
        if st is None or st.entered_seq is None:
            return self.trace.root
        return self.trace.span("step", st.entered_seq)

    def _lane_span(self, step: str) -> int:
        """The span of the lane `step` runs in (a branch's or an item's), else the run's root."""
        lid = lane_of(step)
        ln = self.b.lanes.get(lid) or self.a.lanes.get(lid) if lid else None
        if ln is None or ln.started_seq is None:
            return self.trace.root
        return self.trace.span("lane", ln.started_seq)

    def _compensation_span(self) -> int:
        seq = self.b.compensation_seq
        return self.trace.span("compensation", seq) if seq is not None else self.trace.root

    # --- the kinds of spans -------------------------------------------------------------------
    def _root(self) -> None:
        a = self.a
        attrs: dict[str, Attr] = {"lockstep.status": a.status, "lockstep.events": self.e.seq}
        if a.start_key is not None:
            attrs["lockstep.start_key"] = a.start_key
        error = _code(a.error) if a.status == "failed" else None
        name = f"run {self.common['lockstep.definition']}"
        self._add("run", name, self.trace.root, self.trace.parent, attrs, a.started_at, error=error)

    def _step_moved(self, step: str) -> None:
        was, now = self.b.steps.get(step), self.a.steps.get(step)
        if was is None:
            return
        closed = now is None or now.status not in STEP_OPEN
        if was.status in STEP_OPEN and (closed or self.a.terminal):
            status = now.status if now is not None and closed else self.a.status
            self._step(step, was.entered_seq, was.entered_at, status)
        elif (
            now is not None
            and closed
            and was.status != now.status
            and isinstance(self.e.data, ChoiceEvaluated | StepFailed)
        ):
            self._step(step, None, None, now.status)  # an instant step: a choice, a fail step

    def _step(self, step: str, seq: int | None, at: str | None, status: str) -> None:
        st = self.a.steps.get(step) or self.b.steps[step]
        attrs: dict[str, Attr] = {
            "lockstep.step": step,
            "lockstep.status": status,
            "lockstep.attempts": st.attempts,
        }
        if st.idempotency_key is not None:
            attrs["lockstep.idempotency_key"] = st.idempotency_key
        if lane_of(step):
            attrs["lockstep.lane"] = lane_of(step)
        span = self.trace.span("step", seq if seq is not None else self.e.seq)
        error = _code(st.error) if status in ("failed", "dead_letter") else None
        self._add("step", f"step {step}", span, self._lane_span(step), attrs, at, error=error)

    def _lane(self, lid: str, ln: Lane, status: str) -> None:
        """A branch or an item: a child of its parallel or for-each step's visit."""
        attrs: dict[str, Attr] = {"lockstep.step": ln.step, "lockstep.lane": lid, "lockstep.status": status}
        kind = "item" if lid.endswith("]") else "branch"
        span = self.trace.span("lane", ln.started_seq or self.e.seq)
        error = _code(ln.error) if status == "failed" else None
        name = f"{kind} {lid[len(lane_step(lid)) + 1 :].strip('[]')}"
        self._add("lane", name, span, self._visit(ln.step), attrs, ln.started_at, error=error)

    def _migrated(self, d: WorkflowMigrated) -> None:
        """A migration that removes a step being visited ends that visit."""
        for old, st in self.b.steps.items():
            if st.status in STEP_OPEN and d.mapping.get(old, old) not in self.a.steps:
                self._step(old, st.entered_seq, st.entered_at, "removed")

    def _attempt(self, act: Attempt) -> None:
        d = self.e.data
        outcome: str = "abandoned"
        error: str | None = None
        extra: dict[str, Attr] = {}
        if isinstance(d, ActivitySucceeded) and d.task_id == act.task_id:
            outcome = "succeeded"
        elif isinstance(d, ActivityFailed | ActivityTimedOut) and d.task_id == act.task_id:
            outcome = "timed_out" if isinstance(d, ActivityTimedOut) else "failed"
            error = _code(d.error)
            extra = {"lockstep.will_retry": d.will_retry, "lockstep.outcome_unknown": d.outcome_unknown}
        elif isinstance(d, ActivityCancelled) and d.task_id == act.task_id:
            outcome = "cancelled"
        elif isinstance(d, ActivityDeadLettered) and d.task_id == act.task_id:
            outcome = "dead_letter"
        fencing = act.fencing or 0
        attrs: dict[str, Attr] = {
            "lockstep.step": act.step,
            "lockstep.attempt": act.attempt,
            "lockstep.task_id": act.task_id,
            "lockstep.activity": act.activity,
            "lockstep.kind": act.kind,
            "lockstep.delivery": act.delivery,
            "lockstep.worker": act.worker or "",
            "lockstep.fencing": fencing,
            "lockstep.idempotency_key": act.idempotency_key,
            "lockstep.outcome": outcome,
            "lockstep.queue_delay_ms": _ms_between(act.scheduled_at, act.started_at),
            **extra,
        }
        if error is not None:
            attrs["lockstep.error_code"] = error
        parent = self._compensation_span() if act.kind == "compensation" else self._visit(act.step)
        span = self.trace.span("attempt", act.task_id, fencing)
        name = f"attempt {act.activity}"
        self._add(
            "attempt",
            name,
            span,
            parent,
            attrs,
            act.started_at,
            error=error,
        )

    def _timer(self, t: Timer) -> None:
        d = self.e.data
        fired = getattr(d, "key", None) == t.key and d.type == "TimerFired"
        cancelled = getattr(d, "key", None) == t.key and d.type == "TimerCancelled"
        outcome = "fired" if fired else ("cancelled" if cancelled else "cleared")
        attrs: dict[str, Attr] = {
            "lockstep.timer": t.key,
            "lockstep.timer_kind": t.kind,
            "lockstep.generation": t.generation,
            "lockstep.fire_at": t.fire_at,
            "lockstep.outcome": outcome,
        }
        if fired:
            attrs["lockstep.lag_ms"] = max(0, _ms_between(t.fire_at, self.e.at))
        if t.kind == "deadline":
            parent = self.trace.root
        else:
            attrs["lockstep.step"] = t.step
            if t.key.endswith(":compensation"):
                parent = self._compensation_span()
            elif t.kind == "approval" and (req := approval_at(self.b, t.step)) is not None:
                parent = self.trace.span("approval", req["request_id"])
            else:
                parent = self._visit(t.step)
        span = self.trace.span("timer", t.key, t.generation)
        self._add("timer", f"timer {t.kind}", span, parent, attrs, t.scheduled_at)

    def _approval(self, req: Mapping[str, object]) -> None:
        step = str(req["step"])
        after = self.a.steps.get(step)
        output = after.output if after is not None else None
        outcome = output.get("outcome") if isinstance(output, dict) else None
        decisions = [x for x in req.get("decisions") or [] if isinstance(x, dict)]  # type: ignore[attr-defined]
        events = tuple(
            SpanEvent(
                "decision",
                str(x["at"]),
                {"lockstep.approver": str(x["approver"]), "lockstep.decision": str(x["decision"])},
            )
            for x in decisions
        )
        attrs: dict[str, Attr] = {
            "lockstep.step": step,
            "lockstep.request_id": str(req["request_id"]),
            "lockstep.outcome": str(outcome or ("cancelled" if self.a.terminal else "withdrawn")),
            "lockstep.decisions": len(decisions),
        }
        span = self.trace.span("approval", req["request_id"])
        name = f"approval {step}"
        self._add("approval", name, span, self._visit(step), attrs, str(req["requested_at"]), events)

    def _compensation(self) -> None:
        b, a = self.b, self.a
        steps = b.compensating or ()
        done = sum(1 for st in a.steps.values() if (st.compensation or {}).get("status") == "compensated")
        attrs: dict[str, Attr] = {
            "lockstep.cause": b.compensation_cause or "",
            "lockstep.outcome": "completed" if not steps else "incomplete",
            "lockstep.compensated": done,
        }
        self._add(
            "compensation",
            "compensation",
            self._compensation_span(),
            self.trace.root,
            attrs,
            b.compensation_at,
        )

    def _attention(self, d: NeedsAttention) -> None:
        attrs: dict[str, Attr] = {"lockstep.step": d.step, "lockstep.code": d.code}
        self._add(
            "attention", "needs attention", self.trace.span("event", self.e.seq), self._visit(d.step), attrs
        )

    def _ignored(self, d: ResultIgnored) -> None:
        """A stale or duplicate report: a child of the attempt span it was meant for."""
        attrs: dict[str, Attr] = {
            "lockstep.step": d.step,
            "lockstep.attempt": d.attempt,
            "lockstep.task_id": d.task_id,
            "lockstep.fencing": d.fencing,
            "lockstep.reason": d.reason[:_TEXT],
            "lockstep.outcome": str(d.result.get("outcome")),
        }
        code = d.result.get("code")
        if isinstance(code, str):
            attrs["lockstep.error_code"] = code
        parent = self.trace.span("attempt", d.task_id, d.fencing)
        self._add("ignored", "result ignored", self.trace.span("event", self.e.seq), parent, attrs)


def _code(error: object) -> str | None:
    """An error document's code (never its message); None for a sealed or missing one."""
    code = error.get("code") if isinstance(error, Mapping) else None
    return code if isinstance(code, str) else None


def _ms_between(start: str | None, end: str | None) -> int:
    if start is None or end is None:
        return 0
    return (ns(end) - ns(start)) // 1_000_000
