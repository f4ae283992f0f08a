"""Stateful property tests: operator repair commands (pause, resume, skip, edit input, resolve, retry,
migrate) interleaved at random with normal traffic (claims, reports incl. stale ones, lease expiries,
timer firings, approvals, cancel) keep every core invariant of the pure core (decide/evolve).

Known bugs found by this machine are pinned as strict xfail tests at the end of the file; the machine
steers around exactly those interleavings (see `_known_bug`), so it keeps checking everything else.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule
from invariants import RunMachine, check_explained, check_finished, check_not_stuck, evidence_full

from lockstep.core.commands import (
    CancelRun,
    ClaimTask,
    Command,
    DecideApproval,
    EditInput,
    ExpireLease,
    FireTimer,
    MigrateRun,
    PauseRun,
    Rejected,
    ReportFailure,
    ReportSuccess,
    ResolveStep,
    ResumeRun,
    RetryStep,
    SkipStep,
    StartRun,
)
from lockstep.core.definition import Definition, DefinitionError
from lockstep.core.events import Event
from lockstep.core.migrate import plan_migration
from lockstep.core.repair import RETRYABLE_ATTENTION, granted_approvals
from lockstep.core.state import RunState
from lockstep.core.timeutil import iso, parse_iso

from .repairkit import T0, VERSIONS, Drive

RUN = "run-1"
REASONS = st.sampled_from(["ops ticket 42", "ops ticket 42", "customer called", "", "   "])
OUTPUTS = st.sampled_from([None, {"ok": True}, {"v": 1}, "manual"])
CODES = st.sampled_from(["Boom", "Fatal"])
ROLES = st.sampled_from([("operator",), ("admin",), ("operator", "admin"), ("viewer",), ()])
INPUTS = st.sampled_from(
    [
        {"sku": "S-2"},
        {"sku": "S-3", "qty": 2, "customer": "c-1"},
        {"sku": "S-4", "customer": "c-2"},
        {"qty": 1},  # no sku: invalid in every version
        {"sku": 5},  # wrong type
        {"sku": "S-5", "qty": 0},  # below the minimum
        "not an object",
    ]
)
REPAIR_EVENTS = ("RunPaused", "RunResumed", "StepSkipped", "InputEdited", "StepResolved", "StepRetried")
# While a run stays paused none of these may happen: they start work or move the run on.
NOT_WHILE_PAUSED = {
    "ActivityScheduled",
    "CompensationScheduled",
    "ActivityStarted",
    "ApprovalRequested",
    "ChoiceEvaluated",
    "CompensationStarted",
    "RunCompleted",
    "RunFailed",
    "StepFailed",
}


def _input_ok(d: Definition, value: Any) -> bool:
    try:
        d.check_input(value)
    except DefinitionError:
        return False
    return True


class RepairMachine(RunMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.scheduled: list[str] = []  # every task id ever scheduled (incl. withdrawn ones)
        self.accepted: Counter[str] = Counter()

    @property
    def d(self) -> Definition:
        """The definition version the run is on now (it changes with WorkflowMigrated)."""
        return VERSIONS[self.s.definition["version"]]

    # --- the one way commands reach the run ----------------------------------------------------------

    def send(self, command: Command) -> list[Event] | None:
        """decide + append; None if Rejected. Checks determinism, terminal stability and effects
        (RunMachine) and the per-command invariants of repair: pauses, resumes, reasons."""
        before = self.state
        d = VERSIONS[before.definition["version"]] if before is not None else VERSIONS[1]
        n_before = len(self.events)
        events = self.decide_checked(command, self.now, d)
        if isinstance(events, Rejected):
            assert events.reason, "a refusal always says why"
            # a refused command appends nothing and leaves the state as it was
            assert len(self.events) == n_before
            return None
        self.scheduled += self.append(events)
        kinds = [e.type for e in events]
        if events:
            self.accepted[type(command).__name__] += 1

        if before is not None and before.paused is not None and self.s.paused is not None:
            bad = [k for k in kinds if k in NOT_WHILE_PAUSED]
            assert not bad, f"{type(command).__name__} on a paused run emitted {bad}"
            for e in events:
                if e.type == "TimerScheduled":
                    assert e.data.kind == "retry", "a paused run arms only retry backoffs"
        if before is not None and before.paused is not None and self.s.paused is None:
            assert isinstance(command, ResumeRun | CancelRun), type(command).__name__
        if "RunResumed" in kinds:
            self._check_resumed(before, events)

        for e in events:
            if e.type in REPAIR_EVENTS or e.type == "WorkflowMigrated":
                assert e.data.reason.strip(), f"{e.type} without a reason"
                assert "actor" in e.data_json()
        return events

    def _check_resumed(self, before: RunState | None, events: list[Event]) -> None:
        """After RunResumed every transition held back while paused happens, in order."""
        assert before is not None
        assert before.paused is not None
        i = [e.type for e in events].index("RunResumed")
        deferred = before.paused["deferred"]
        assert events[i].data.deferred == deferred
        after = events[i + 1 :]
        assert len(after) >= len(deferred), "every deferred transition emits at least one event"
        types = [e.type for e in after]
        for item in deferred:
            action, args = item["action"], item["args"]
            if action == "schedule_action":
                assert any(
                    e.type == "ActivityScheduled"
                    and e.data.step == args["step"]
                    and e.data.attempt == args["attempt"]
                    for e in after
                ) or ("StepFailed" in types), (item, types)
            elif action == "next_compensation":
                assert {"CompensationScheduled", "RunFailed", "RunCancelled", "NeedsAttention"} & set(types)
            elif action == "fail":
                assert {"CompensationStarted", "RunFailed"} & set(types)
            elif action == "enter":
                step = args["step"]
                assert any(getattr(e.data, "step", None) == step for e in after) or (
                    step is None and "RunCompleted" in types
                ), (item, types)
        if deferred:
            assert self.s.paused is None

    def _steps(self, likely: str | None) -> st.SearchStrategy[str]:
        """Any step id of the current version (and a made-up one), `likely` three times as often."""
        ids = [*sorted(self.d.index), "nope"]
        return st.sampled_from([*([likely] * 3 if likely else []), *ids])

    def _here(self) -> str | None:
        s = self.s
        return s.current_step if s.attention is None else s.attention["step"]

    # --- start --------------------------------------------------------------------------------------

    @initialize(customer=st.booleans(), qty=st.sampled_from([None, 1, 3]))
    def start(self, customer: bool, qty: int | None) -> None:
        payload: dict[str, Any] = {"sku": "S-1"}
        if customer:
            payload["customer"] = "c-0"
        if qty is not None:
            payload["qty"] = qty
        events = self.send(StartRun(run_id=RUN, tenant="acme", version=1, input=payload))
        assert events is not None
        assert [e.type for e in events][:2] == ["RunStarted", "ActivityScheduled"]

    # --- normal traffic -----------------------------------------------------------------------------

    @precondition(lambda self: self.s.active is not None and self.s.active.fencing is None)
    @rule(worker=st.sampled_from(["w1", "w2"]))
    def claim_active(self, worker: str) -> None:
        a = self.s.active
        assert a is not None
        assert self.s.paused is None, "a paused run has no queued attempt (pause withdrew it)"
        deadline = iso(self.now + timedelta(milliseconds=a.timeout_ms))
        events = self.send(ClaimTask(task_id=a.task_id, worker=worker, deadline=deadline))
        assert events is not None
        assert [e.type for e in events] == ["ActivityStarted"]

    @rule(data=st.data())
    def claim_other(self, data: st.DataObject) -> None:
        """Claims of withdrawn, finished or made-up tasks are refused (and append nothing)."""
        task = data.draw(st.sampled_from([*self.scheduled, f"{RUN}/nope/a1-9"]))
        a = self.s.active
        wanted = not self.s.terminal and a is not None and a.fencing is None and a.task_id == task
        events = self.send(ClaimTask(task_id=task, worker="w9", deadline=iso(self.now)))
        assert (events is not None) == wanted

    @rule(data=st.data(), success=st.booleans(), output=OUTPUTS, code=CODES)
    def report(self, data: st.DataObject, success: bool, output: Any, code: str) -> None:
        """Any report: the current attempt's is applied, every other one is recorded as ResultIgnored."""
        a = self.s.active
        candidates = list(self.leases)
        if a is not None and a.fencing is not None:
            candidates += [(a.task_id, a.attempt, a.fencing)] * 3 + [(a.task_id, a.attempt, a.fencing - 1)]
        if a is not None:
            candidates.append((a.task_id, a.attempt, 1))
        if not candidates:
            return
        task, attempt, fencing = data.draw(st.sampled_from(candidates))
        cmd: ReportSuccess | ReportFailure
        if success:
            cmd = ReportSuccess(task_id=task, attempt=attempt, fencing=fencing, output=output)
        else:
            cmd = ReportFailure(
                task, attempt, fencing, code, "m", data.draw(st.booleans()), data.draw(st.booleans())
            )
        current = self.is_current(task, attempt, fencing)
        bounded = evidence_full(self.s, task)
        events = self.send(cmd)
        if bounded and not current:
            assert events is None, "past the bound a stale report is answered as ignored, not appended"
            return
        assert events is not None, "results are never refused: applied, or recorded as ignored"
        if current:
            assert events[0].type == ("ActivitySucceeded" if success else "ActivityFailed")
            self.last_report = cmd
        else:
            assert [e.type for e in events] == ["ResultIgnored"]

    def _progress(self, data: st.DataObject) -> None:
        """What a healthy world and a helpful operator do next, so runs also get far and finish."""
        s, a = self.s, self.s.active
        if s.paused is not None and data.draw(st.booleans()):
            self.resume("back to normal")
        elif s.attention is not None:
            att = s.attention
            how = data.draw(st.sampled_from(["resolve", "retry", "skip"]))
            if how == "resolve":
                self.resolve(data, "succeeded", {"checked": True}, "checked downstream", step=att["step"])
            elif how == "retry":
                self.retry(data, False, "try again", step=att["step"])
            else:
                self.skip(data, ("operator", "admin"), None, "not needed", step=att["step"])
        elif a is not None and a.fencing is None:
            self.claim_active(worker="w1")
        elif a is not None:
            outcome = data.draw(st.sampled_from(["success", "success", "success", "failure", "expire"]))
            if outcome == "expire":
                events = self.send(ExpireLease(a.task_id, a.attempt, a.fencing or 0, "lease expired"))
                assert events is not None
                assert events[0].type == "ActivityTimedOut"
                return
            report: ReportSuccess | ReportFailure = (
                ReportSuccess(a.task_id, a.attempt, a.fencing or 0, data.draw(OUTPUTS))
                if outcome == "success"
                else ReportFailure(a.task_id, a.attempt, a.fencing or 0, data.draw(CODES), "m", True, True)
            )
            events = self.send(report)
            assert events is not None
            self.last_report = report
        elif s.approval is not None and data.draw(st.sampled_from([True, True, True, False])):
            self.decide_approval("alice", data.draw(st.sampled_from(["approve", "approve", "reject"])))
        elif s.timers:
            self.fire_armed(data)

    # Copies so the happy path stays likely under Hypothesis' swarm testing (rules are sampled).
    @precondition(lambda self: not self.s.terminal)
    @rule(data=st.data())
    def progress_a(self, data: st.DataObject) -> None:
        self._progress(data)

    @precondition(lambda self: not self.s.terminal)
    @rule(data=st.data())
    def progress_b(self, data: st.DataObject) -> None:
        self._progress(data)

    @precondition(lambda self: not self.s.terminal)
    @rule(data=st.data())
    def progress_c(self, data: st.DataObject) -> None:
        self._progress(data)

    @precondition(lambda self: not self.s.terminal)
    @rule(data=st.data())
    def progress_d(self, data: st.DataObject) -> None:
        self._progress(data)

    @precondition(lambda self: self.last_report is not None)
    @rule()
    def duplicate_report(self) -> None:
        assert self.last_report is not None
        before = self.s
        bounded = evidence_full(before, self.last_report.task_id)
        events = self.send(self.last_report)
        if bounded:
            assert events is None, "past the bound a stale report is answered as ignored, not appended"
            return
        assert events is not None
        assert [e.type for e in events] == ["ResultIgnored"]
        assert self.s.steps == before.steps

    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        a = self.s.active
        candidates = list(self.leases)
        if a is not None and a.fencing is not None:
            candidates += [(a.task_id, a.attempt, a.fencing)] * 2
        if not candidates:
            return
        task, attempt, fencing = data.draw(st.sampled_from(candidates))
        current = self.is_current(task, attempt, fencing)
        events = self.send(ExpireLease(task_id=task, attempt=attempt, fencing=fencing, reason="expired"))
        assert (events is not None) == current

    @precondition(lambda self: bool(self.s.timers))
    @rule(data=st.data())
    def fire_armed(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.s.timers)))
        t = self.s.timers[key]
        self.now = max(self.now, parse_iso(t.fire_at))
        events = self.send(FireTimer(key=key, generation=t.generation))
        assert events is not None
        assert events[0].type == "TimerFired"

    @rule(data=st.data())
    def fire_stale(self, data: st.DataObject) -> None:
        candidates = [*self.spent_timers, ("wait:nope", 1)]
        candidates += [(t.key, t.generation + 1) for t in self.s.timers.values()]
        key, generation = data.draw(st.sampled_from(candidates))
        armed = self.s.timers.get(key)
        if armed is not None and armed.generation == generation:
            return
        assert self.send(FireTimer(key=key, generation=generation)) is None

    @rule(
        approver=st.sampled_from(["alice", "alice", "mallory"]),
        decision=st.sampled_from(["approve", "reject"]),
    )
    def decide_approval(self, approver: str, decision: str) -> None:
        a = self.s.approval
        rid = a["request_id"] if a is not None else f"{RUN}/approve/r1"
        wanted = (
            not self.s.terminal
            and a is not None
            and self.s.cancel is None
            and approver == "alice"
            and not any(x["approver"] == approver for x in a["decisions"])
        )
        events = self.send(DecideApproval(rid, approver, decision, None, ("approver",), ()))
        assert (events is not None) == wanted

    @rule(go=st.integers(min_value=0, max_value=5))
    def cancel(self, go: int) -> None:
        if go != 0:
            return
        before = self.s
        events = self.send(CancelRun(reason="customer asked", actor="ops"))
        if before.terminal or (before.cancel is None and before.compensating is not None):
            assert events is None
        elif before.cancel is not None:
            assert events == []
        else:
            assert events is not None
            assert events[0].type == "CancelRequested"
            assert self.s.paused is None, "cancelling resumes a paused run for the cancellation"

    @rule(seconds=st.sampled_from([0.5, 2, 7, 3600]))
    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    # --- operator repair ----------------------------------------------------------------------------

    def _refused_when_terminal(self, events: list[Event] | None, before: RunState) -> bool:
        if before.terminal:
            assert events is None, "no command applies to a terminal run"
            return True
        return False

    @rule(reason=REASONS)
    def pause(self, reason: str) -> None:
        before = self.s
        events = self.send(PauseRun(reason, "op"))
        if self._refused_when_terminal(events, before):
            return
        wanted = bool(reason.strip()) and before.paused is None and before.cancel is None
        wanted = wanted and before.compensating is None
        assert (events is not None) == wanted, (reason, before.status)
        if events is None:
            return
        assert events[0].type == "RunPaused"
        assert self.s.paused is not None
        assert self.s.active is None or self.s.active.fencing is not None, "a queued attempt is withdrawn"
        a = before.active
        if a is not None and a.fencing is None:
            cancelled = events[1]
            assert cancelled.type == "ActivityCancelled"
            assert cancelled.data.rescheduled is True
            assert cancelled.data.task_id == a.task_id
            assert events[2].type == "TransitionDeferred"

    @rule(reason=REASONS)
    def resume(self, reason: str) -> None:
        before = self.s
        events = self.send(ResumeRun(reason, "op"))
        if self._refused_when_terminal(events, before):
            return
        assert (events is not None) == (bool(reason.strip()) and before.paused is not None)
        if events is not None:
            assert events[0].type == "RunResumed"
            assert self.s.paused is None

    def _known_bug(self, command: Command) -> str | None:
        """Interleavings to steer around while a bug is open (none at the moment)."""
        return None

    @rule(data=st.data(), roles=ROLES, output=OUTPUTS, reason=REASONS)
    def skip(
        self, data: st.DataObject, roles: tuple[str, ...], output: Any, reason: str, step: str | None = None
    ) -> None:
        before = self.s
        here = self._here()
        if step is None:
            step = data.draw(self._steps(here))
        cmd = SkipStep(step, reason, output, "op", roles)
        if self._known_bug(cmd):
            return
        events = self.send(cmd)
        if self._refused_when_terminal(events, before):
            return
        allowed = self.d.skip_roles.get(step)
        a = before.active
        wanted = (
            bool(reason.strip())
            and step == here
            and allowed is not None
            and bool(set(roles) & set(allowed))
            and before.compensating is None
            and before.cancel is None
            and not (a is not None and a.step == step and a.fencing is not None)
            # a pending approval ends only by its policy or a cancel, even where the step is skippable
            and not (before.approval is not None and before.approval["step"] == step)
        )
        assert (events is not None) == wanted, (step, here, roles, before.status)
        if events is None:
            return
        skipped = next(e for e in events if e.type == "StepSkipped")
        assert skipped.data.output == output
        assert skipped.data.before["status"] == before.steps[step].status
        assert self.s.attention is None
        assert self.s.steps[step].status == "skipped" or self.s.current_step == step

    @rule(value=INPUTS, reason=REASONS)
    def edit_input(self, value: Any, reason: str) -> None:
        before = self.s
        events = self.send(EditInput(value, reason, "op"))
        if self._refused_when_terminal(events, before):
            return
        # Refused while an approval is pending or after one was granted (approvers saw the old input).
        unapproved = before.approval is None and not granted_approvals(before)
        assert (events is not None) == (bool(reason.strip()) and _input_ok(self.d, value) and unapproved)
        if events is not None:
            assert [e.type for e in events] == ["InputEdited"]
            assert events[0].data.old == before.input
            assert events[0].data.new == value
            assert self.s.input == value

    @rule(
        data=st.data(),
        outcome=st.sampled_from(["succeeded", "succeeded", "failed", "maybe"]),
        output=OUTPUTS,
        reason=REASONS,
    )
    def resolve(
        self, data: st.DataObject, outcome: str, output: Any, reason: str, step: str | None = None
    ) -> None:
        before = self.s
        att = before.attention
        if step is None:
            step = data.draw(self._steps(att["step"] if att else None))
        events = self.send(ResolveStep(step, outcome, reason, output, "op"))
        if self._refused_when_terminal(events, before):
            return
        wanted = (
            bool(reason.strip())
            and att is not None
            and att["step"] == step
            and att["code"] in ("outcome_unknown", "dead_letter", "compensation_failed")
            and outcome in ("succeeded", "failed")
            and not (att["code"] == "compensation_failed" and outcome == "failed")
        )
        assert (events is not None) == wanted, (step, outcome, att)
        if events is not None:
            assert events[0].type == "StepResolved"
            assert events[0].data.outcome == outcome
            assert self.s.attention is None

    @rule(data=st.data(), new_key=st.booleans(), reason=REASONS)
    def retry(self, data: st.DataObject, new_key: bool, reason: str, step: str | None = None) -> None:
        before = self.s
        att = before.attention
        if step is None:
            step = data.draw(self._steps(att["step"] if att else None))
        events = self.send(RetryStep(step, reason, "op", new_key))
        if self._refused_when_terminal(events, before):
            return
        wanted = (
            bool(reason.strip())
            and att is not None
            and att["step"] == step
            and att["code"] in RETRYABLE_ATTENTION
        )
        assert (events is not None) == wanted, (step, att)
        if events is None:
            return
        assert events[0].type == "StepRetried"
        assert events[0].data.new_key is new_key
        scheduled = [e for e in events if e.type == "ActivityScheduled"]
        if scheduled and not new_key:
            assert scheduled[0].data.idempotency_key == before.steps[step].idempotency_key
        if scheduled and new_key:
            assert scheduled[0].data.idempotency_key != before.steps[step].idempotency_key

    @rule(data=st.data(), version=st.sampled_from([1, 2, 2, 3, 4]), reason=REASONS)
    def migrate(self, data: st.DataObject, version: int, reason: str) -> None:
        before = self.s
        current = before.definition["version"]
        maps: list[tuple[tuple[str, str], ...]] = [()]
        if version == 4 and current != 4:
            maps.append((("ship", "dispatch"),))
        if current == 4 and version != 4:
            maps.append((("dispatch", "ship"),))
        mapping = data.draw(st.sampled_from(maps))
        target = VERSIONS[version]
        cmd = MigrateRun(target, version, mapping, reason, "op")
        if self._known_bug(cmd):
            return
        events = self.send(cmd)
        if self._refused_when_terminal(events, before):
            return
        plan = plan_migration(before, VERSIONS[current], target, dict(mapping))
        wanted = bool(reason.strip()) and version != current and not plan["problems"]
        assert (events is not None) == wanted, (current, version, mapping, plan["problems"])
        if events is None:
            return
        migrated = next(e for e in events if e.type == "WorkflowMigrated")
        assert migrated.data.previous == before.definition
        assert migrated.data.definition == {"name": "rep", "version": version, "digest": target.digest}
        assert migrated.data.steps_added == plan["steps_added"]
        assert self.s.definition["version"] == version
        if version == 3:
            assert "reserve" not in before.completed, "v3 cannot undo reserve: must have been refused"
        a = before.active
        if a is not None:
            # an attempt in flight is withdrawn; its late result will be ResultIgnored
            assert any(e.type == "ActivityCancelled" and e.data.task_id == a.task_id for e in events)
            assert self.s.active is None or self.s.active.task_id != a.task_id

    # --- invariants ---------------------------------------------------------------------------------

    @invariant()
    def steps_belong_to_the_current_version(self) -> None:
        if self.state is None:
            return
        s, d = self.s, self.d
        assert set(s.steps) == set(d.index), (sorted(s.steps), sorted(d.index))
        assert s.current_step is None or s.current_step in d.index
        if s.attention is not None:
            assert s.attention["step"] in d.index
        if s.approval is not None:
            assert s.approval["step"] in d.index
        for item in (s.paused or {}).get("deferred", []):
            step = item["args"].get("step")
            assert step is None or step in d.index, item

    @invariant()
    def status_is_consistent(self) -> None:
        if self.state is None:
            return
        s = self.s
        if s.terminal:
            check_finished(s)  # incl. "a run cannot end while paused"
            return
        check_not_stuck(s)  # never stuck silently; waiting means a timer and no attempt
        if s.paused is not None:
            assert s.status in ("paused", "needs_attention")
            assert s.active is None or s.active.fencing is not None, "nothing queued while paused"

    @invariant()
    def explain_matches_status(self) -> None:
        if self.state is None:
            return
        info = check_explained(self.s, self.now)
        if not self.s.terminal and self.s.paused is not None and self.s.attention is None:
            assert info["wait_kind"] == "paused"
            assert "resume" in info["next_action"]


