"""Schedules as the core sees them (pure): a cron expression in a time zone, its slots, and what one
scheduler pass does with the slots that are due (`step`).

Slots come from cronsim (Debian cron's semantics, DST included) over zoneinfo, so for a schedule in
Europe/Berlin:

- a slot in the hour that does not exist when clocks go forward (`30 2 * * *` on the last Sunday of
  March) fires once, right after the jump, at 03:00 local (01:00 UTC); the next day it is 02:30 again;
- a slot in the hour that happens twice when clocks go back (`30 2 * * *` on the last Sunday of
  October) fires once, at its first occurrence (02:30 CEST, 00:30 UTC);
- expressions with a wildcard or a step in the minute or hour field (`*/15 * * * *`) fire at every
  real instant that matches, in both passes of the repeated hour: their slots are evenly spaced in
  real time.

A slot is an instant, kept as milliseconds since the epoch (UTC); its start key is the schedule's name
and the slot's UTC ISO time (`nightly:2025-03-30T01:00:00.000Z`), so one slot never starts two runs.

Every function here is deterministic in its arguments: no clock is read (the caller passes `now`).
"""

from __future__ import annotations

import zoneinfo
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from typing import Literal

from cronsim import CronSim, CronSimError

from .timeutil import iso

__all__ = [
    "CATCH_UPS",
    "MAX_CRON_LENGTH",
    "MAX_ZONE_LENGTH",
    "ON_TIME_MS",
    "OVERLAPS",
    "CatchUp",
    "Cron",
    "Missed",
    "Overlap",
    "ScheduleError",
    "Step",
    "min_gap_ms",
    "parse_cron",
    "slot_key",
    "step",
    "upcoming",
]

Overlap = Literal["skip", "allow", "cancel_previous"]
CatchUp = Literal["none", "last", "all"]
OVERLAPS: tuple[Overlap, ...] = ("skip", "allow", "cancel_previous")
CATCH_UPS: tuple[CatchUp, ...] = ("none", "last", "all")
MAX_CRON_LENGTH = 200
MAX_ZONE_LENGTH = 64
# A slot started this late is still on time (catch-up `none` fires it): a scheduler restart, or a
# PostgreSQL partition moving to another scheduler, takes seconds, not a minute.
ON_TIME_MS = 60_000
# How many slots `min_gap_ms` looks at: every cron pattern repeats within a day, and a day with more
# slots than this has gaps far below any rate limit anyway.
GAP_SAMPLES = 500
_FIRST_WINDOW_MS = 60_000
# Due slots counted one by one before a pass looks only at the most recent ones (~50 ms of cronsim).
COUNT_BUDGET = 2000


