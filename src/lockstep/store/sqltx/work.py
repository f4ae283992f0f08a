"""WorkTx in SQL: task rows (the ready queue, claims, leases, heartbeats), quotas and dead letters, and
the task rows an append's effects write."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...core.canonical import compact_json, parse_json
from ...core.effects import CloseTask, CreateTask, DeadLetterTask, LeaseTask
from ...core.sealed import maybe_sealed
from ...core.state import RunState
from ..port import DeadTaskRow, TaskRow
from .base import SqlBase, ms_of

__all__ = ["SqlWorkTx"]


class SqlWorkTx(SqlBase):
    def _task(self, r: Any) -> TaskRow:
        return TaskRow(
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            r[6],
            r[7],
            parse_json(r[8]),
            r[9],
            r[10],
            r[11],
            r[12],
            r[13],
            r[14],
            r[15],
            r[16],
            r[17],
            r[18],
            maybe_sealed(r[8]),
        )

    def task(self, task_id: str) -> TaskRow | None:
        r = self._one("task_get", task_id=task_id)
        return self._task(r) if r else None

    def tasks(self, task_ids: Sequence[str]) -> dict[str, TaskRow]:
        """Several tasks in one query, by id; unknown ids are absent."""
        rows = self.c.execute(self.q["tasks_get_many"], {"task_ids": self.list_param(task_ids)})
        return {r[0]: self._task(r) for r in rows}

    def set_lease(self, task_id: str, lease_expires_at: int) -> None:
        self.c.execute(self.q["task_set_lease"], {"task_id": task_id, "until": lease_expires_at})

    def heartbeat(self, task_id: str, fencing: int, lease_until_ms: int) -> bool:
        cur = self.c.execute(
            self.q["task_heartbeat"], {"task_id": task_id, "fencing": fencing, "lease_until": lease_until_ms}
        )
        return bool(cur.rowcount == 1)

    def abandon_leases(self, owner: str, now_ms: int, tenant: str | None = None) -> int:
        cur = self.c.execute(self.q["leases_abandon"], {"owner": owner, "now": now_ms, "tenant": tenant})
        return int(cur.rowcount)

    def close_task(self, task_id: str, status: str) -> None:
        self._write("task_close", {"task_id": task_id, "status": status})

    # --- fair claiming, quotas, dead letters ---------------------------------------------------
    def ready_tenants(self) -> list[str]:
        return [r[0] for r in self.c.execute(self.q["ready_tenants"], {})]

    def ready_ids(
        self,
        tenant: str,
        activities: Sequence[str],
        queue: str,
        now_ms: int,
        limit: int,
        served: Sequence[str] | None = None,
    ) -> list[str]:
        """Ready task ids of a tenant; `served` ("name:version" pairs) limits them to the definition
        versions a worker declares it runs (so old and new workers can run side by side)."""
        params = {
            "tenant": tenant,
            "activities": self.list_param(activities),
            "queue": queue,
            "now": now_ms,
            "limit": limit,
            "served": self.list_param(served) if served is not None else None,
        }
        return [r[0] for r in self.c.execute(self.q["ready_ids"], params)]

    def leased_count(self, tenant: str) -> int:
        return int(self._one("leased_count", tenant=tenant)[0])

    def lock_tenant(self, name: str) -> None:
        """Serialise quota checks of one tenant (a no-op where writers are already serialised)."""

    def dead_letter(self, task_id: str, reason: str) -> None:
        self.c.execute(self.q["task_dead"], {"task_id": task_id, "reason": reason})

    def stale_ready(self, before_ms: int, limit: int) -> list[tuple[str, str, str, str, int]]:
        rows = self.c.execute(self.q["stale_ready"], {"before": before_ms, "limit": limit}).fetchall()
        return [(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    def dead_tasks(self, tenant: str, limit: int) -> list[DeadTaskRow]:
        rows = self.c.execute(self.q["dead_tasks"], {"tenant": tenant, "limit": limit}).fetchall()
        return [
            {
                "task_id": r[0],
                "run_id": r[1],
                "step": r[2],
                "attempt": r[3],
                "activity": r[4],
                "reason": r[5],
                "created_at": r[6],
            }
            for r in rows
        ]

    def task_counts(self) -> dict[str, int]:
        return {r[0]: r[1] for r in self.c.execute(self.q["task_counts"])}

    def ready_backlog(self) -> dict[str, int]:
        return {r[0]: int(r[1]) for r in self.c.execute(self.q["ready_backlog"], {})}

    # --- the task rows of an append ------------------------------------------------------------
    def _write_task_effect(
        self,
        run: RunState,
        fx: CreateTask | LeaseTask | DeadLetterTask | CloseTask,
        leases: Mapping[str, LeaseTask],
        created: set[str],
        now_ms: int,
        lease_until_ms: int | None,
    ) -> None:
        """One task effect of an append; `leases` and `created` are the append's LeaseTask effects and
        created task ids: a task created and leased in the same transition (eager dispatch) is inserted
        leased, one statement instead of two."""
        if isinstance(fx, CreateTask):
            lease = leases.get(fx.task_id)
            self._write(
                "task_insert" if lease is None else "task_insert_leased",
                {
                    **(self._lease_params(lease, lease_until_ms) if lease is not None else {}),
                    "task_id": fx.task_id,
                    "tenant": run.tenant,
                    "run_id": run.run_id,
                    "step": fx.step,
                    "attempt": fx.attempt,
                    "kind": fx.kind,
                    "activity": fx.activity,
                    "queue": fx.queue or "default",
                    "input": compact_json(fx.input),
                    "idempotency_key": fx.idempotency_key,
                    "definition": run.definition["name"],
                    "version": run.definition["version"],
                    "delivery": fx.delivery,
                    "timeout_ms": fx.timeout_ms,
                    "priority": fx.priority,
                    "now": now_ms,
                },
            )
        elif isinstance(fx, LeaseTask):
            if fx.task_id not in created:  # else inserted leased above
                self._write("task_lease", self._lease_params(fx, lease_until_ms))
        elif isinstance(fx, DeadLetterTask):
            self.dead_letter(fx.task_id, fx.reason)
        else:
            self.close_task(fx.task_id, fx.status)

    @staticmethod
    def _lease_params(fx: LeaseTask, lease_until_ms: int | None) -> dict[str, Any]:
        deadline = ms_of(fx.deadline)
        return {
            "task_id": fx.task_id,
            "fencing": fx.fencing,
            "worker": fx.worker,
            "lease_expires_at": min(deadline, lease_until_ms or deadline),
            "deadline": deadline,
        }
