"""The views of schedules: one schedule with its next fire times and why its last slots did or did not
start runs (`lockstep schedules show`, `GET /v1/schedules/{name}`), the list, and what a change did."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import TenantJson, View

__all__ = ["ScheduleDeleted", "ScheduleView", "SlotView"]

SlotOutcome = Literal["started", "skipped", "missed", "refused", "already_started", "triggered"]


class SlotView(View):
    """What became of one slot (a range, for slots missed during downtime), or of a trigger."""

    slot: str = Field(description="the slot's time (UTC), or the first of a missed range")
    outcome: SlotOutcome = Field(
        description="started: a run was started; skipped: the previous run was still going (overlap "
        "skip); missed: no scheduler ran at the slot time and the catch-up policy does not start it; "
        "refused: the start was refused (the reason says why); already_started: a run with the "
        "slot's start key existed; triggered: started by hand (`schedules trigger`)"
    )
    run_id: str | None = Field(description="the run started (or found) for it")
    reason: str | None
    until: str | None = Field(default=None, description="the last slot of a missed range")
    count: int | None = Field(default=None, description="slots in a missed range (null: more than counted)")
    recorded_at: str


class ScheduleView(View):
    """A schedule: when it fires, what it starts, and what its last slots did."""

    name: str
    definition: str
    version: int | None = Field(description="the pinned version; null: the latest when a slot fires")
    cron: str
    timezone: str
    description: str = Field(description="the cron expression in words, in the schedule's time zone")
    input: TenantJson = Field(description="the run input; sensitive values redacted")
    overlap: Literal["skip", "allow", "cancel_previous"]
    catch_up: Literal["none", "last", "all"]
    catch_up_limit: int
    status: Literal["active", "paused"]
    paused_reason: str | None
    paused_at: str | None = Field(
        default=None, description="when it was paused (null: active, or paused before this was kept)"
    )
    paused_by: str | None = Field(
        default=None, description="who paused it (null: active, or paused by the scheduler itself)"
    )
    next_fire_at: str | None = Field(description="the next slot (UTC); null while paused")
    next_fire_times: list[str] = Field(
        description="the next slots (UTC); empty while paused (those slots will start nothing)"
    )
    next_fire_times_local: list[str] = Field(description="the same in the schedule's time zone")
    last_slot: str | None = Field(description="the last slot that started a run")
    last_run: str | None = Field(description="the run started last (by a slot or a trigger)")
    runs_started: int
    slots_skipped: int
    slots_missed: int = Field(description="slots missed (a range counted unknown counts one)")
    created_at: str
    created_by: str | None
    updated_at: str
    updated_by: str | None
    recent: list[SlotView] = Field(default_factory=list, description="the newest slot records first")
    last_skipped: SlotView | None = Field(default=None, description="why the last slot was skipped")
    last_missed: SlotView | None = Field(default=None, description="the last slots missed, and why")


class ScheduleDeleted(View):
    name: str
    deleted: bool
    runs_started: int = Field(description="runs the schedule started: they are kept, as they are")
    last_run: str | None
