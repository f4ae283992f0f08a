"""The benchmark harness's own logic: which measurements a repetition makes and in which order, the
medians and spreads, the report's ratios and targets, and the hardware limit's recording and replay."""

from __future__ import annotations

import shlex
import sqlite3
from pathlib import Path

import pytest

from lab.bench.aggregate import aggregate, entries, plan, rotated
from lab.bench.common import Count, long_runs, rate
from lab.bench.hardware import Recorder, is_write, replay
from lab.bench.harness import parse_args
from lab.bench.lockstep_side import record_workload
from lab.bench.report_cpu import cpu_budget_section
from lab.bench.report_engines import RERUNS, engine_section, per_step_cost_ratio, reference_peer


def test_rotation_moves_every_engine_through_every_position() -> None:
    """Each repetition starts at another engine, so none always runs first."""
    items = ["a", "b", "c"]
    firsts = {rotated(items, rep)[0] for rep in range(3)}
    assert firsts == set(items)
    assert sorted(rotated(items, 4)) == items
    assert rotated([], 2) == []


def test_plan_runs_each_backends_peers_in_both_shapes_and_the_slots() -> None:
    """SQLite gets DBOS in both journal modes, PostgreSQL gets Absurd; lockstep's slots in the split shape."""
    sqlite = [
        name
        for name, _shape, _c in plan(
            "sqlite", ["lockstep", "dbos", "dbos_wal", "absurd"], ["embedded", "split"], [4, 8]
        )
    ]
    assert "absurd" not in sqlite
    assert "dbos_wal/split" in sqlite
    assert sqlite[-2:] == ["lockstep/split@4", "lockstep/split@8"]
    pg = plan("postgresql", ["lockstep", "dbos", "dbos_wal", "absurd"], ["embedded"], [4])
    assert [n for n, _s, _c in pg] == ["lockstep", "dbos", "absurd"]
    assert ("lockstep/split@4", "split", 4) not in pg  # no split shape asked: no slots either


def test_aggregate_takes_medians_and_spread_and_skips_failures() -> None:
    """Medians over the repetitions that succeeded, [min, max] beside them, the errors kept."""
    reps = [
        {"sqlite": {"raw": {}, "lockstep": {"throughput": rate(10, 3, t, 0.0)}, "dbos": {"error": "boom"}}}
        for t in (1.0, 2.0, 3.0)
    ]
    med = aggregate(reps)["sqlite"]
    assert entries([r["sqlite"] for r in reps]) == ["lockstep", "dbos"]
    assert med["lockstep"]["throughput.steps_per_s"] == 15.0
    assert med["lockstep"]["spread"]["throughput.steps_per_s"] == [10.0, 30.0]
    assert med["dbos"]["repetitions_ok"] == 0
    assert med["dbos"]["errors"] == ["boom"] * 3


def test_per_step_cost_prefers_cpu_and_falls_back_to_rates() -> None:
    """The long runs' per-step cost over the short ones': CPU (engine + database) when measured."""
    cpu = {"throughput.engine_ms_per_step": 0.2, "throughput.db_ms_per_step": 0.2}
    cpu |= {"throughput_long.engine_ms_per_step": 0.5, "throughput_long.db_ms_per_step": 0.1}
    assert per_step_cost_ratio(cpu) == pytest.approx(1.5)
    assert per_step_cost_ratio({"throughput.steps_per_s": 300.0, "throughput_long.steps_per_s": 200.0}) == 1.5
    assert long_runs(2000, 20) == 300
    assert long_runs(1, 20) == 1


def test_report_compares_with_dbos_in_wal_on_sqlite_and_states_targets() -> None:
    """On SQLite the 10x target is against DBOS with WAL; every peer gets a lockstep/peer column."""
    assert reference_peer("sqlite") == "dbos_wal"
    assert reference_peer("postgresql") == "dbos"
    med = {
        "lockstep": {"throughput.steps_per_s": 1000.0, "repetitions_ok": 1},
        "dbos": {"throughput.steps_per_s": 50.0, "repetitions_ok": 1},
        "dbos_wal": {"throughput.steps_per_s": 200.0, "repetitions_ok": 1},
        "hardware": {"one_connection_steps_per_s": 4000.0},
    }
    lines, targets = engine_section("sqlite", med, 20)
    text = "\n".join(lines)
    assert "DBOS (DELETE, its default)" in text
    assert "DBOS (WAL, synchronous=FULL)" in text
    assert "| 20.00x | 5.00x |" in text
    verdicts = {name: status for name, status, _m in targets}
    assert verdicts["sqlite, embedded: steps/s >= 10x DBOS (WAL)"] == "**not met**"
    assert verdicts["sqlite, embedded: steps/s >= 50% of the measured hardware limit"] == "**not met**"