class ScheduleError(ValueError):
    """A cron expression or time zone that cannot be used: `field` says which, the message how to fix."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


@dataclass(frozen=True)
class Cron:
    """A checked cron expression (5 fields, or 6 with seconds first) in an IANA time zone."""

    expr: str
    zone: str
    tz: zoneinfo.ZoneInfo = field(compare=False, repr=False)

    def after(self, ms: int) -> int:
        """The first slot strictly after instant `ms`."""
        start = datetime.fromtimestamp(ms / 1000, UTC).astimezone(self.tz)
        return int(next(CronSim(self.expr, start)).timestamp() * 1000)


def parse_cron(expr: str, zone: str) -> Cron:
    """A Cron, or ScheduleError saying what is wrong, where, and how to write it."""
    text = " ".join(expr.split())
    if not text:
        raise ScheduleError("cron", "the cron expression is empty; write five fields, e.g. '0 2 * * *'")
    if len(text) > MAX_CRON_LENGTH:
        raise ScheduleError("cron", f"the cron expression is longer than {MAX_CRON_LENGTH} characters")
    if text.startswith("@"):
        raise ScheduleError(
            "cron",
            f"cron {text!r}: nicknames such as @daily are not supported; write the fields, e.g. "
            "'0 0 * * *' for @daily or '0 * * * *' for @hourly",
        )
    fields = text.split()
    if len(fields) not in (5, 6):
        raise ScheduleError(
            "cron",
            f"cron {text!r} has {len(fields)} field(s); write 5 (minute hour day-of-month month "
            "day-of-week, e.g. '0 2 * * *') or 6 with seconds first (e.g. '*/10 * * * * *')",
        )
    tz = _zone(zone)
    try:
        probe = CronSim(text, datetime(2000, 1, 1, tzinfo=tz))
        next(probe)
    except CronSimError as exc:
        names = ["minute", "hour", "day-of-month", "month", "day-of-week"]
        order = ["second", *names] if len(fields) == 6 else names
        bad = str(exc).removeprefix("Bad ").strip()
        where = f" (field {order.index(bad) + 1}, {fields[order.index(bad)]!r})" if bad in order else ""
        raise ScheduleError(
            "cron",
            f"cron {text!r}: {str(exc).lower()}{where}; each field takes a number, a range (1-5), a "
            "list (1,15), a step (*/10) or *; day-of-week takes 0-7 or MON-SUN, month 1-12 or JAN-DEC",
        ) from None
    except (StopIteration, OverflowError, ValueError):
        raise ScheduleError("cron", f"cron {text!r} never fires; check the day and month fields") from None
    return Cron(text, tz.key, tz)


def _zone(zone: str) -> zoneinfo.ZoneInfo:
    name = zone.strip()
    if not name or len(name) > MAX_ZONE_LENGTH or name.startswith(("/", ".")) or ".." in name:
        raise ScheduleError(
            "timezone", f"time zone {zone[:80]!r} is not an IANA zone name such as Europe/Berlin or UTC"
        )
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        close = sorted(z for z in zoneinfo.available_timezones() if z.lower() == name.lower())
        hint = f"did you mean {close[0]}?" if close else "use an IANA name such as Europe/Berlin or UTC"
        raise ScheduleError("timezone", f"unknown time zone {name!r}: {hint}") from None


def upcoming(cron: Cron, after_ms: int, n: int) -> list[int]:
    """The next `n` slots strictly after `after_ms`."""
    out: list[int] = []
    t = after_ms
    for _ in range(n):
        t = cron.after(t)
        out.append(t)
    return out


def min_gap_ms(cron: Cron, from_ms: int, samples: int = GAP_SAMPLES) -> int:
    """The shortest time between two consecutive slots among the next `samples` (the tenant's
    max_schedule_rate bounds it)."""
    slots = upcoming(cron, from_ms, samples)
    return min(b - a for a, b in pairwise(slots))


def slot_key(schedule: str, slot_ms: int) -> str:
    """The start key of the run a slot starts: `<schedule>:<slot time in UTC ISO>`."""
    return f"{schedule}:{iso(datetime.fromtimestamp(slot_ms / 1000, UTC))}"


@dataclass(frozen=True)
class Missed:
    """Due slots that no run is started for: the first and last, and how many (None: many more than
    were counted, after a long downtime)."""

    first: int
    last: int
    count: int | None
    reason: str


@dataclass(frozen=True)
class Step:
    """What one transaction does with a schedule: start a run for slot `fire` (None: none), record the
    slots `missed` before it, and move the schedule to `next_at`, its first slot not yet dealt with."""

    fire: int | None
    missed: Missed | None
    next_at: int


def step(
    cron: Cron, next_at: int, now: int, catch_up: CatchUp, limit: int, on_time_ms: int = ON_TIME_MS
) -> Step | None:
    """The next move of a schedule whose first unhandled slot is `next_at` (None: nothing is due).

    One slot per transaction: `all` starts the oldest slot of the most recent `limit` due ones (the
    passes after it start the rest, one each), `last` the most recent one, `none` the most recent one
    if it is on time (at most `on_time_ms` late); every due slot older than those is missed."""
    if next_at > now:
        return None
    keep = limit if catch_up == "all" else 1
    due, complete, total = _latest_due(cron, next_at, now, keep)
    latest = due[-1]
    if catch_up == "all":
        fire: int | None = due[-keep] if len(due) >= keep else due[0]
        why = (
            f"more than {limit} slots were due at once (catch-up all, limit {limit}): only the most "
            f"recent {limit} start runs"
        )
    elif catch_up == "last":
        fire = latest
        why = "the scheduler was not running: catch-up last starts only the most recent missed slot"
    else:
        fire = latest if now - latest <= on_time_ms else None
        why = "the scheduler was not running at the slot time (catch-up none: missed slots do not start)"
    # When only the tail was enumerated, its oldest slot is one of the missed (it was kept for that).
    before = [s for s in due if fire is None or s < fire]
    missed = None
    if before:
        count = total - (len(due) - len(before)) if complete else None
        missed = Missed(next_at, before[-1], count, why)
    if fire is None:
        return Step(None, missed, cron.after(latest))
    return Step(fire, missed, cron.after(fire))


def _latest_due(
    cron: Cron, next_at: int, now: int, keep: int, budget: int = COUNT_BUDGET
) -> tuple[list[int], bool, int]:
    """The due slots (in [next_at, now], `next_at` being one) as (the most recent `keep`, plus one more
    when more were due, oldest first; whether every due slot was enumerated; how many were). Up to
    `budget` slots are counted one by one; past that (a long downtime) only a window before `now` is
    enumerated, widened until it holds enough slots."""
    found: deque[int] = deque(maxlen=keep + 1)
    count = 0
    t = next_at
    while t <= now and count < budget:
        found.append(t)
        count += 1
        t = cron.after(t)
    if t > now:
        return list(found), True, count
    span = _FIRST_WINDOW_MS
    while True:
        start = max(next_at - 1, now - span)
        found.clear()
        count = 0
        t = cron.after(start)
        while t <= now:
            found.append(t)
            count += 1
            t = cron.after(t)
        complete = start == next_at - 1
        if complete or len(found) > keep:
            return list(found), complete, count
        span *= 4
