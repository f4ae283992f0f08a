"""The README's headline numbers are the committed report's: its table is the one `lab.bench.headline`
writes from reports/bench.json, and that table says what each backend measured."""

from __future__ import annotations

import json
from pathlib import Path

from lab.bench.headline import headline, main

ROOT = Path(__file__).resolve().parents[2]


def test_headline_gives_ratios_to_each_peer_and_the_flat_memory() -> None:
    """lockstep's steps/s with its ratio to DBOS (WAL on SQLite) and Absurd, and the largest RSS growth."""
    fleet = {f"waiting.{n}.rss_mib.{p}": v for n, v in ((1000, 50.0), (1_000_000, 55.0)) for p in "ab"}
    fleet |= {"waiting.1000.rss_mib.serve": 40.0, "waiting.1000000.rss_mib.serve": 41.0}
    fleet |= {"timers.all_fired_s": 3.5, "timers.fired_twice": 0, "recovery.recovery_s": 2.25}
    report = {
        "sizes": {"fleet": {"timers": {"n": 100_000}, "waiting": {"points": [1000, 1_000_000]}}},
        "medians": {
            "postgresql": {
                "lockstep": {"throughput.steps_per_s": 900.0, "latency.p50_ms": 5.0},
                "dbos": {"throughput.steps_per_s": 300.0, "latency.p50_ms": 7.0},
                "absurd": {"throughput.steps_per_s": 450.0},
                "fleet": fleet,
            }
        },
    }
    table = headline(report)
    assert "| 900; DBOS 300 (**3.00x**); Absurd 450 (**2.00x**) |" in table
    assert "| 100,000 timers due in the same instant: all fired, s (fired twice) | 3.50 (0) |" in table
    assert "| x1.02 at most |" in table  # serve 40 -> 41; the other names are not lockstep processes
    assert "| 5.0 / 7.0 |" in table
    assert table.splitlines()[0] == "| | PostgreSQL |"


def test_cli_prints_the_table_and_refuses_a_file_that_is_not_a_report(tmp_path: Path) -> None:
    """`python -m lab.bench.headline FILE`: exit 2 with the reason when FILE is no report."""
    bad = tmp_path / "bench.json"
    bad.write_text("{}")
    assert main([str(bad)]) == 2
    assert main([str(tmp_path / "missing.json")]) == 2


def test_readme_holds_the_table_written_from_the_committed_report() -> None:
    """Rerun `python -m lab.bench.headline` and paste its table when reports/bench.json changes."""
    table = headline(json.loads((ROOT / "reports" / "bench.json").read_text()))
    assert table in (ROOT / "README.md").read_text(), "README's performance table is not the report's"
