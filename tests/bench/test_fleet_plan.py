"""The multi-process workloads' sizes (issue 22's targets at full size), the large ones measured once per
backend, the disk check before a run, and the report's verdicts on the three scale targets."""

from __future__ import annotations

import argparse
from collections import namedtuple
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from lab.bench import harness
from lab.bench.aggregate import aggregate
from lab.bench.fleet_plan import BYTES_PER_RUN, disk_needed, disk_problem, drop_database, fleet_sizes
from lab.bench.fleet_side import timer_stats
from lab.bench.report_fleet import fleet_section, fleet_targets, once_note, waiting_points
from lockstep.testing import PgCluster

Usage = namedtuple("Usage", "total used free")


def test_full_sizes_are_the_targets_and_the_large_ones_run_once() -> None:
    """Full size: 100,000 timers and waiting runs from 1,000 to 1,000,000 (four points), each once."""
    full = fleet_sizes(quick=False)
    assert full["timers"] == {"n": 100_000, "once": True}
    assert full["waiting"]["points"] == [1000, 10_000, 100_000, 1_000_000]
    assert full["waiting"]["once"] is True
    assert full["recovery"] == {"runs": 1000}
    assert "once" not in full["two_workers"]


def test_quick_sizes_stay_small_and_repeat() -> None:
    """--quick: a few thousand runs, repeated like every other workload."""
    quick = fleet_sizes(quick=True)
    assert quick["timers"]["n"] <= 2000
    assert max(quick["waiting"]["points"]) <= 10_000
    assert not quick["timers"]["once"]
    assert not quick["waiting"]["once"]


def _args(**kw: Any) -> argparse.Namespace:
    return argparse.Namespace(**{"quick": False, "fleet": None, "repeat": 3, "timeout": 1.0, **kw})


def test_workloads_measured_once_run_in_the_first_repetition_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """timers and waiting run in repetition 1 only; the others in each; the report says which."""
    calls: list[tuple[str, int]] = []

    def fake(name: str) -> Any:
        def run(url: str, workdir: Path, **kw: Any) -> dict[str, Any]:
            calls.append((name, len(calls)))
            if name == "waiting":
                return {str(n): {"db_mib": n / 256, "rss_mib": {"scheduler": 50.0}} for n in kw["points"]}
            return {"x": 1.0 + len(calls)}

        return run

    monkeypatch.setattr(harness, "WORKLOADS", {n: fake(n) for n in fleet_sizes(False)})
    args = _args(fleet=["timers", "waiting", "recovery"])
    reps = [{"sqlite": {"fleet": harness._fleet("sqlite", rep, tmp_path, None, args)}} for rep in range(3)]
    assert [n for n, _ in calls] == ["recovery", "timers", "waiting", "recovery", "recovery"]
    fl = aggregate(reps)["sqlite"]["fleet"]
    assert fl["measured"] == {"recovery": 3, "timers": 1, "waiting": 1}
    assert fl["waiting.1000000.db_mib"] == pytest.approx(1_000_000 / 256)
    text = "\n".join(fleet_section(fl, fleet_sizes(False)))
    assert "| timers: fired twice (must be 0) | — | measured once |" in text
    assert "| recovery: completed steps started again (must be 0) | — | median |" in text
    assert "Waiting runs (measured once;" in text


def test_disk_need_is_the_largest_database_of_the_chosen_workloads() -> None:
    """Each database is dropped once measured: the need is the largest, and --fleet narrows it."""
    sizes = fleet_sizes(False)
    assert disk_needed(sizes, ["sqlite"], None) == 1_000_000 * BYTES_PER_RUN["sqlite"]
    assert disk_needed(sizes, ["sqlite", "postgresql"], None) == 1_000_000 * BYTES_PER_RUN["postgresql"]
    assert disk_needed(sizes, ["sqlite"], ["timers"]) == 100_500 * BYTES_PER_RUN["sqlite"]


