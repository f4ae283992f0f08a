"""The pure schedule rules (core/schedule.py): cron and zone checks with messages that say how to fix
them, DST in Europe/Berlin (a missing 02:30 fires once right after the jump, a doubled 02:30 fires once),
and `step`, the planner of one pass, against a model: over any sequence of passes, every slot is dealt
with once, in order, none early, and only the catch-up policy decides which start runs."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockstep.core.schedule import ON_TIME_MS, ScheduleError, min_gap_ms, parse_cron, slot_key, step, upcoming


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def utc(t: int) -> str:
    return datetime.fromtimestamp(t / 1000, UTC).isoformat()


BERLIN_0230 = parse_cron("30 2 * * *", "Europe/Berlin")


def test_spring_forward_the_missing_0230_fires_once_at_0300_local() -> None:
    """On 2025-03-30 Berlin jumps from 02:00 CET to 03:00 CEST: 02:30 does not exist. The slot fires
    once, at 03:00 CEST (01:00 UTC); the days around it at 02:30 local."""
    slots = upcoming(BERLIN_0230, ms("2025-03-28T12:00:00+00:00"), 4)
    assert [utc(t) for t in slots] == [
        "2025-03-29T01:30:00+00:00",  # 02:30 CET
        "2025-03-30T01:00:00+00:00",  # 03:00 CEST, right after the jump
        "2025-03-31T00:30:00+00:00",  # 02:30 CEST
        "2025-04-01T00:30:00+00:00",
    ]


def test_fall_back_the_doubled_0230_fires_once() -> None:
    """On 2025-10-26 Berlin goes from 03:00 CEST back to 02:00 CET: 02:30 happens twice (00:30 and
    01:30 UTC). The slot fires once, at the first; the next is the next day's."""
    slots = upcoming(BERLIN_0230, ms("2025-10-24T12:00:00+00:00"), 3)
    assert [utc(t) for t in slots] == [
        "2025-10-25T00:30:00+00:00",  # 02:30 CEST
        "2025-10-26T00:30:00+00:00",  # the first 02:30, CEST
        "2025-10-27T01:30:00+00:00",  # 02:30 CET
    ]
    # Started from between the two 02:30s, the doubled one is not fired again.
    assert utc(BERLIN_0230.after(ms("2025-10-26T00:30:00+00:00"))) == "2025-10-27T01:30:00+00:00"


def test_interval_crons_fire_in_both_passes_of_the_doubled_hour() -> None:
    """`*/30` is evenly spaced in real time: through the fall-back it fires every 30 minutes."""
    c = parse_cron("*/30 * * * *", "Europe/Berlin")
    slots = upcoming(c, ms("2025-10-25T23:59:00+00:00"), 6)
    assert [b - a for a, b in itertools.pairwise(slots)] == [30 * 60_000] * 5


@pytest.mark.parametrize(
    ("cron", "zone", "field", "message"),
    [
        ("", "UTC", "cron", "empty"),
        ("61 * * * *", "UTC", "cron", "bad minute (field 1, '61')"),
        ("0 25 * * *", "UTC", "cron", "bad hour (field 2, '25')"),
        ("0 0 30 2 *", "UTC", "cron", "bad day-of-month"),
        ("0 0 * * 8", "UTC", "cron", "bad day-of-week"),
        ("* * *", "UTC", "cron", "has 3 field(s); write 5"),
        ("* * * * * * *", "UTC", "cron", "has 7 field(s)"),
        ("@hourly", "UTC", "cron", "nicknames"),
        ("0 2 * * *", "Europe/Berln", "timezone", "unknown time zone 'Europe/Berln'"),
        ("0 2 * * *", "utc", "timezone", "did you mean UTC"),
        ("0 2 * * *", "../etc/passwd", "timezone", "not an IANA zone name"),
        ("0 2 * * *", "", "timezone", "not an IANA zone name"),
    ],
)
def test_bad_crons_and_zones_say_what_where_and_how(cron: str, zone: str, field: str, message: str) -> None:
    """Each refusal names the field and the problem, and shows how to write it."""
    with pytest.raises(ScheduleError) as caught:
        parse_cron(cron, zone)
    assert caught.value.field == field
    assert message in str(caught.value)


def test_min_gap_and_keys() -> None:
    start = ms("2025-01-06T00:00:00+00:00")
    assert min_gap_ms(parse_cron("*/15 * * * *", "UTC"), start) == 15 * 60_000
    assert min_gap_ms(parse_cron("0,1 9 * * MON", "UTC"), start) == 60_000
    assert min_gap_ms(parse_cron("*/5 * * * * *", "UTC"), start) == 5_000
    assert slot_key("nightly", ms("2025-03-30T01:00:00+00:00")) == "nightly:2025-03-30T01:00:00.000Z"


EVERY_10S = parse_cron("*/10 * * * * *", "UTC")
T0 = ms("2025-01-01T00:00:00+00:00")


@settings(max_examples=150, deadline=None)
@given(
    gaps=st.lists(st.integers(min_value=0, max_value=400_000), min_size=1, max_size=25),
    policy=st.sampled_from(["none", "last", "all"]),
    limit=st.integers(min_value=1, max_value=12),
)
def test_step_deals_with_every_slot_once_in_order(gaps: list[int], policy: str, limit: int) -> None:
    """Passes at arbitrary times (gaps of 0 to 400 s, i.e. downtimes of up to 40 slots): every slot
    up to the last pass is dealt with exactly once (started or missed), in order, none before its time;
    `all` misses only slots beyond its limit, `last` starts the newest of each backlog, `none` starts a
    slot only while it is on time."""
    next_at = EVERY_10S.after(T0)
    first = next_at
    now = T0
    started: list[int] = []
    missed: list[tuple[int, int, int | None]] = []
    for gap in gaps:
        now += gap
        while (plan := step(EVERY_10S, next_at, now, policy, limit)) is not None:  # type: ignore[arg-type]
            assert plan.next_at > next_at
            if plan.missed is not None:
                assert plan.missed.first == next_at
                missed.append((plan.missed.first, plan.missed.last, plan.missed.count))
            if plan.fire is not None:
                assert plan.fire <= now
                if policy == "none":
                    assert now - plan.fire <= ON_TIME_MS
                started.append(plan.fire)
            next_at = plan.next_at
        assert next_at > now
    every = [t for t in [first, *upcoming(EVERY_10S, first, 5000)] if t <= now]
    dealt = sorted([*started, *(t for a, b, _ in missed for t in every if a <= t <= b)])
    assert dealt == every  # each slot once: started or missed, never both, never twice
    assert started == sorted(set(started))
    for a, b, count in missed:
        if count is not None:
            assert count == sum(1 for t in every if a <= t <= b)
    if policy == "all":
        assert all(count is None or count >= 1 for _a, _b, count in missed)
