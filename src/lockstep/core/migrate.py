"""Moving a running run to another version of its definition (WorkflowMigrated).

The run keeps its history; the event records both versions and the step mapping. What cannot be carried
safely is refused with the reasons (a dry run shows the same plan without appending anything): a
completed step whose compensation the target version no longer has, a current step with no counterpart,
an input the target's schema refuses, an at-most-once attempt in flight.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from msgspec import UNSET

from .canonical import JSONObject
from .commands import MigrateRun, Rejected
from .definition import ActivityStep, ApprovalStep, Definition, DefinitionError, WaitStep
from .events import WorkflowMigrated
from .flow import Tx, cancel_timers, continue_run, enter, withdraw
from .migapproval import check_granted, migration_policy
from .state import RunState

__all__ = ["Plan", "VersionRef", "migrate", "plan_migration"]


class VersionRef(TypedDict):
    name: str
    digest: str
    version: NotRequired[int]


# The keys are JSON's ("from" is a keyword here), hence the functional form.
Plan = TypedDict(
    "Plan",
    {
        "from": JSONObject,  # the run's definition version ({name, version, digest})
        "to": VersionRef,
        "mapping": dict[str, str],
        "steps_added": list[str],
        "steps_removed": list[str],
        "current_step": dict[str, str | None],  # {"from": step, "to": step}
        "carried": list[str],
        "restart": str | None,
        "problems": list[str],
        # Set by the caller that answers with the plan.
        "run_id": NotRequired[str],
        "ok": NotRequired[bool],
        "dry_run": NotRequired[bool],
    },
)


def plan_migration(s: RunState, current: Definition, target: Definition, mapping: dict[str, str]) -> Plan:
    """What a migration would do: step mapping, added/removed steps, carried waits, problems."""

    def m(x: str) -> str:
        return mapping.get(x, x)

    problems: list[str] = []
    for old, new in mapping.items():
        if old not in current.index:
            problems.append(f"--map {old}={new}: the current version has no step {old}")
        if new not in target.index:
            problems.append(f"--map {old}={new}: version has no step {new}")
    try:
        target.check_input(s.input, also_sensitive=current.sensitivity.input)
    except DefinitionError as exc:
        problems.append(f"the run's input does not fit the target input_schema ({exc})")
    for sid in s.completed:
        t = m(sid)
        step = target.step(t) if target.has_step(t) else None
        if not isinstance(step, ActivityStep) or step.compensate is None:
            problems.append(
                f"completed step {sid} has a compensation but the target has no compensable step {t}: "
                f"a later failure or cancel could not undo it"
            )
    if s.compensating is not None or s.cancel is not None:
        problems.append("the run is being cancelled or compensated")
    problems += _shape_problems(s, current, target, mapping)
    cur = s.approval["step"] if s.approval else s.current_step
    if s.approval is not None and not s.terminal:
        problems += _approval_problems(s.approval, mapping, target)
    carried: list[str] = []
    restart = None
    if cur is not None and not s.terminal:
        new = m(cur)
        if new not in target.index:
            problems.append(f"the current step {cur} has no counterpart in the target (add --map {cur}=STEP)")
        else:
            kind_old, kind_new = current.step(cur), target.step(new)
            a = s.active
            if a is not None and a.fencing is not None and a.delivery == "at_most_once":
                problems.append(f"an at-most-once attempt of {cur} is in flight; wait for its outcome first")
            if cur in s.groups and s.steps[cur].status == "running":
                carried.append(f"{kind_old.kind} step {cur}, with its lanes, unchanged")
            elif s.approval is not None and isinstance(kind_new, ApprovalStep) and new == cur:
                carried.append(f"approval request {s.approval['request_id']} of {cur}")
            elif (
                any(t.kind == "wait" and t.step == cur for t in s.timers.values())
                and isinstance(kind_new, WaitStep)
                and new == cur
            ):
                carried.append(f"wait timer of {cur}")
            elif a is not None or s.approval is not None or any(t.step == cur for t in s.timers.values()):
                restart = new
                if type(kind_old) is not type(kind_new):
                    carried.append(f"{cur} ({kind_old.kind}) restarts as {new} ({kind_new.kind})")
    old_ids, new_ids = set(current.index), set(target.index)
    return {
        "from": s.definition,
        "to": {"name": target.name, "digest": target.digest},
        "mapping": {sid: m(sid) for sid in current.index if m(sid) in new_ids},
        "steps_added": sorted(new_ids - {m(x) for x in old_ids}),
        "steps_removed": sorted(x for x in old_ids if m(x) not in new_ids),
        "current_step": {"from": cur, "to": m(cur) if cur else None},
        "carried": carried,
        "restart": restart,
        "problems": problems,
    }


def _shape_problems(
    s: RunState, current: Definition, target: Definition, mapping: dict[str, str]
) -> list[str]:
    """A run inside a parallel or for-each step keeps that step as it is: its lanes were opened, and its
    branches or body are being run, by the current version. The target may carry it only unchanged
    (the same step, with the same id, its document identical)."""
    if s.children and not s.terminal:
        key, child = next(iter(sorted(s.children.items())))
        return [
            f"step {key} waits for child run {child['child_run_id']}, started by the current version: "
            "migrate once it has ended"
        ]
    if s.event_waits and not s.terminal:
        key, w = next(iter(sorted(s.event_waits.items())))
        return [
            f"step {key} waits for event {w['name']} (key {w['key']}), started by the current version: "
            "migrate once it has arrived or timed out"
        ]
    cur = s.current_step
    if s.terminal or cur is None or cur not in s.groups or s.steps[cur].status != "running":
        return []
    why = f"the run is inside {current.step(cur).kind} step {cur}, whose lanes run by the current version"
    if mapping.get(cur, cur) != cur:
        return [f"{why}: --map {cur}={mapping[cur]} would move it onto another step"]
    if _raw_step(current.document, cur) != _raw_step(target.document, cur):
        return [
            f"{why}: the target changes (or drops) step {cur}, and a migration never changes a shape a run "
            f"is inside; migrate once the step is over, or publish a target with {cur} unchanged"
        ]
    return []


def _raw_step(document: JSONObject, step_id: str) -> JSONObject | None:
    for raw in document.get("steps") or ():
        if isinstance(raw, dict) and raw.get("id") == step_id:
            return raw
    return None


def _approval_problems(a: JSONObject, mapping: dict[str, str], target: Definition) -> list[str]:
    """A pending approval ends only by its policy or by cancelling the run: a migration may carry it
    (same step id, still an approval step; its recorded policy keeps governing it, decisions included)
    but never map it onto another step or drop it."""
    step, rid = a["step"], a["request_id"]
    why = f"the run waits for approval request {rid} at {step}, which only its policy or a cancel can end"
    out = []
    if mapping.get(step, step) != step:
        out.append(f"{why}: --map {step}={mapping[step]} would move it onto another step")
    onto = [old for old, new in mapping.items() if new == step and old != step]
    if onto:
        out.append(f"{why}: --map {onto[0]}={step} would replace it")
    kind = target.step(step) if step in target.index else None
    if not isinstance(kind, ApprovalStep):
        out.append(f"{why}: the target has no approval step {step} to carry it")
    policy = a["policy"]
    for field in ("on_reject", "on_timeout"):
        nxt = policy[field]
        if nxt not in ("fail", "reject", "end") and nxt not in target.index:
            out.append(f"{why}: its recorded {field} goes to step {nxt}, which the target does not have")
    return out


def migrate(tx: Tx, c: MigrateRun) -> None:
    s = tx.s
    target: Definition = c.target
    if s.terminal:
        raise Rejected("terminal", f"the run is already {s.status}; there is nothing to migrate")
    if not c.reason.strip():
        raise Rejected("reason_required", "a migration needs a reason")
    if target.name != s.definition["name"]:
        raise Rejected(
            "other_definition",
            f"version {c.target_version} belongs to {target.name}, not {s.definition['name']}",
        )
    if c.target_version == s.definition["version"]:
        raise Rejected("same_version", f"the run is already on version {c.target_version}")
    policy = migration_policy(tx.d, s.definition["version"], target, c.target_version)
    if policy is not None:
        if c.request_id is None:
            raise Rejected(
                "approval_required",
                f"a migration to version {c.target_version} needs approval (migration: requires_approval "
                f"of version {policy['version']}): it is asked for, not applied",
            )
        check_granted(policy, c.request_id, list(c.decisions), c.actor)
    mapping = dict(c.mapping)
    plan = plan_migration(s, tx.d, target, mapping)
    if plan["problems"]:
        raise Rejected("incompatible", "; ".join(plan["problems"]))
    restart = plan["restart"]
    if restart is not None:
        cur = plan["current_step"]["from"]
        a = s.active
        if a is not None:
            withdraw(tx, a, f"run migrated to version {c.target_version}; a late result is ignored")
        if tx.s.approval is not None:  # pragma: no cover - plan_migration refuses it (_approval_problems)
            raise Rejected("approval_pending", "a migration never ends a pending approval request")
        cancel_timers(tx, f"run migrated to version {c.target_version}", cur)
    held = list(s.paused["deferred"]) if s.paused is not None else []
    tx.emit(
        WorkflowMigrated(
            previous=dict(s.definition),
            superseded=held,
            definition={"name": target.name, "version": c.target_version, "digest": target.digest},
            mapping=plan["mapping"],
            steps=[st.id for st in target.steps],
            carried=plan["carried"],
            steps_added=plan["steps_added"],
            steps_removed=plan["steps_removed"],
            reason=c.reason,
            actor=c.actor,
            request_id=UNSET if c.request_id is None else c.request_id,
            decisions=UNSET if c.request_id is None else [dict(d) for d in c.decisions],
        )
    )
    tx.d = target
    if restart is not None:
        enter(tx, restart)
    elif held:
        continue_run(tx)  # recompute, in the new version, what the pause had held back
