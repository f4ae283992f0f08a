"""The schedules' checks of the fault suite (scenario `schedules_under_faults`): from the stored rows only
(the schedule's row, its slot records, the runs and their start keys), each schedule's slots from its
first to its next are accounted for by its policies.

- slots_duplicated: a slot with two runs (start keys `<name>:<slot>`, a broken build's `#n` suffix
  ignored), or a slot both started and recorded as skipped or missed;
- slots_early: a run started before its slot's time;
- slots_missed: a due slot with no run that the policies do not excuse: catch-up `all` (within its
  limit) must start every slot; a slot may be skipped only under overlap `skip`; a slot may be missed
  under `last` or `none` only if a later slot was already due when the pass recorded it (it was not the
  most recent), or under `none` if it was more than a minute late then;
- slots_unknown: a run whose start key names no slot of the cron, or one at or after the schedule's
  next slot (a slot that was not due yet).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lockstep.core.schedule import ON_TIME_MS, parse_cron
from lockstep.core.timeutil import parse_iso

from .checker import SCHEDULE_CHECKS, Verdict
from .faultfleet import FaultFleet

__all__ = ["SCHEDULE_CHECKS", "Watched", "check_schedules"]


@dataclass(frozen=True)
class Watched:
    """A schedule the scenario made: its cron (UTC), policies and first slot (ms)."""

    name: str
    cron: str
    overlap: str
    catch_up: str
    limit: int
    first: int


def _ms(text: str) -> int:
    return int(parse_iso(text).timestamp() * 1000)


def check_schedules(f: FaultFleet, tenant: str, watched: list[Watched], v: Verdict) -> dict[str, Any]:
    """Flag every slot the policies do not account for; returns the counts for the report."""
    numbers: dict[str, Any] = {}
    for w in watched:
        cron = parse_cron(w.cron, "UTC")
        (sid, nxt), *_ = f.sql(
            "SELECT id, next_at FROM schedules WHERE tenant = ? AND name = ?", (tenant, w.name)
        )
        slots: list[int] = []
        t = w.first
        while t < int(nxt):
            slots.append(t)
            t = cron.after(t)
        due = set(slots)
        runs: dict[int, list[tuple[str, int]]] = {}
        for run_id, key, created in f.sql(
            "SELECT run_id, start_key, created_at FROM runs WHERE tenant = ? AND start_key LIKE ?",
            (tenant, f"{w.name}:%"),
        ):
            text = str(key).removeprefix(f"{w.name}:").split("#")[0]
            if text.startswith("trigger:"):
                continue
            slot = _ms(text)
            if slot not in due:
                v.flag(
                    "slots_unknown", f"{w.name}: run {run_id} has start key {key}, no due slot of {w.cron}"
                )
                continue
            runs.setdefault(slot, []).append((str(run_id), _ms(str(created))))
        skipped: set[int] = set()
        missed: set[int] = set()
        for slot_at, until_at, outcome, recorded in f.sql(
            "SELECT slot_at, until_at, outcome, recorded_at FROM schedule_slots WHERE schedule_id = ?", (sid,)
        ):
            if outcome == "skipped":
                skipped.add(int(slot_at))
                if w.overlap != "skip":
                    v.flag("slots_missed", f"{w.name}: slot {slot_at} skipped under overlap {w.overlap}")
            elif outcome == "missed":
                _missed(w, cron, int(slot_at), int(until_at), _ms(str(recorded)), due, missed, v)
        for slot in slots:
            got = runs.get(slot, [])
            if len(got) > 1:
                v.flag(
                    "slots_duplicated",
                    f"{w.name}: slot {slot} has {len(got)} runs ({got[0][0]}, {got[1][0]})",
                )
            if got and (slot in skipped or slot in missed):
                v.flag("slots_duplicated", f"{w.name}: slot {slot} was started and also skipped or missed")
            for run_id, created in got:
                if created < slot:
                    v.flag(
                        "slots_early", f"{w.name}: run {run_id} started {slot - created} ms before its slot"
                    )
            if not got and slot not in skipped and slot not in missed:
                v.flag("slots_missed", f"{w.name}: due slot {slot} has no run and no record of why")
        numbers[f"{w.name}: slots due"] = len(slots)
        numbers[f"{w.name}: started"] = sum(len(r) for r in runs.values())
        numbers[f"{w.name}: skipped, missed"] = f"{len(skipped)}, {len(missed)}"
    return numbers


def _missed(
    w: Watched,
    cron: Any,
    first: int,
    last: int,
    recorded: int,
    due: set[int],
    missed: set[int],
    v: Verdict,
) -> None:
    """A recorded range of missed slots: excused only by the catch-up policy, at the time it was recorded."""
    t = first
    covered = []
    while t <= last:
        covered.append(t)
        t = cron.after(t)
    later_due = cron.after(last) <= recorded  # a more recent slot was due at that pass
    late = recorded - last > ON_TIME_MS
    excused = (
        (w.catch_up == "last" and later_due)
        or (w.catch_up == "none" and (later_due or late))
        or (
            w.catch_up == "all"
            and len(covered) > 0
            and later_due
            and _over_limit(cron, last, recorded, w.limit)
        )
    )
    if not excused:
        v.flag("slots_missed", f"{w.name}: slots {first}..{last} recorded missed under catch-up {w.catch_up}")
    missed.update(s for s in covered if s in due)


def _over_limit(cron: Any, last: int, recorded: int, limit: int) -> bool:
    """Under catch-up `all`, slots are missed only when more than `limit` newer ones were due."""
    n, t = 0, cron.after(last)
    while t <= recorded and n <= limit:
        n += 1
        t = cron.after(t)
    return n >= limit
