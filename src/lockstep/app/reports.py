"""Workers' results: each recorded in one transaction, bounded by its tenant's limits, and a worker
process's batch of results recorded together with the leases it takes next (group commit).

The core accepts a result only for the run's current attempt with the current fencing token; anything
else becomes ResultIgnored evidence (or, past the history bounds, is answered without being appended).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Literal

from ..core.canonical import JSONValue, canonical_json
from ..core.commands import Command, Rejected, ReportFailure, ReportSuccess
from ..core.flow import run_of_task
from ..core.limits import Settings, tenant_limit
from ..core.sealed import SEALED, contains_marker
from ..core.shape import Shape, over_limit, shape_of
from ..errors import InvalidInput, NotFound, Refused
from ..store import ClaimTx, CommandTx, LoadedRun, TenantsTx
from .port import KernelPort
from .quotas import limit_message
from .work import Eager, TaskLease, Work

__all__ = ["OUTPUT_TOO_LARGE", "Reports", "Verdict", "failure_report"]

# The failure code of an attempt whose output is over a tenant limit: never retried (it would loop).
OUTPUT_TOO_LARGE = "output_too_large"

# What a recorded result answers; "not_found" only in a batch (a single report raises NotFound).
Verdict = Literal["accepted", "ignored", "not_found"]


def failure_report(
    task_id: str,
    attempt: int,
    fencing: int,
    code: str,
    message: str,
    *,
    retryable: bool = True,
    unexpected: bool = False,
) -> ReportFailure:
    # Error texts come from workers; keep them printable and encodable in the hash chain.
    code = code.encode("utf-8", "replace").decode()[:200]
    message = message.encode("utf-8", "replace").decode()[:2000]
    return ReportFailure(task_id, attempt, fencing, code, message, retryable, unexpected)


def success_report(
    task_id: str, attempt: int, fencing: int, output: JSONValue, *, strict: bool = False
) -> ReportSuccess | ReportFailure:
    """The command reporting `output`. Output that is not plain JSON fails the attempt (InvalidOutput)
    for in-process workers; with `strict` (HTTP workers, who can fix and resend) it is refused with
    InvalidInput instead."""
    try:
        text = canonical_json(output)
        text.encode()  # a lone surrogate is not JSON that can be stored (nor hashed)
    except RecursionError:
        message = "activity output nests arrays/objects too deep to encode as JSON"
        if strict:
            raise InvalidInput(message) from None
        return failure_report(task_id, attempt, fencing, "InvalidOutput", message, retryable=False)
    except (TypeError, ValueError, UnicodeEncodeError) as exc:
        if strict:
            raise InvalidInput(f"output is not valid JSON: {str(exc).splitlines()[0][:200]}") from None
        message = f"activity output is not JSON: {exc}"
        return failure_report(task_id, attempt, fencing, "InvalidOutput", message, retryable=False)
    if f'"{SEALED}":' in text and contains_marker(output):  # a forged sealed value would break the run
        message = f"activity output holds an object with the key {SEALED!r}, reserved for sealed values"
        if strict:
            raise InvalidInput(message + "; rename that key", code="reserved_key")
        return failure_report(task_id, attempt, fencing, "InvalidOutput", message, retryable=False)
    return ReportSuccess(task_id, attempt, fencing, output)


def _fit_failure(settings: Settings, report: ReportFailure) -> ReportFailure:
    # The compact JSON of {"code": ..., "message": ...}: 24 bytes of keys and quotes, and escapes.
    room = tenant_limit(settings, "max_output_bytes") - len(report.code.encode()) - 24
    if len(report.message) * 6 <= room or len(canonical_json(report.message).encode()) <= room:
        return report
    cut = "... (cut to fit max_output_bytes)"
    keep = report.message.encode()[: max(0, room // 6 - len(cut))].decode("utf-8", "ignore")
    return replace(report, message=keep + cut)


class Reports:
    def __init__(self, kernel: KernelPort[ClaimTx], work: Work) -> None:
        self.kernel = kernel
        self.work = work
        # Stale reports answered as ignored without being appended (past HISTORY_LIMITS), per tenant.
        self.unrecorded_results: dict[str, int] = {}
        self._lock = threading.Lock()

    def complete(
        self,
        task_id: str,
        attempt: int,
        fencing: int,
        output: JSONValue,
        *,
        tenant: str | None = None,
        strict: bool = False,
    ) -> Verdict:
        """Report success: "accepted", or "ignored" when the result is stale (recorded as evidence). An
        output over the tenant's limits is recorded as a failed attempt (not retried) and then refused
        with InvalidInput code output_too_large, so the worker hears it."""
        return self._report(task_id, success_report(task_id, attempt, fencing, output, strict=strict), tenant)

    def fail(
        self,
        task_id: str,
        attempt: int,
        fencing: int,
        code: str,
        message: str,
        *,
        retryable: bool = True,
        unexpected: bool = False,
        tenant: str | None = None,
    ) -> Verdict:
        report = failure_report(
            task_id, attempt, fencing, code, message, retryable=retryable, unexpected=unexpected
        )
        return self._report(task_id, report, tenant)

    def report_and_claim(
        self,
        reports: Sequence[ReportSuccess | ReportFailure],
        worker: str,
        activities: Sequence[str],
        *,
        limit: int,
        lease_ttl: timedelta,
        queue: str = "default",
        versions: Sequence[str] | None = None,
        scan: bool = True,
    ) -> tuple[list[Verdict | None], list[TaskLease]]:
        """Record many results and lease up to `limit` new tasks in ONE transaction (one commit, one
        fsync): the worker's hot path. Verdicts are "accepted", "ignored", "not_found", or None for a
        report that failed inside (retry it later). Without `scan`, only the attempts these results
        schedule are leased (eager dispatch); the ready queue is not searched.

        Runs are locked in run-id order, so two workers' batches cannot deadlock; if the batch fails,
        each report is isolated in a savepoint (one broken run does not fail the others)."""
        # Outputs are measured here, before the transaction; inside it each is compared with its tenant's
        # limits (an output over them becomes a failed attempt, see bounded_report).
        shapes = [
            shape_of(r.output, "output", "max_output_bytes") if isinstance(r, ReportSuccess) else None
            for r in reports
        ]
        now = self.kernel.clock()
        verdicts: dict[int, Verdict | None] = {}
        eager = Eager(
            worker, frozenset(activities), queue, set(versions) if versions else None, lease_ttl, limit
        )
        with self.kernel.write() as tx:
            order = sorted(range(len(reports)), key=lambda i: reports[i].task_id)

            def report_all(loaded: dict[str, LoadedRun]) -> bool:
                for i in order:
                    verdicts[i] = self._report_one(tx, reports[i], now, eager, loaded, shapes[i])
                return True

            run_ids = [run_of_task(reports[i].task_id) for i in order]
            if order and self.kernel.as_one_batch(tx, "a batch of reports", run_ids, report_all) is None:
                eager.leases, eager.room = [], limit
                for i in order:
                    what = f"report of {reports[i].task_id}"
                    verdicts[i] = self.kernel.isolated(
                        tx, what, self._report_one, reports[i], now, eager, None, shapes[i]
                    )
            leases = eager.leases
            if scan and activities and eager.room > 0:
                leases += self.work.claim_in(
                    tx, now, worker, activities, eager.room, lease_ttl, None, queue, versions
                )
        return [verdicts[i] for i in range(len(reports))], leases

    def bounded_report(
        self, tx: TenantsTx, tenant: str, report: ReportSuccess | ReportFailure, shape: Shape | None
    ) -> ReportSuccess | ReportFailure:
        """`report` as the tenant's limits let it be recorded, inside its transaction (`shape` was
        measured before it, up to the ceilings). An output over the limits fails the attempt with
        OUTPUT_TOO_LARGE, not retryable: the activity would return the same output again and the run
        would loop. An error message is cut to fit max_output_bytes (a failure is always recordable)."""
        settings = self.kernel.settings_of(tenant, tx)
        if isinstance(report, ReportSuccess):
            if shape is None or over_limit(settings, shape, "max_output_bytes") is None:
                return report
            settings = self.kernel.settings_of(tenant, tx, fresh=True)  # refuse only by settings read now
            over = over_limit(settings, shape, "max_output_bytes")
            if over is None:
                return report
            why = limit_message(tenant, "the activity output", over)
            message = f"{why}; the attempt was recorded as failed ({OUTPUT_TOO_LARGE}) and is not retried"
            report = failure_report(
                report.task_id, report.attempt, report.fencing, OUTPUT_TOO_LARGE, message, retryable=False
            )
        return _fit_failure(settings, report)

    def _report(
        self, task_id: str, command: ReportSuccess | ReportFailure, tenant: str | None = None
    ) -> Literal["accepted", "ignored"]:
        """Record one worker's result in ONE transaction: the run is the task id's prefix, its tenant
        (and so the limits the result is bounded by) is read with the run it locks."""
        shape = (
            shape_of(command.output, "output", "max_output_bytes")
            if isinstance(command, ReportSuccess)
            else None
        )
        recorded: list[tuple[str, ReportSuccess | ReportFailure]] = []

        def bounded(tx: TenantsTx, loaded: LoadedRun) -> Command:
            report = self.bounded_report(tx, loaded.state.tenant, command, shape)
            recorded.append((loaded.state.tenant, report))
            return report

        try:
            _state, events = self.kernel.command(run_of_task(task_id), command, tenant, prepare=bounded)
        except NotFound:
            raise NotFound(f"task {task_id} not found") from None
        except Refused as exc:
            if exc.code != "result_ignored":
                raise
            self._count_unrecorded(recorded[-1][0])  # a stale report past the bound: answered, not appended
            return "ignored"
        if events and events[0].type == "ResultIgnored":
            return "ignored"
        report = recorded[-1][1]
        if isinstance(report, ReportFailure) and isinstance(command, ReportSuccess):
            # Recorded as a failure: the worker must hear why its result was not taken.
            raise InvalidInput(report.message, code=OUTPUT_TOO_LARGE)
        return "accepted"

    def _report_one(
        self,
        tx: CommandTx,
        report: ReportSuccess | ReportFailure,
        now: datetime,
        eager: Eager,
        preloaded: dict[str, LoadedRun] | None = None,
        shape: Shape | None = None,
    ) -> Verdict:
        # Task ids begin with their run's id: lock the run straight away (one round trip fewer). A
        # preloaded run is used once: a second report for it must see the first one's transition.
        run_id = run_of_task(report.task_id)
        loaded = preloaded.pop(run_id, None) if preloaded is not None else None
        loaded = loaded or tx.load_run(run_id)
        if loaded is None:
            return "not_found"  # (an unknown task of a live run is recorded as ResultIgnored evidence)
        s = loaded.state
        d = self.kernel.definition_of(tx, s)
        report = self.bounded_report(tx, s.tenant, report, shape)
        try:
            after, events = self.kernel.apply(
                tx,
                loaded,
                report,
                now,
                d,
                then=lambda st, evs: eager.follow(self.kernel, tx, now, st, evs),
                lease_until=now + eager.lease_ttl,
            )
        except Rejected as r:
            if r.code != "result_ignored":
                raise
            self._count_unrecorded(s.tenant)  # a stale report past the bound: answered, not appended
            return "ignored"
        if after is not None:
            eager.leased(tx, now, after, events)
        return "ignored" if events and events[0].type == "ResultIgnored" else "accepted"

    def _count_unrecorded(self, tenant: str) -> None:
        with self._lock:
            self.unrecorded_results[tenant] = self.unrecorded_results.get(tenant, 0) + 1