def test_disk_check_refuses_up_front_with_what_to_do(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Too little free disk: the harness exits with a usage error naming the need, before any work."""
    monkeypatch.setattr("lab.bench.fleet_plan.shutil.disk_usage", lambda _: Usage(10 * 2**30, 0, 2**30))
    assert disk_problem(tmp_path, 2**30) is not None
    assert "GiB free" in str(disk_problem(tmp_path, 5 * 2**30))
    monkeypatch.setattr(harness, "_repetition", lambda *a: pytest.fail("ran despite the disk"))
    with pytest.raises(SystemExit) as exc:
        harness.main(["--backends", "sqlite", "--engines", "lockstep", "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "only 1.0 GiB is free" in err
    assert "--quick" in err


def test_timer_stats_give_the_lags_the_rates_and_the_doubles() -> None:
    """Lags behind the due time, the firing rate overall and per partition, timers fired twice."""
    due = datetime(2026, 1, 1, tzinfo=UTC)
    fired = [(f"run{i:04x}", (due + timedelta(seconds=i / 100)).isoformat()) for i in range(1, 201)]
    fired.append(fired[0])
    st = timer_stats(due.timestamp(), fired)
    assert st["all_fired_s"] == pytest.approx(2.0)
    assert st["fired_per_s"] == pytest.approx(201 / 2.0)
    assert st["lag_p50_ms"] == pytest.approx(1000, abs=20)
    assert st["partition_fired_per_s_p50"] > 0
    assert st["fired_twice"] == 1


def _fleet(**kw: float) -> dict[str, Any]:
    fl: dict[str, Any] = {"repetitions": 3, "measured": {"timers": 1, "waiting": 1, "recovery": 3}}
    for n in (1000, 10_000, 100_000, 1_000_000):
        fl |= {f"waiting.{n}.rss_mib.{p}": 50.0 for p in ("serve", "scheduler", "worker")}
        fl[f"waiting.{n}.scheduler_idle_cpu_pct"] = 0.3
    return fl | kw


def _target(targets: list[tuple[str, str, str]], word: str) -> tuple[str, str, str]:
    return next(t for t in targets if word in t[0])


def test_targets_met_state_the_number() -> None:
    """Met: the measured number, at the targets' sizes, and 'measured once' for the large workloads."""
    fl = _fleet(**{"timers.all_fired_s": 3.2, "timers.fired_twice": 0.0})
    fl |= {"recovery.recovery_s": 0.8, "recovery.completed_steps_started_again": 0.0}
    ts = fleet_targets("sqlite", fl, fleet_sizes(False))
    name, status, measured = _target(ts, "timers due")
    assert (status, measured) == ("met", "3.20 s, 0 fired twice (measured once)")
    assert name.startswith("sqlite: 100,000 timers")
    name, status, measured = _target(ts, "memory flat")
    assert "from 1,000 to 1,000,000" in name
    assert status == "met"
    assert measured.startswith("worst growth x1.00 (")
    assert _target(ts, "recovery")[1:] == ("met", "0.80 s, 0 completed steps re-run")


def test_targets_not_met_give_the_measured_reason() -> None:
    """Not met: the rates and lags of the timers, the growing process, the parts of the recovery time."""
    fl = _fleet(**{"timers.all_fired_s": 11.5, "timers.fired_twice": 0.0, "timers.fired_per_s": 8700.0})
    fl |= {"timers.partition_fired_per_s_p50": 136.0, "timers.lag_p99_ms": 11000.0}
    fl |= {"waiting.1000000.rss_mib.serve": 80.0}
    fl |= {"recovery.recovery_s": 2.3, "recovery.completed_steps_started_again": 0.0}
    fl |= {"recovery.restart_s": 1.1, "recovery.after_ready_s": 1.2, "recovery.activity_floor_s": 1.25}
    ts = fleet_targets("postgresql", fl, fleet_sizes(False))
    _, status, measured = _target(ts, "timers due")
    assert status == "**not met**"
    assert "8,700/s overall, 136/s per partition" in measured
    assert "lag p50 / p90 / p99 — / — / 11,000 ms" in measured
    _, status, measured = _target(ts, "memory flat")
    assert status == "**not met**"
    assert "x1.60 (serve: 50.0 -> 50.0 -> 50.0 -> 80.0 MiB" in measured
    _, status, measured = _target(ts, "recovery")
    assert status == "**not met**"
    assert "1.10 s starting the processes" in measured
    assert "at least 1.25 s" in measured
    assert "no lease" not in measured
    fl |= {"recovery.restart_s": 23.0, "recovery.abandoned_leases": 0.0, "recovery.lease_ttl_s": 10.0}
    measured = _target(fleet_targets("postgresql", fl, fleet_sizes(False)), "recovery")[2]
    assert "no lease was left to abandon: the start-up outlasted the 10 s lease" in measured


def test_quick_sizes_say_they_are_below_the_target() -> None:
    """A target measured at --quick sizes names the size it was measured at and the target's."""
    quick = fleet_sizes(True)
    fl = {"timers.all_fired_s": 0.5, "timers.fired_twice": 0.0, "waiting.1000.rss_mib.serve": 50.0}
    fl["waiting.10000.rss_mib.serve"] = 50.0
    ts = fleet_targets("sqlite", fl, quick)
    assert "(measured at 2,000; the target names 100,000)" in _target(ts, "timers due")[2]
    assert "(measured at 10,000; the target names 1,000,000)" in _target(ts, "memory flat")[2]


def test_waiting_curve_reads_old_reports_with_two_sizes() -> None:
    """Reports from before the curve (small, large) still render their two points."""
    assert waiting_points({"waiting": {"small": 1000, "large": 100_000}}) == [1000, 100_000]
    assert waiting_points(fleet_sizes(False)) == [1000, 10_000, 100_000, 1_000_000]
    text = "\n".join(fleet_section(_fleet(**{"waiting.1000.db_mib": 3.7}), fleet_sizes(False)))
    assert "| 1,000 | 50.0 / 50.0 / 50.0 | 3.7 | 3.79 | 0.30 | — |" in text
    assert "| 1,000,000 | 50.0 / 50.0 / 50.0 |" in text


def test_dropping_a_sqlite_database_removes_its_files_and_wake_directory(tmp_path: Path) -> None:
    """A measured SQLite database goes with its WAL and wake-up directory; its neighbours stay."""
    db = tmp_path / "fleet_timers_0.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").write_text("x")
    (tmp_path / "fleet_timers_0.db.wake").mkdir()
    (tmp_path / "fleet_timers_0.db.wake" / "w1").write_text("")
    (tmp_path / "other.db").write_text("x")
    drop_database(f"sqlite:///{db}")
    assert [p.name for p in tmp_path.iterdir()] == ["other.db"]


