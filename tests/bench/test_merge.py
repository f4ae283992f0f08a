"""A benchmark run in parts becomes one report: repetitions merged by index, nothing measured twice
replaced, every part named with its command, and parts that cannot form one report refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lab.bench.common import rate
from lab.bench.fleet_plan import fleet_sizes
from lab.bench.merge import MergeError, main, merge
from lab.bench.report import render_markdown

MACHINE = {
    "nproc": 2,
    "cpu_model": "test",
    "mem_total_mib": 1024,
    "kernel": "6",
    "python": "3.11",
    "sqlite": "3.40",
}
VERSIONS: dict[str, str | None] = {"lockstep": "0.1.0", "dbos": "3.4.0", "psycopg": "3", "sqlalchemy": "2"}
VERSIONS["postgresql_server"] = None


def _part(command: str, reps: list[dict[str, Any]], began: str, finished: str) -> dict[str, Any]:
    sizes = {"throughput_runs": 2000, "latency_runs": 200, "latency_warmup": 5, "raw_commits": 5000}
    sizes |= {"long_steps": 20, "repeat": len(reps), "fleet": fleet_sizes(False)}
    return {
        "command": command,
        "began": began,
        "finished": finished,
        "quick": False,
        "machine": MACHINE,
        "versions": VERSIONS,
        "sizes": sizes,
        "repetitions": reps,
    }


def _engines(t: float) -> dict[str, Any]:
    return {
        "sqlite": {
            "raw": {"sqlite_full": {"commits_per_s": 1000.0 * t}},
            "lockstep": {"throughput": rate(100, 3, 1.0 / t, 0.0)},
            "fleet": {"recovery": {"recovery_s": t}},
        }
    }


def _engine_part() -> dict[str, Any]:
    reps = [_engines(t) for t in (1.0, 2.0, 3.0)]
    return _part("python -m lab.bench --fleet recovery", reps, "2026-12-03T16:00:00", "2026-12-03T17:30:00")


def _once_part() -> dict[str, Any]:
    rep = {
        "sqlite": {
            "raw": {"sqlite_full": {"commits_per_s": 99.0}},
            "fleet": {"timers": {"all_fired_s": 4.0, "fired_twice": 0}},
        }
    }
    cmd = "python -m lab.bench --fleet timers --repeat 1"
    return _part(cmd, [rep], "2026-12-04T10:00:00", "2026-12-04T10:40:00")


def test_parts_merge_by_repetition_and_name_every_command() -> None:
    """Medians over the first part's three repetitions; the second part's workload measured once."""
    report = merge([_engine_part(), _once_part()])
    med = report["medians"]["sqlite"]
    assert med["lockstep"]["throughput.steps_per_s"] == 600.0
    assert med["fleet"]["recovery.recovery_s"] == 2.0
    assert med["fleet"]["timers.all_fired_s"] == 4.0
    assert med["fleet"]["measured"] == {"recovery": 3, "timers": 1}
    # the raw rates measured next to the engines are the ones kept, not the later part's
    assert med["raw_commits_per_s"]["sqlite_full"] == 2000.0
    assert (report["began"], report["finished"]) == ("2026-12-03T16:00:00", "2026-12-04T10:40:00")
    text = render_markdown(report)
    assert "Generated in 2 parts" in text
    assert "- `python -m lab.bench --fleet timers --repeat 1` from 2026-12-04T10:00:00" in text
    assert "**median of 3 repetition(s)**" in text


def test_a_workload_measured_in_two_parts_is_refused() -> None:
    """Two parts with the same workload would silently pick one: the merge names the clash instead."""
    with pytest.raises(MergeError, match="lockstep measured twice"):
        merge([_engine_part(), _engine_part()])
    again = _once_part()
    again["repetitions"][0]["sqlite"]["fleet"]["recovery"] = {"recovery_s": 9.0}
    with pytest.raises(MergeError, match=r"workload\(s\) recovery measured twice"):
        merge([_engine_part(), again])


def test_parts_from_other_machines_or_versions_are_refused() -> None:
    """One report is one machine and one lockstep version."""
    other = _once_part()
    other["machine"] = {**MACHINE, "nproc": 4}
    with pytest.raises(MergeError, match="'machine'"):
        merge([_engine_part(), other])
    other = _once_part()
    other["versions"] = {**VERSIONS, "lockstep": "0.2.0"}
    with pytest.raises(MergeError, match="another lockstep version"):
        merge([_engine_part(), other])


def test_cli_writes_the_report_and_refuses_bad_input_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m lab.bench.merge` writes bench.md and bench.json; a file that is not a report: exit 2."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_engine_part()))
    b.write_text(json.dumps(_once_part()))
    assert main([str(a), str(b), "--out", str(tmp_path / "out")]) == 0
    merged = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert [p["command"] for p in merged["parts"]] == [_engine_part()["command"], _once_part()["command"]]
    assert (tmp_path / "out" / "bench.md").read_text().startswith("# lockstep vs DBOS")
    b.write_text("{}")
    assert main([str(a), str(b), "--out", str(tmp_path / "bad")]) == 2
    assert "part 2 lacks command" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
    assert main([str(a), str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err


def test_a_merged_report_merged_again_keeps_naming_its_parts() -> None:
    """Adding a part to an already merged report lists the original runs, not the merged one."""
    once = merge([_engine_part()])
    twice = merge([once, _once_part()])
    assert [p["command"] for p in twice["parts"]] == [_engine_part()["command"], _once_part()["command"]]


def test_a_workload_measured_again_replaces_the_earlier_one_only_when_asked() -> None:
    """--replace NAME: the later part's measurement wins in every repetition, and the report says so."""
    again = _once_part()
    again["repetitions"][0]["sqlite"]["fleet"]["recovery"] = {"recovery_s": 9.0}
    report = merge([_engine_part(), again], frozenset({"recovery"}))
    fleet = report["medians"]["sqlite"]["fleet"]
    assert fleet["recovery.recovery_s"] == 9.0  # not a median mixing 1, 2, 3 and 9
    assert fleet["measured"]["recovery"] == 1
    assert report["parts"][1]["replaces"] == ["recovery"]
    assert "its recovery replaces the earlier part's" in render_markdown(report)
