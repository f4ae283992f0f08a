"""What a schedule may be (its cron within the tenant's rate, its policies within their bounds) and how
it is shown: the checks a create or a change passes before anything is written, and the view."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronsim.explain import explain

from ...core.canonical import JSONValue
from ...core.limits import TENANT_LIMITS, Settings, tenant_limit
from ...core.schedule import (
    CATCH_UPS,
    OVERLAPS,
    CatchUp,
    Cron,
    Overlap,
    ScheduleError,
    min_gap_ms,
    parse_cron,
)
from ...core.schedule import upcoming as upcoming_slots
from ...core.timeutil import format_duration, iso
from ...errors import InvalidInput
from ...store import ScheduleRow, SlotRow
from ..views.schedules import ScheduleView, SlotView
from .inputs import redacted

__all__ = [
    "DEFAULT_CATCH_UP_LIMIT",
    "SHOWN_SLOTS",
    "at",
    "check_cron",
    "check_policies",
    "paused_since",
    "slot_view",
    "view_of",
]

DEFAULT_CATCH_UP_LIMIT = 10
SHOWN_SLOTS = 5  # next fire times in a view
_SET = "`lockstep tenants set {tenant} --{flag} N`"


def at(ms: int) -> str:
    """A slot's instant as the views and start keys write it (UTC ISO, milliseconds)."""
    return iso(datetime.fromtimestamp(ms / 1000, UTC))


def check_cron(cron: str, zone: str, tenant: str, settings: Settings, now_ms: int) -> Cron:
    """The parsed cron, or InvalidInput naming the field, the problem and the fix; a cron that fires
    more often than the tenant's max_schedule_rate is refused too."""
    try:
        parsed = parse_cron(cron, zone)
    except ScheduleError as exc:
        raise InvalidInput(
            str(exc),
            code="bad_timezone" if exc.field == "timezone" else "bad_cron",
            extra={"field": exc.field},
        ) from None
    rate = tenant_limit(settings, "max_schedule_rate")
    shortest = 3_600_000 // rate
    gap = min_gap_ms(parsed, now_ms)
    if gap < shortest:
        ceiling = TENANT_LIMITS["max_schedule_rate"].ceiling
        every = format_duration(timedelta(milliseconds=gap))
        fix = (
            "the most any tenant may allow; fire less often"
            if rate >= ceiling
            else "fire less often, or raise it with "
            + _SET.format(tenant=tenant, flag="max-schedule-rate")
            + f" (at most {ceiling})"
        )
        raise InvalidInput(
            f"cron {parsed.expr!r} fires every {every} at its most frequent, more often than tenant "
            f"{tenant}'s max_schedule_rate={rate} slots per hour allows (slots at least "
            f"{format_duration(timedelta(milliseconds=shortest))} apart): {fix}",
            code="schedule_too_frequent",
            extra={"field": "cron", "limit": "max_schedule_rate", "allowed": rate},
        )
    return parsed


def check_policies(
    overlap: str, catch_up: str, catch_up_limit: int | None, tenant: str, settings: Settings
) -> tuple[Overlap, CatchUp, int]:
    """The overlap and catch-up policies and the catch-up limit, checked against the tenant's bound."""
    if overlap not in OVERLAPS:
        raise InvalidInput(
            f"overlap {overlap!r} is not a policy: use skip (no new run while the previous one of the "
            "schedule is unfinished), allow, or cancel_previous",
            code="bad_overlap",
            extra={"field": "overlap"},
        )
    if catch_up not in CATCH_UPS:
        raise InvalidInput(
            f"catch-up {catch_up!r} is not a policy: use none (missed slots do not start), last (the "
            "most recent missed slot starts once) or all (every missed slot, up to the catch-up limit)",
            code="bad_catch_up",
            extra={"field": "catch_up"},
        )
    bound = tenant_limit(settings, "max_catch_up_slots")
    limit = DEFAULT_CATCH_UP_LIMIT if catch_up_limit is None else catch_up_limit
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidInput(
            f"catch-up limit {limit!r} must be a whole number of at least 1",
            code="bad_catch_up",
            extra={"field": "catch_up_limit"},
        )
    if limit > bound:
        ceiling = TENANT_LIMITS["max_catch_up_slots"].ceiling
        fix = (
            "the most any tenant may allow"
            if bound >= ceiling
            else "or raise it with " + _SET.format(tenant=tenant, flag="max-catch-up-slots")
        )
        raise InvalidInput(
            f"catch-up limit {limit} is over tenant {tenant}'s max_catch_up_slots={bound}: ask for at "
            f"most {bound} ({fix})",
            code="bad_catch_up",
            extra={"field": "catch_up_limit", "limit": "max_catch_up_slots", "allowed": bound},
        )
    return overlap, catch_up, min(limit, bound)