def test_sizes_line_names_the_workloads_measured_once() -> None:
    """The report's sizes line says which workloads were measured once; none at --quick or one pass."""
    assert "100,000 timers, waiting runs up to 1,000,000" in once_note(fleet_sizes(False), 3)
    assert once_note(fleet_sizes(True), 3) == ""
    assert once_note(fleet_sizes(False), 1) == ""


def test_dropping_a_postgresql_database_removes_it(pg_cluster: PgCluster) -> None:
    """A measured PostgreSQL database is dropped, even with a session still on it."""
    url = pg_cluster.create_database("bench_drop_me")
    with psycopg.connect(url):
        drop_database(url)
    names = {r[0] for r in pg_cluster.sql("SELECT datname FROM pg_database")}
    assert "bench_drop_me" not in names


def test_round_trip_target_splits_the_server_part_from_the_worker_part() -> None:
    """Measured with the answer's time: the verdict says how much is the server's and how much the
    worker's; older reports without it keep the plain number."""
    fl = _fleet(**{"approval_round_trip.p50_ms": 18.8, "approval_round_trip.answered_p50_ms": 12.5})
    measured = _target(fleet_targets("postgresql", fl, fleet_sizes(False)), "approval round trip")[2]
    assert measured.startswith("18.8 ms; of it 12.5 ms until the decision was answered")
    assert "and 6.3 ms for the worker to be woken" in measured
    fl = _fleet(**{"approval_round_trip.p50_ms": 7.2})
    assert _target(fleet_targets("sqlite", fl, fleet_sizes(False)), "approval round trip")[2] == "7.2 ms"
