"""Schedules as people manage them: create, change, pause, resume, delete, trigger (each one transaction,
audited in it), and the views. Every check runs before anything is written, so a refused request (a bad
cron or zone, an input that does not fit the definition, a cron firing too often, too many schedules)
is one clear error and changes nothing. Firing the slots is `fire.py`'s, in the scheduler."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...core.canonical import JSONValue
from ...core.definition import Definition, DefinitionError
from ...core.limits import TENANT_LIMITS, tenant_limit
from ...core.schedule import Cron, parse_cron
from ...core.timeutil import iso
from ...errors import Conflict, InvalidInput, NotFound, Refused
from ...store import ScheduleRow, ScheduleTx, Sealer, SlotRow
from ..audit import Audit
from ..kernel import epoch_ms
from ..port import KernelPort
from ..principals.roles import check_name
from ..runs import Runs, new_run_id
from ..views.runs import StartResult
from ..views.schedules import ScheduleDeleted, ScheduleView
from .inputs import InputSeal
from .rules import at, check_cron, check_policies, view_of

__all__ = ["ACTOR_PREFIX", "KEEP_SLOTS", "Schedules", "actor_of"]

ACTOR_PREFIX = "schedule:"
KEEP_SLOTS = 100  # slot records kept per schedule (the newest)
SHOWN = 20  # of them in `show`
_UNSET: Any = object()


def actor_of(name: str) -> str:
    """Who a schedule's runs are started by, in RunStarted.actor: `schedule:<name>`."""
    return ACTOR_PREFIX + name