RepairMachine.TestCase.settings = settings(
    max_examples=250,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestRepairMachine = RepairMachine.TestCase
TestRepairMachine.__doc__ = "Random repair commands amid normal traffic keep every core invariant."


# --- bugs the machine found (pinned; the machine avoids exactly these interleavings) -----------------


def test_skip_while_paused_does_not_reschedule_the_skipped_step() -> None:
    """A queued attempt withdrawn by pause, then skipped: resume moves on once, to the next step."""
    r = Drive()
    r.send(PauseRun("hold", "op"))
    assert r.types(3) == ["RunPaused", "ActivityCancelled", "TransitionDeferred"]
    r.send(SkipStep("reserve", "done by hand", {"manual": True}, "op", ("admin",)))
    r.send(ResumeRun("go on", "op"))
    after = r.types()[r.types().index("RunResumed") + 1 :]
    assert after == ["ActivityScheduled"], after
    assert r.s.active is not None
    assert r.s.active.step == "charge"
    assert len(r.open_tasks()) == 1, r.open_tasks()


def test_skip_while_paused_after_the_wait_fired_enters_the_next_step_once() -> None:
    """The cool-off fires while paused, then is skipped: resume requests the approval exactly once."""
    r = Drive()
    r.run_activity()
    r.run_activity()
    r.send(PauseRun("hold", "op"))
    r.fire("wait:cool")
    r.send(SkipStep("cool", "not needed", None, "op", ("operator",)))
    r.send(ResumeRun("go on", "op"))
    assert r.types().count("ApprovalRequested") == 1, r.types(8)


def test_skip_while_paused_after_a_final_failure_does_not_complete_a_compensating_run() -> None:
    """ship fails for good while paused and is skipped: the run must not end completed mid-compensation."""
    r = Drive()
    r.to_approval()
    r.approve()
    r.claim()
    r.send(PauseRun("hold", "op"))
    r.fail(retryable=False)
    r.send(SkipStep("ship", "not needed", None, "op", ("operator",)))  # refusing it would be fine
    r.send(ResumeRun("go on", "op"))
    assert not (r.s.status == "completed" and r.s.active is not None), (r.types(6), r.s.active)
    assert r.s.status != "completed" or not r.open_tasks()


def test_migrate_with_map_while_paused_then_resume_schedules_the_renamed_step() -> None:
    """Paused with ship withdrawn, migrated to v4 (ship -> dispatch): resume schedules dispatch."""
    r = Drive()
    r.to_approval()
    r.approve()
    r.send(PauseRun("hold", "op"))  # withdraws the queued ship attempt
    r.send(MigrateRun(VERSIONS[4], 4, (("ship", "dispatch"),), "rename", "op"))
    r.send(ResumeRun("go on", "op"))
    assert r.s.active is not None
    assert r.s.active.step == "dispatch"


def test_migrate_while_paused_to_a_version_without_the_deferred_step() -> None:
    """On v2, notify is held back by a pause; moving to v1 (no notify) is refused or resume moves on."""
    r = Drive(version=2)
    r.to_approval()
    r.send(PauseRun("hold", "op"))
    r.approve()  # approval granted while paused: enter(notify) is deferred
    try:
        r.send(MigrateRun(VERSIONS[1], 1, (), "back to v1", "op"))
    except Rejected:
        return  # refusing the move is a correct answer
    r.send(ResumeRun("go on", "op"))
    assert r.s.active is not None
    assert r.s.active.step == "ship"


def test_migrate_with_map_moves_attention_to_the_new_step_id() -> None:
    """A dead-lettered ship migrated to v4 as dispatch can be resolved as dispatch."""
    r = Drive()
    r.to_approval()
    r.approve()
    r.claim()
    r.fail()
    r.fire("retry:ship")
    r.claim()
    r.fail()
    assert r.s.attention is not None
    assert r.s.attention["code"] == "dead_letter"
    r.send(MigrateRun(VERSIONS[4], 4, (("ship", "dispatch"),), "rename", "op"))
    assert r.s.attention is not None
    assert r.s.attention["step"] == "dispatch"
    r.send(ResolveStep("dispatch", "succeeded", "shipped by hand", {"ok": True}, "op"))
    assert r.s.status == "completed"


def test_resume_after_migration_runs_the_step_the_target_adds() -> None:
    """Approval granted while paused, then migrated to v2: resume runs v2's notify before ship."""
    r = Drive()
    r.to_approval()
    r.send(PauseRun("hold", "op"))
    r.approve()
    plan = plan_migration(r.s, VERSIONS[1], VERSIONS[2], {})
    assert plan["steps_added"] == ["notify"]
    assert not plan["problems"]
    r.send(MigrateRun(VERSIONS[2], 2, (), "add notify", "op"))
    r.send(ResumeRun("go on", "op"))
    assert r.s.active is not None
    assert r.s.active.step == "notify"