def test_is_write_keeps_writes_and_drops_reads() -> None:
    """The recorder replays what changes the database, never a read (locking reads included)."""
    assert is_write("  INSERT INTO events VALUES (1)")
    assert is_write(b"UPDATE runs SET x = 1")
    assert is_write("NOTIFY lockstep_tasks")
    assert is_write("SAVEPOINT lockstep_item")
    assert not is_write("SELECT * FROM runs WHERE run_id = ? FOR UPDATE")
    assert is_write("WITH d AS (DELETE FROM tasks RETURNING 1) SELECT count(*) FROM d")
    assert not is_write("WITH x AS (SELECT 1) SELECT * FROM x")


def _counts(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        return {
            t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("runs", "events", "tasks")
        }


def test_recorded_writes_replayed_rebuild_the_same_rows(tmp_path: Path) -> None:
    """A few runs recorded and replayed on a fresh database give the same runs, events and tasks rows."""
    from lockstep.store import open_store

    trace, fresh = tmp_path / "trace.db", tmp_path / "replay.db"
    rec = Recorder()
    with rec.installed():
        mark, steps, sps = record_workload(f"sqlite:///{trace}", 4, lambda: len(rec.transactions))
    assert steps == 12
    assert sps > 0
    assert len(rec.written(mark)) > 0
    open_store(f"sqlite:///{fresh}").close()
    replay([f"sqlite:///{fresh}"], rec.written(0))
    assert _counts(fresh) == _counts(trace)
    done = Count(f"sqlite:///{fresh}", "SELECT count(*) FROM runs WHERE status = 'completed'")
    try:
        assert done() == 4
    finally:
        done.close()


def test_every_rerun_command_of_the_report_is_a_valid_command_line() -> None:
    """The report's 'Rerunning one workload' lines parse: a reader can paste any of them."""
    for what, cmd in RERUNS:
        for one in cmd.split(" && "):
            words = shlex.split(one)
            if words[:3] == ["python", "-m", "lab.bench"]:
                args = parse_args(words[3:])
                assert args.backends, what
                assert args.repeat >= 1, what
            elif words[:3] == ["python", "-m", "lab.bench.merge"]:
                assert words[3].endswith("bench.json"), what
            elif words[:3] != ["python", "-m", "lab.bench.child"]:
                pytest.fail(f"{what}: not a lab.bench command: {one}")


def test_cpu_budget_names_what_each_throughput_target_takes() -> None:
    """Each target becomes a CPU budget per step beside the measured cost: over it by a factor, fitting
    it (the time goes to waiting), or out of reach because the database alone is over it."""
    med = {
        "postgresql": {
            "lockstep/split": {
                "throughput.steps_per_s": 400.0,
                "throughput.engine_ms_per_step": 2.0,
                "throughput.db_ms_per_step": 1.5,
            },
            "dbos/split": {"throughput.steps_per_s": 200.0},
            "absurd/split": {"throughput.steps_per_s": 100.0},
            "hardware": {"one_connection_steps_per_s": 1000.0},
        }
    }
    text = "\n".join(cpu_budget_section(med, 2))
    # 10x DBOS = 2,000 steps/s: 1 ms per step on 2 cores, below PostgreSQL's own 1.5 ms
    assert "| postgresql, production shape | 10x DBOS | 2,000 | 1.000 | 2.000 + 1.500 | 571 | 400 |" in text
    assert "out of reach on this machine: the database's own 1.50 ms is over the budget" in text
    # 3x Absurd = 300 steps/s: 6.7 ms per step, more than the 3.5 it costs
    assert "| 3x Absurd | 300 | 6.667 |" in text
    assert "the cost fits the budget: the time goes to waiting (locks and round trips)" in text
    # 50% of the limit = 500 steps/s: 4 ms per step, 3.5 fits too; a costlier step would not
    med["postgresql"]["lockstep/split"]["throughput.engine_ms_per_step"] = 6.5
    assert "a step must cost at least 2.0x less CPU" in "\n".join(cpu_budget_section(med, 2))
    assert cpu_budget_section({"sqlite": {"lockstep": {}}}, 2) == []