def _described(cron: Cron) -> str:
    try:
        return f"{explain(cron.expr)} ({cron.zone})"
    except Exception:  # the explainer is best effort: a valid cron it cannot phrase is shown as is
        return f"{cron.expr} ({cron.zone})"


def paused_since(v: ScheduleView) -> str:
    """The line a paused schedule shows instead of fire times (the UI and `schedules show` alike)."""
    since = f" since {v.paused_at}" if v.paused_at else ""
    by = f" by {v.paused_by}" if v.paused_by else ""
    why = f": {v.paused_reason}" if v.paused_reason else ""
    return f"paused{since}{by}{why}"


def slot_view(s: SlotRow) -> SlotView:
    return SlotView(
        slot=at(s.slot_at),
        outcome=s.outcome,  # type: ignore[arg-type]
        run_id=s.started_run,
        reason=s.reason,
        until=at(s.until_at) if s.until_at is not None else None,
        count=s.count,
        recorded_at=s.recorded_at,
    )


def view_of(
    row: ScheduleRow, now_ms: int, slots: list[SlotRow] | None = None, *, forgotten: bool = False
) -> ScheduleView:
    """The view of a schedule; `slots` (newest first) fill in its recent history."""
    cron: Cron | None
    try:
        readable = parse_cron(row.cron, row.timezone)
        cron, description = readable, _described(readable)
    except ScheduleError as exc:
        # Stored readable, unreadable now (its zone gone from the tz database, a damaged row): the
        # scheduler pauses it at its next slot (fire.py), and it must still be shown, and listed with
        # the others, to say so and why.
        cron, description = None, f"{row.cron} ({row.timezone}): can no longer be read: {exc}"
    # A paused schedule lists no fire times: the slots that fall while paused start nothing, ever, and
    # resuming fires from the first slot after the resume, so any time shown would be a false promise.
    nxt = (
        [row.next_at, *upcoming_slots(cron, row.next_at, SHOWN_SLOTS - 1)]
        if row.status == "active" and cron is not None
        else []
    )
    recent = [slot_view(s) for s in slots or []]
    input_shown: JSONValue = redacted(row.input, forgotten)
    return ScheduleView(
        name=row.name,
        definition=row.definition,
        version=row.version,
        cron=row.cron,
        timezone=row.timezone,
        description=description,
        input=input_shown,
        overlap=row.overlap,  # type: ignore[arg-type]
        catch_up=row.catch_up,  # type: ignore[arg-type]
        catch_up_limit=row.catch_up_limit,
        status=row.status,  # type: ignore[arg-type]
        paused_reason=row.paused_reason,
        paused_at=row.paused_at if row.status == "paused" else None,
        paused_by=row.paused_by if row.status == "paused" else None,
        next_fire_at=at(row.next_at) if row.status == "active" else None,
        next_fire_times=[at(t) for t in nxt],
        next_fire_times_local=[
            datetime.fromtimestamp(t / 1000, cron.tz).isoformat(timespec="seconds")
            for t in nxt
            if cron is not None
        ],
        last_slot=at(row.last_slot) if row.last_slot is not None else None,
        last_run=row.last_run,
        runs_started=row.runs_started,
        slots_skipped=row.slots_skipped,
        slots_missed=row.slots_missed,
        created_at=row.created_at,
        created_by=row.created_by,
        updated_at=row.updated_at,
        updated_by=row.updated_by,
        recent=recent,
        last_skipped=next((s for s in recent if s.outcome == "skipped"), None),
        last_missed=next((s for s in recent if s.outcome == "missed"), None),
    )