class Schedules:
    def __init__(self, kernel: KernelPort[ScheduleTx], runs: Runs, sealer: Sealer | None) -> None:
        self.kernel = kernel
        self.runs = runs
        self.seal = InputSeal(kernel, sealer)
        self.audit = Audit(kernel)

    # --- changes ---------------------------------------------------------------------------------
    def create(
        self,
        tenant: str,
        name: str,
        *,
        definition: str,
        cron: str,
        timezone: str = "UTC",
        input: JSONValue = None,
        version: int | None = None,
        overlap: str = "skip",
        catch_up: str = "last",
        catch_up_limit: int | None = None,
        actor: str | None = None,
    ) -> ScheduleView:
        """A new schedule, firing from its first slot after now."""
        check_name("schedule", name)
        payload: JSONValue = {} if input is None else input
        now = self.kernel.clock()
        settings = self.kernel.settings_of(tenant, fresh=True)
        parsed = check_cron(cron, timezone, tenant, settings, epoch_ms(now))
        policy = check_policies(overlap, catch_up, catch_up_limit, tenant, settings)
        self.kernel.check_value(tenant, payload, "max_input_bytes", "the schedule input", "input")
        with self.kernel.write() as tx:
            d = self._definition(tx, tenant, definition, version)
            _check_input(d, payload)
            tx.lock_tenant(tenant)  # two creates cannot both see room for one more
            if tx.schedule(tenant, name) is not None:
                raise Conflict(
                    f"schedule {name} already exists in tenant {tenant}: change it with `lockstep "
                    f"schedules update {name}`, or delete it first",
                    code="schedule_exists",
                )
            self._check_count(tx, tenant)
            sid = "sch" + new_run_id(now)
            stamp = iso(now)
            row = ScheduleRow(
                id=sid,
                tenant=tenant,
                name=name,
                definition=definition,
                version=version,
                cron=parsed.expr,
                timezone=parsed.zone,
                input=self.seal.seal(tx, tenant, sid, payload, d),
                overlap=policy[0],
                catch_up=policy[1],
                catch_up_limit=policy[2],
                status="active",
                paused_reason=None,
                next_at=parsed.after(epoch_ms(now)),
                generation=1,
                last_slot=None,
                last_run=None,
                runs_started=0,
                slots_skipped=0,
                slots_missed=0,
                created_at=stamp,
                created_by=actor,
                updated_at=stamp,
                updated_by=actor,
            )
            tx.insert_schedule(row)
            self.audit.record(tenant, actor, "schedule.create", name, "ok", tx=tx, **_detail(row))
        return view_of(row, epoch_ms(now))

    def update(
        self,
        tenant: str,
        name: str,
        *,
        actor: str | None = None,
        definition: str | None = None,
        version: int | None = _UNSET,
        cron: str | None = None,
        timezone: str | None = None,
        input: JSONValue = _UNSET,
        overlap: str | None = None,
        catch_up: str | None = None,
        catch_up_limit: int | None = None,
    ) -> ScheduleView:
        """Change a schedule; a new cron or time zone fires from its first slot after now. `version`
        None follows the latest version from now on."""
        now = self.kernel.clock()
        now_ms = epoch_ms(now)
        settings = self.kernel.settings_of(tenant, fresh=True)
        if input is not _UNSET:
            input = {} if input is None else input
            self.kernel.check_value(tenant, input, "max_input_bytes", "the schedule input", "input")
        with self.kernel.write() as tx:
            row = self._locked(tx, tenant, name)
            new_cron: Cron | None = None
            if cron is not None or timezone is not None:
                new_cron = check_cron(cron or row.cron, timezone or row.timezone, tenant, settings, now_ms)
            policy = check_policies(
                overlap or row.overlap,
                catch_up or row.catch_up,
                catch_up_limit if catch_up_limit is not None else row.catch_up_limit,
                tenant,
                settings,
            )
            changed = {
                "definition": definition is not None and definition != row.definition,
                "version": version is not _UNSET and version != row.version,
                "input": input is not _UNSET,
                "cron": new_cron is not None and new_cron.expr != row.cron,
                "timezone": new_cron is not None and new_cron.zone != row.timezone,
                "overlap": policy[0] != row.overlap,
                "catch_up": policy[1] != row.catch_up,
                "catch_up_limit": policy[2] != row.catch_up_limit,
            }
            if not any(changed.values()):
                raise InvalidInput(
                    f"nothing to change in schedule {name}: give at least one new value (--cron, "
                    "--timezone, --input, --definition, --version, --overlap, --catch-up, "
                    "--catch-up-limit)",
                    code="no_change",
                )
            target = definition or row.definition
            pinned = row.version if version is _UNSET else version
            stored = row.input
            if changed["definition"] or changed["version"] or changed["input"]:
                d = self._definition(tx, tenant, target, pinned)
                if changed["input"]:
                    _check_input(d, input)
                    stored = self.seal.seal(tx, tenant, row.id, input, d)
                else:  # the stored input against the other version, sealed as that one declares
                    _check_input(d, self.seal.open(tx, tenant, row.id, row.input))
                    stored = self.seal.seal(tx, tenant, row.id, row.input, d)
            updated = replace(
                row,
                definition=target,
                version=pinned,
                cron=new_cron.expr if new_cron else row.cron,
                timezone=new_cron.zone if new_cron else row.timezone,
                input=stored,
                overlap=policy[0],
                catch_up=policy[1],
                catch_up_limit=policy[2],
                next_at=new_cron.after(now_ms) if new_cron else row.next_at,
                generation=row.generation + 1,
                updated_at=iso(now),
                updated_by=actor,
            )
            self._write(tx, updated, row.generation)
            fields = sorted(k for k, v in changed.items() if v)
            self.audit.record(
                tenant, actor, "schedule.update", name, "ok", tx=tx, changed=fields, **_detail(updated)
            )
        return view_of(updated, now_ms)

    def pause(
        self, tenant: str, name: str, *, reason: str | None = None, actor: str | None = None
    ) -> ScheduleView:
        """Stop firing: slots that fall while paused never start runs (also not after the resume)."""
        if reason is not None:
            self.kernel.check_value(tenant, reason, "max_payload_bytes", "the reason")
        return self._status(tenant, name, "paused", (reason or "").strip() or None, actor)

    def resume(self, tenant: str, name: str, *, actor: str | None = None) -> ScheduleView:
        """Fire again, from the first slot after now."""
        return self._status(tenant, name, "active", None, actor)

    def _status(
        self, tenant: str, name: str, status: str, reason: str | None, actor: str | None
    ) -> ScheduleView:
        now = self.kernel.clock()
        now_ms = epoch_ms(now)
        action = "schedule.pause" if status == "paused" else "schedule.resume"
        with self.kernel.write() as tx:
            row = self._locked(tx, tenant, name)
            if row.status == status:
                raise Refused(
                    f"schedule {name} is {status} already"
                    + (f" ({row.paused_reason})" if row.paused_reason else ""),
                    code="schedule_paused" if status == "paused" else "schedule_active",
                )
            cron = parse_cron(row.cron, row.timezone)
            updated = replace(
                row,
                status=status,
                paused_reason=reason,
                next_at=cron.after(now_ms) if status == "active" else row.next_at,
                generation=row.generation + 1,
                updated_at=iso(now),
                updated_by=actor,
                paused_at=iso(now) if status == "paused" else None,
                paused_by=actor if status == "paused" else None,
            )
            self._write(tx, updated, row.generation)
            extra = {"reason": reason} if reason else {"next_fire_at": at(updated.next_at)}
            self.audit.record(tenant, actor, action, name, "ok", tx=tx, **extra)
        return view_of(updated, now_ms)

    def delete(self, tenant: str, name: str, *, actor: str | None = None) -> ScheduleDeleted:
        """Delete the schedule and its slot records; the runs it started stay as they are, and its
        sealed input's key is destroyed."""
        with self.kernel.write() as tx:
            row = self._locked(tx, tenant, name)
            tx.delete_schedule(row.id)
            self.seal.forget(tx, tenant, row.id)
            self.audit.record(
                tenant,
                actor,
                "schedule.delete",
                name,
                "ok",
                tx=tx,
                runs_started=row.runs_started,
                last_run=row.last_run,
                **_detail(row),
            )
        return ScheduleDeleted(name=name, deleted=True, runs_started=row.runs_started, last_run=row.last_run)

    def trigger(
        self, tenant: str, name: str, *, key: str | None = None, actor: str | None = None
    ) -> StartResult:
        """Start one run now with the schedule's definition and input, whatever its overlap policy
        and also while paused. Its start key is `<name>:trigger:<key>` (default: the current second),
        so the same trigger sent twice starts one run."""
        now = self.kernel.clock()
        token = key or iso(now.replace(microsecond=0))
        if not 0 < len(token) <= 200:
            raise InvalidInput("a trigger key has 1 to 200 characters", code="bad_key")
        start_key = f"{name}:trigger:{token}"
        with self.kernel.write() as tx:
            row = self._locked(tx, tenant, name)
            found = tx.run_by_key(tenant, start_key)
            if found is not None:
                return StartResult(run_id=found[0], created=False)
            stored, clear = self.seal.for_start(tx, row)
            run_id = self.runs.start_in(
                tx,
                now,
                tenant,
                row.definition,
                input=clear,
                key=start_key,
                version=row.version,
                actor=actor_of(name),
            )
            updated = replace(
                row,
                input=stored,
                last_run=run_id,
                runs_started=row.runs_started + 1,
                generation=row.generation + 1,
                updated_at=iso(now),
            )
            self._write(tx, updated, row.generation)
            tx.add_slot(
                row.id,
                SlotRow(epoch_ms(now), "triggered", run_id, f"by {actor or 'the CLI'}", recorded_at=iso(now)),
                KEEP_SLOTS,
            )
            self.audit.record(
                tenant, actor, "schedule.trigger", name, "ok", tx=tx, run_id=run_id, start_key=start_key
            )
        return StartResult(run_id=run_id, created=True)

    # --- views -----------------------------------------------------------------------------------
    def list(self, tenant: str) -> list[ScheduleView]:
        now_ms = epoch_ms(self.kernel.clock())
        with self.kernel.read() as tx:
            rows = tx.schedules(tenant)
        return [view_of(r, now_ms) for r in rows]

    def show(self, tenant: str, name: str) -> ScheduleView:
        """The schedule with its next fire times and its newest slot records (why a slot was skipped
        or missed included)."""
        with self.kernel.read() as tx:
            row = tx.schedule(tenant, name)
            if row is None:
                raise _missing(tenant, name)
            slots = tx.slots(row.id, SHOWN)
            forgotten = self.seal.forgotten(tx, row.id)
        return view_of(row, epoch_ms(self.kernel.clock()), slots, forgotten=forgotten)

    # --- helpers ---------------------------------------------------------------------------------
    def _definition(self, tx: ScheduleTx, tenant: str, name: str, version: int | None) -> Definition:
        row = tx.definition(tenant, name, version)
        if row is None:
            known = sorted({x["name"] for x in tx.definitions(tenant)})
            what = f"{name} version {version}" if version else name
            hint = f" (published: {', '.join(known)})" if known else " (none published)"
            raise NotFound(
                f"no definition {what} in tenant {tenant}{hint}; publish it first with "
                "`lockstep publish FILE`, or name a published one with --definition"
            )
        return self.kernel.definition_for(tx, tenant, name, row.version)

    def _locked(self, tx: ScheduleTx, tenant: str, name: str) -> ScheduleRow:
        row = tx.schedule(tenant, name, lock=True)
        if row is None:
            raise _missing(tenant, name)
        return row

    def _check_count(self, tx: ScheduleTx, tenant: str) -> None:
        settings = self.kernel.settings_of(tenant, tx, fresh=True)
        cap = tenant_limit(settings, "max_schedules")
        have = tx.count_schedules(tenant)
        if have >= cap:
            ceiling = TENANT_LIMITS["max_schedules"].ceiling
            fix = (
                "the most any tenant may have"
                if cap >= ceiling
                else f"or raise it with `lockstep tenants set {tenant} --max-schedules N` (at most {ceiling})"
            )
            raise Refused(
                f"tenant {tenant} has {have} schedules, its limit (max_schedules={cap}): delete one "
                f"first ({fix})",
                code="too_many_schedules",
            )

    def _write(self, tx: ScheduleTx, row: ScheduleRow, generation: int) -> None:
        if not tx.update_schedule(row, generation):
            raise Conflict(f"schedule {row.name} was changed meanwhile; try again", code="schedule_changed")


def _missing(tenant: str, name: str) -> NotFound:
    return NotFound(
        f"no schedule {name} in tenant {tenant}; `lockstep schedules list` shows them",
        code="schedule_not_found",
    )


def _check_input(d: Definition, value: JSONValue) -> None:
    try:
        d.check_input(value)
    except DefinitionError as exc:
        raise InvalidInput(
            f"the schedule input does not fit definition {d.name}: {exc}; give an --input that "
            "matches its input_schema",
            code="invalid_input",
            extra={"field": "input"},
        ) from None


def _detail(row: ScheduleRow) -> dict[str, Any]:
    """What the audit log keeps of a schedule (never its input)."""
    return {
        "schedule_id": row.id,
        "definition": row.definition,
        "version": row.version,
        "cron": row.cron,
        "timezone": row.timezone,
        "overlap": row.overlap,
        "catch_up": row.catch_up,
        "catch_up_limit": row.catch_up_limit,
    }
