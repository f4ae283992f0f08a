"""Operator repair and version upgrades (service layer): each is one audited state-machine command with a
reason and an actor; the run's history records the state before and after."""

from __future__ import annotations

from ..core.canonical import JSONValue, digest
from ..core.commands import (
    Command,
    ConfirmRepair,
    EditInput,
    MigrateRun,
    PauseRun,
    RejectRepair,
    ResolveStep,
    ResumeRun,
    SkipStep,
)
from ..core.events import Event
from ..core.migapproval import migration_policy
from ..core.migrate import plan_migration
from ..core.state import RunState
from ..errors import InvalidInput, NotFound, Refused
from ..store import RepairTx
from .audit import Audit
from .migrations import Migrations
from .port import KernelPort
from .runs import Runs
from .views import BulkMigration, MigrationOutcome, MigrationPlan, RepairResult

__all__ = ["Repairs"]


def _reason(reason: str) -> str:
    if not reason or not reason.strip():
        raise InvalidInput("a reason is required (--reason TEXT); it is recorded in the run's history")
    return reason.strip()


class Repairs:
    def __init__(self, kernel: KernelPort[RepairTx], runs: Runs) -> None:
        self.kernel = kernel
        self.runs = runs
        self.audit = Audit(kernel)  # every repair is audited, in the transaction of its command
        # Migrations that need approval: `migrate` asks them for a request instead (set by the Service).
        self.approvals: Migrations | None = None

    def _done(self, run_id: str, state: RunState, events: list[Event]) -> RepairResult:
        out: dict[str, JSONValue] = {
            "run_id": run_id,
            "status": state.status,
            "events": [e.type for e in events],
        }
        if any(e.type == "RepairProposed" for e in events):
            # Four-eyes: nothing ran yet; a second operator confirms (or anyone rejects) the proposal.
            out["proposal"] = state.proposal
        return RepairResult(**out)

    def confirm(
        self,
        tenant: str,
        run_id: str,
        proposal_id: str,
        reason: str,
        *,
        actor: str | None = None,
        roles: tuple[str, ...] = ("operator",),
    ) -> RepairResult:
        """A second operator confirms a four-eyes proposal: its command runs now, checked again."""
        state = self.kernel.state(tenant, run_id)
        p = state.proposal
        target = None
        if p is not None and p["proposal_id"] == proposal_id and p["kind"] == "migrate":
            version = int(p["command"]["to_version"])
            with self.kernel.read() as tx:
                target = self.kernel.definition_for(tx, tenant, state.definition["name"], version)
        cmd = ConfirmRepair(proposal_id, _reason(reason), actor, roles, target)
        return self._command(tenant, run_id, cmd, "repair.confirm", actor, proposal_id=proposal_id)

    def reject(
        self, tenant: str, run_id: str, proposal_id: str, reason: str, *, actor: str | None = None
    ) -> RepairResult:
        """Reject a four-eyes proposal (the proposer's own rejection is recorded as a withdrawal)."""
        cmd = RejectRepair(proposal_id, _reason(reason), actor)
        return self._command(tenant, run_id, cmd, "repair.reject", actor, proposal_id=proposal_id)

    def pause(self, tenant: str, run_id: str, reason: str, actor: str | None = None) -> RepairResult:
        return self._command(tenant, run_id, PauseRun(_reason(reason), actor), "repair.pause", actor)

    def resume(self, tenant: str, run_id: str, reason: str, actor: str | None = None) -> RepairResult:
        return self._command(tenant, run_id, ResumeRun(_reason(reason), actor), "repair.resume", actor)

    def skip(
        self,
        tenant: str,
        run_id: str,
        step: str,
        reason: str,
        *,
        output: JSONValue = None,
        actor: str | None = None,
        roles: tuple[str, ...] = ("operator",),
    ) -> RepairResult:
        self._json(output, "--output")
        self.kernel.check_value(tenant, output, "max_output_bytes", "--output", "output")
        cmd = SkipStep(step, _reason(reason), output, actor, roles)
        return self._command(tenant, run_id, cmd, "repair.skip", actor, step=step)

    def edit_input(
        self, tenant: str, run_id: str, new_input: JSONValue, reason: str, actor: str | None = None
    ) -> RepairResult:
        self._json(new_input, "--input")
        self.kernel.check_value(tenant, new_input, "max_input_bytes", "the new input", "input")
        cmd = EditInput(new_input, _reason(reason), actor)
        return self._command(tenant, run_id, cmd, "repair.edit_input", actor)

    def resolve(
        self,
        tenant: str,
        run_id: str,
        step: str,
        outcome: str,
        reason: str,
        *,
        output: JSONValue = None,
        actor: str | None = None,
    ) -> RepairResult:
        if outcome not in ("succeeded", "failed"):
            raise InvalidInput("--as must be succeeded or failed")
        self._json(output, "--output")
        self.kernel.check_value(tenant, output, "max_output_bytes", "--output", "output")
        cmd = ResolveStep(step, outcome, _reason(reason), output, actor)
        return self._command(tenant, run_id, cmd, "repair.resolve", actor, step=step, outcome=outcome)

    def migrate(
        self,
        tenant: str,
        run_id: str,
        to_version: int,
        reason: str,
        *,
        mapping: dict[str, str] | None = None,
        dry_run: bool = False,
        actor: str | None = None,
    ) -> MigrationPlan:
        """Move a run to another version; with dry_run, explain what would happen and change nothing."""
        self.kernel.check_value(tenant, mapping or {}, "max_payload_bytes", "the step map", "map")
        state = self.kernel.state(tenant, run_id)
        name = state.definition["name"]
        with self.kernel.read() as tx:
            current = self.kernel.definition_for(tx, tenant, name, state.definition["version"])
            if tx.definition(tenant, name, to_version) is None:
                raise NotFound(f"definition {name} has no version {to_version} in tenant {tenant}")
            target = self.kernel.definition_for(tx, tenant, name, to_version)
            # Planned on the clear state: the target's input_schema checks the input, not its markers.
            loaded = tx.load_run(run_id)
            clear = loaded.state if loaded is not None else state
        plan = plan_migration(clear, current, target, mapping or {})
        plan["to"]["version"] = to_version
        plan["run_id"] = run_id
        if to_version == state.definition["version"]:
            plan["problems"] = [*plan["problems"], f"the run is already on version {to_version}"]
        if state.terminal:
            plan["problems"] = [*plan["problems"], f"the run is already {state.status}"]
        if dry_run:
            plan["ok"] = not plan["problems"]
            plan["dry_run"] = True
            return MigrationPlan.model_validate(plan)
        refusal = None
        if state.terminal:
            refusal = Refused(
                f"the run is already {state.status}; there is nothing to migrate", code="terminal"
            )
        elif to_version == state.definition["version"]:
            refusal = Refused(f"the run is already on version {to_version}", code="same_version")
        elif plan["problems"]:
            refusal = Refused("migration refused: " + "; ".join(plan["problems"]), code="incompatible")
        if refusal is not None:
            self.audit.refused(tenant, actor, "repair.migrate", run_id, refusal.code, to_version=to_version)
            raise refusal
        policy = migration_policy(current, state.definition["version"], target, to_version)
        if policy is not None:
            # Asked for, not applied: the approvers decide (app/migrations/), never this operator.
            request = self._asked().ask(
                tenant, [state], target, to_version, policy, mapping or {}, _reason(reason), actor, bulk=False
            )
            return MigrationPlan.model_validate({**plan, "ok": True, "dry_run": False, "request": request})
        cmd = MigrateRun(target, to_version, tuple(sorted((mapping or {}).items())), _reason(reason), actor)
        done = self._command(tenant, run_id, cmd, "repair.migrate", actor, to_version=to_version)
        made = {
            "ok": True,
            "dry_run": False,
            "status": done.status,
            "events": done.events,
            "proposal": done.proposal,
        }
        return MigrationPlan.model_validate({**plan, **made})

    def migrate_many(
        self,
        tenant: str,
        definition: str,
        from_version: int,
        to_version: int,
        reason: str,
        *,
        status: str | None = None,
        mapping: dict[str, str] | None = None,
        dry_run: bool = False,
        actor: str | None = None,
        limit: int = 10_000,
    ) -> BulkMigration:
        """Bulk migration with a per-run outcome report; one run's refusal does not stop the others."""
        runs = [
            r
            for r in self.runs.runs(tenant, definition=definition, status=status, limit=limit)
            if r.definition.version == from_version and r.status not in ("completed", "failed", "cancelled")
        ]
        report = []
        if not dry_run and runs:
            asked = self._ask_many(tenant, [r.run_id for r in runs], to_version, reason, mapping, actor)
            if asked is not None:
                return asked.model_copy(update={"definition": definition, "from_version": from_version})
        for r in runs:
            try:
                out = self.migrate(
                    tenant, r.run_id, to_version, reason, mapping=mapping, dry_run=dry_run, actor=actor
                )
                report.append(MigrationOutcome(run_id=r.run_id, ok=out.ok, problems=out.problems))
            except (Refused, NotFound, InvalidInput) as exc:
                report.append(MigrationOutcome(run_id=r.run_id, ok=False, problems=[str(exc)]))
        return BulkMigration(
            definition=definition,
            from_version=from_version,
            to_version=to_version,
            dry_run=dry_run,
            runs=len(report),
            migrated=sum(1 for x in report if x.ok),
            report=report,
        )

    def _asked(self) -> Migrations:
        if self.approvals is None:  # pragma: no cover - the Service always sets it
            raise Refused(
                "this migration needs approval, and approvals are not set up", code="approval_required"
            )
        return self.approvals

    def _ask_many(
        self,
        tenant: str,
        run_ids: list[str],
        to_version: int,
        reason: str,
        mapping: dict[str, str] | None,
        actor: str | None,
    ) -> BulkMigration | None:
        """A bulk migration that needs approval: ONE request for every run it can migrate now (each is
        checked as a dry run; the others are reported); None when no approval is needed."""
        states = [self.kernel.state(tenant, run_id) for run_id in run_ids]
        first = states[0]
        name = first.definition["name"]
        with self.kernel.read() as tx:
            current = self.kernel.definition_for(tx, tenant, name, first.definition["version"])
            if tx.definition(tenant, name, to_version) is None:
                raise NotFound(f"definition {name} has no version {to_version} in tenant {tenant}")
            target = self.kernel.definition_for(tx, tenant, name, to_version)
        policy = migration_policy(current, first.definition["version"], target, to_version)
        if policy is None:
            return None
        report, fit = [], []
        for s in states:
            out = self.migrate(
                tenant, s.run_id, to_version, reason, mapping=mapping, dry_run=True, actor=actor
            )
            problems = list(out.problems)
            if (other := self._asked().open_request_of(s.run_id)) is not None:
                problems.append(f"the run already waits for migration request {other}")
            report.append(MigrationOutcome(run_id=s.run_id, ok=not problems, problems=problems))
            if not problems:
                fit.append(s)
        request = None
        if fit:
            request = self._asked().ask(
                tenant, fit, target, to_version, policy, mapping or {}, _reason(reason), actor, bulk=True
            )
        return BulkMigration(
            definition=name,
            from_version=first.definition["version"],
            to_version=to_version,
            dry_run=False,
            runs=len(report),
            migrated=0,
            report=report,
            **({"request": request} if request is not None else {}),
        )

    def _command(
        self, tenant: str, run_id: str, cmd: Command, action: str, actor: str | None, **detail: JSONValue
    ) -> RepairResult:
        reason = getattr(cmd, "reason", "")
        return self._done(
            run_id, *self.audit.command(tenant, actor, action, run_id, cmd, reason=reason, **detail)
        )

    @staticmethod
    def _json(value: object, what: str) -> None:
        try:
            digest(value)
        except (TypeError, ValueError, UnicodeEncodeError) as exc:
            raise InvalidInput(f"{what} is not valid JSON: {str(exc)[:200]}") from None
