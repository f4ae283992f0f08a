"""Applying a granted migration request: one MigrateRun per run, each in its own transaction with that
run's outcome row, so applying is idempotent and crash-safe. The decision that grants a request commits
first; the deciding process then applies it at once, and the scheduler's pass (`run_pass`) applies any
granted request a crash left unfinished, and expires pending requests past their time.

Each run is checked again when it is applied: a run that finished, moved to another version, or that
the target no longer fits is reported (`skipped`, with why), never forced. The request becomes
`applied` once every run has its outcome."""

from __future__ import annotations

import logging

from ...core.commands import MigrateRun, Rejected
from ...store import MigrateTx, MigrationRequestRow
from ..audit import Audit
from ..port import KernelPort
from .expiry import expire

__all__ = ["MigrationApply"]

log = logging.getLogger("lockstep.migrations")


class MigrationApply:
    def __init__(self, kernel: KernelPort[MigrateTx]) -> None:
        self.kernel = kernel
        self.audit = Audit(kernel)

    def _now_ms(self) -> int:
        return int(self.kernel.clock().timestamp() * 1000)

    def apply(self, tenant: str, request_id: str) -> int:
        """Migrate every run of granted request `request_id` that has no outcome yet; the number migrated."""
        with self.kernel.read() as tx:
            row = tx.migration_request(tenant, request_id)
            if row is None or row["status"] != "approved":
                return 0
            pending = [r["run_id"] for r in tx.migration_runs(request_id) if r["outcome"] is None]
            decisions = tuple(dict(d) for d in tx.migration_decisions(request_id))
        migrated = sum(self._one(row, run_id, decisions) for run_id in pending)
        with self.kernel.write() as tx:
            if all(r["outcome"] is not None for r in tx.migration_runs(request_id)):
                tx.set_migration_status(request_id, "applied", "approved", applied_at=self._now_ms())
        return migrated

    def _one(self, row: MigrationRequestRow, run_id: str, decisions: tuple[dict[str, object], ...]) -> int:
        """One run of the request, in one transaction: its migration command (or why not) and its
        outcome row together; a run that already has an outcome is left alone."""
        rid, tenant = row["request_id"], row["tenant"]
        now = self.kernel.clock()
        with self.kernel.write() as tx:
            mine = tx.lock_migration_run(rid, run_id)
            if mine is None or mine["outcome"] is not None:
                return 0  # applied by another process meanwhile
            why = self._migrate(tx, row, run_id, decisions)
            outcome = "migrated" if why is None else "skipped"
            tx.set_migration_outcome(rid, run_id, outcome, why, int(now.timestamp() * 1000))
            self.audit.record(
                tenant,
                row["requested_by"],
                "migration.apply",
                run_id,
                "ok" if why is None else "refused",
                tx=tx,
                request_id=rid,
                to_version=row["to_version"],
                **({} if why is None else {"why": why}),
            )
        return 1 if why is None else 0

    def _migrate(
        self, tx: MigrateTx, row: MigrationRequestRow, run_id: str, decisions: tuple[dict[str, object], ...]
    ) -> str | None:
        """Apply the migration to one run in `tx`: None when it was migrated, else why not."""
        loaded = tx.load_run(run_id)
        if loaded is None or loaded.state.tenant != row["tenant"]:
            return "the run is gone (purged)"
        s = loaded.state
        if s.terminal:
            return f"the run is already {s.status}: there is nothing to migrate"
        if s.definition["name"] != row["definition"] or s.definition["version"] != row["from_version"]:
            return f"the run moved to version {s.definition['version']} meanwhile: not forced"
        current = self.kernel.definition_of(tx, s)
        target = self.kernel.definition_for(tx, row["tenant"], row["definition"], row["to_version"])
        cmd = MigrateRun(
            target,
            row["to_version"],
            tuple(sorted(row["mapping"].items())),
            row["reason"],
            row["requested_by"],
            rid := row["request_id"],
            decisions,
        )
        try:
            with tx.savepoint():
                self.kernel.apply(tx, loaded, cmd, self.kernel.clock(), current)
        except Rejected as r:
            return f"refused now: {r.reason}"[:500]
        log.info("run %s migrated to version %s by request %s", run_id, row["to_version"], rid)
        return None

    def run_pass(self, limit: int = 100) -> int:
        """The scheduler's pass: expire pending requests past their time, and apply granted ones a crash
        left unfinished. Each request on its own; one that fails is logged and tried again next pass."""
        now = self._now_ms()
        with self.kernel.read() as tx:
            due = tx.due_migration_requests(now, limit)
        done = 0
        for tenant, rid in due:
            try:
                with self.kernel.write() as tx:
                    row = tx.migration_request(tenant, rid, lock=True)
                    if row is not None and row["status"] == "pending" and row["expires_at"] <= now:
                        done += int(expire(tx, self.audit, row, now, None))
                        continue
                done += self.apply(tenant, rid)
            except Exception:
                log.exception("migration request %s: the pass failed; it is tried again", rid)
        return done
