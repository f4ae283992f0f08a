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
from ..core.migrate import plan_migration
from ..core.state import RunState
from ..errors import InvalidInput, NotFound, Refused
from ..store import RepairTx
from .audit import Audit
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
        plan = plan_migration(state, current, target, mapping or {})
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
