"""The background scrub (a scheduler pass): `verify` of a bounded batch of runs every `scrub_interval`,
round robin over run ids, so every run is checked again and again at a bounded cost per pass.

A command loads only a run's row and snapshot, never its events: without the scrub, an event row whose
bytes were changed but still decode would go unnoticed while the run is driven on. A run found damaged
is marked (`runs.damaged`, in a small transaction of its own, with one audit row); from then on loading
it for a command raises DamagedRun, so every command on it is refused (corrupt_run) and `show` says why.
Nothing here changes a run's history: a marked run is repaired by restoring its rows from a backup
(docs/operations.md, "Damaged runs").

A live run may get new events between the reads of its snapshot and of its events; `verify_run(live=
True)` leaves those out, and a run is only marked when a second check finds the same problems, so a
race with a command (or a purge, which tombstones first) is never taken for damage."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..core.timeutil import iso
from ..errors import Gone, LockstepError, NotFound, Unavailable
from ..store import AuditTx, RetentionTx, StartTx
from .port import KernelPort
from .verify import verify_run

__all__ = ["SCRUBBED_BY", "Scrub", "ScrubReport"]

log = logging.getLogger("lockstep.scrub")
SCRUBBED_BY = "scrub"  # the actor of the audit row a mark writes


class ScrubTx(StartTx, AuditTx, RetentionTx, Protocol):
    """What the scrub needs of a transaction: runs and events (verify), the mark, audit rows."""


@dataclass(frozen=True)
class ScrubReport:
    checked: int
    damaged: list[str]


class Scrub:
    def __init__(
        self,
        kernel: KernelPort[ScrubTx],
        *,
        runs_per_pass: int = 200,
        found: Callable[[str], None] | None = None,
    ) -> None:
        self.kernel = kernel
        self.runs_per_pass = runs_per_pass
        # Called with the tenant of each run this process marked (the damaged-runs counter).
        self.found = found
        # In memory: a restarted scheduler begins again at the first run, which only costs a few passes.
        self.cursor = ""

    def run_pass(self, limit: int | None = None) -> ScrubReport:
        """Check the next `limit` (else `runs_per_pass`) unmarked runs after the cursor, mark the damaged
        ones; past the last run the cursor goes back to the first."""
        n = limit or self.runs_per_pass
        with self.kernel.read() as tx:
            batch = tx.runs_to_scrub(self.cursor, n)
        self.cursor = batch[-1][0] if len(batch) == n else ""
        damaged = []
        for run_id, tenant in batch:
            problems = self._problems(run_id)
            if problems and problems == self._problems(run_id) and self._mark(run_id, tenant, problems):
                damaged.append(run_id)
        return ScrubReport(checked=len(batch), damaged=damaged)

    def _problems(self, run_id: str) -> list[str]:
        """What verify finds wrong with the run now (none if it is gone meanwhile)."""
        try:
            return verify_run(self.kernel, run_id, None, live=True).problems
        except (NotFound, Gone):
            return []  # purged (or deleted) since the batch was read
        except Unavailable:
            raise  # the database is out of reach: the pass ends, the scheduler retries it
        except LockstepError as exc:  # pragma: no cover - verify lists problems instead of raising
            log.warning("scrub could not check run %s: %s", run_id, exc)
            return []

    def _mark(self, run_id: str, tenant: str, problems: list[str]) -> bool:
        """Mark the run damaged, with its audit row, in one small transaction; False if it was marked
        already (another scheduler) or purged meanwhile."""
        problem = "; ".join(problems)
        with self.kernel.write() as tx:
            if tx.tombstone(run_id) is not None or not tx.mark_damaged(run_id, problem):
                return False
            at = iso(self.kernel.clock())
            tx.audit(at, tenant, SCRUBBED_BY, "run.damaged", run_id, "ok", {"problems": problems[:20]})
        log.error(
            "run %s (tenant %s) is damaged: %s; every command on it is refused until its rows are "
            "restored from a backup (`lockstep verify %s`)",
            run_id,
            tenant,
            problem,
            run_id,
        )
        if self.found is not None:
            self.found(tenant)
        return True
