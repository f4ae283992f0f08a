"""The soak's judgement (lab/soak): memory is flat only when it is, latency is bucketed by the minute a
run finished, and the report says FAILED when anything is wrong."""

from __future__ import annotations

from typing import Any

from lab.soak.report import flatness, markdown
from lab.soak.sample import latency_by_minute, percentile
from lockstep.core.events import Event


def samples(rss: list[float], fds: list[int], pid: int = 42) -> list[dict[str, Any]]:
    return [
        {"minute": float(m), "procs": {"w1": {"pid": pid, "rss_mib": r, "fds": f}}}
        for m, (r, f) in enumerate(zip(rss, fds, strict=True))
    ]


def test_a_process_whose_memory_stays_level_is_flat() -> None:
    """Level RSS and open files over 12 minutes: flat."""
    (row,) = flatness(samples([100.0] * 6 + [104.0] * 7, [7] * 13))
    assert row["flat"]
    assert row["minutes"] == 12.0
    assert row["rss_warm_mib"] == 100.0


def test_a_process_that_keeps_growing_is_not_flat() -> None:
    """RSS doubling after warm-up, or file descriptors piling up, is a leak."""
    (grows,) = flatness(samples([100.0 + 20 * m for m in range(13)], [7] * 13))
    (leaks_fds,) = flatness(samples([100.0] * 13, [7 + 5 * m for m in range(13)]))
    assert not grows["flat"]
    assert not leaks_fds["flat"]


def test_short_lived_processes_are_not_judged() -> None:
    """A process killed after 3 minutes has no warm-up to compare with: it is left out."""
    assert flatness(samples([100.0, 300.0, 900.0, 2000.0], [5, 5, 5, 5])) == []


def ev(kind: str, at: str, seq: int, data: dict[str, Any]) -> Event:
    return Event.from_json({"seq": seq, "type": kind, "at": at, "v": 1, "data": data})


def test_latency_is_bucketed_by_the_minute_a_run_finished() -> None:
    """Start to end per run, in the minute it ended; unfinished runs are left out."""
    t0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    started = {"run_id": "r", "tenant": "t", "definition": {}, "input": None, "start_key": None,
               "actor": None, "steps": []}  # fmt: skip
    done = ev("RunCompleted", "2027-01-15T08:01:30Z", 2, {})
    histories = {
        "a": [ev("RunStarted", "2027-01-15T08:01:28Z", 1, started), done],
        "b": [ev("RunStarted", "2027-01-15T08:01:29.500Z", 1, started), done],
        "c": [ev("RunStarted", "2027-01-15T08:01:00Z", 1, started)],
    }
    (minute,) = latency_by_minute(histories, t0)
    assert minute["minute"] == 1
    assert minute["finished"] == 2
    assert minute["p50_s"] in (0.5, 2.0)
    assert minute["p99_s"] == 2.0


def test_percentile_of_nothing_is_none() -> None:
    """No runs finished in a minute: no percentile, not a zero."""
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0


def test_the_report_says_failed_when_a_check_found_something() -> None:
    """One violation is enough for FAILED in the headline, with its example."""
    result = {
        "settings": {"seed": 1, "rate": 4.0, "fault_interval_s": 20.0, "duration_s": 1800.0},
        "duration_min": 30.0, "drain_s": 2.0, "runs": 10, "outcomes": {"completed": 10},
        "violations": {"effects_duplicated": 1, "stuck": 0},
        "examples": {"effects_duplicated": ["r1/charge: 2 charge effects downstream"]},
        "periodic_checks": [], "faults": {"SIGKILL worker": 3}, "faults_skipped": {},
        "fault_details": {}, "load": {}, "cluster": {"deaths_expected": 3, "deaths_unexpected": [],
        "generations": {}}, "latency": [], "samples": [], "flatness": [], "passed": False,
        "db_mib": [1.0, 2.0], "db_bytes_per_run": 100,
    }  # fmt: skip
    text = markdown(result)
    assert "**FAILED**" in text
    assert "r1/charge: 2 charge effects downstream" in text


def test_the_driver_is_shown_but_not_judged() -> None:
    """The soak's own process keeps what it saw: its growth is reported, not a leak of lockstep's."""
    rows = samples([100.0 + 20 * m for m in range(13)], [7] * 13)
    for row in rows:
        row["procs"] = {"driver": row["procs"]["w1"]}
    (driver,) = flatness(rows)
    assert driver["flat"]
    assert driver["rss_end_mib"] == 340.0
