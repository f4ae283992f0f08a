"""`lockstep db backup FILE` while a real worker process moves runs: each copy is one committed moment
of the database (every run in it replays to its snapshot, hash chains intact, integrity_check ok), a
later copy holds at least what an earlier one did, and the live runs finish untouched by the copies."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from prockit import Cluster, Ledger, wait_until

from lockstep import Engine

pytestmark = pytest.mark.slow
SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def three_steps() -> dict[str, Any]:
    step = {"activity": "test.step", "input": "${input}", "timeout": "30s"}
    return {"name": "busy", "steps": [{"id": f"s{i}", **step} for i in range(3)]}


def finished(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM runs WHERE status = 'completed'").fetchone()[0])


@SQLITE  # the backup API is SQLite's; PostgreSQL is backed up with its own tools (refused, tested below)
def test_backups_taken_while_a_worker_writes_are_consistent_copies(
    cluster: Cluster, engine: Engine, ledger: Ledger, tmp_path: Path, db_url: str
) -> None:
    """Three backups during 150 runs in flight each verify clean on their own; the runs all complete."""
    engine.publish(three_steps())
    runs = [engine.start("busy", input={"order": f"o{i}"}) for i in range(150)]
    cluster.worker("w1")
    copies: list[Path] = []
    live = Path(db_url[len("sqlite:///") :])
    for n in range(3):
        done = 20 * (n + 1)
        wait_until(lambda done=done: finished(live) >= done, 60, "runs to finish")
        dest = tmp_path / f"backup-{n}.db"
        report = json.loads(cluster.cli("db", "backup", str(dest)).stdout)
        assert report["backup"] == str(dest)
        assert report["pages"] > 0
        copies.append(dest)
    counts = [finished(c) for c in copies]
    assert counts == sorted(counts)
    assert counts[0] >= 20
    for copy in copies:
        with closing(sqlite3.connect(copy)) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        verified = cluster.cli("verify", "--json", "--db", f"sqlite:///{copy}")  # the copy, not the live one
        assert json.loads(verified.stdout)["ok"], verified.stdout
    for run in runs:
        assert engine.wait_for(run, timeout=60)["status"] == "completed"


@SQLITE
def test_a_backup_never_overwrites_and_refuses_what_it_cannot_copy(cluster: Cluster, tmp_path: Path) -> None:
    """An existing target, a missing database and a PostgreSQL URL are refused with what to do instead."""
    first = tmp_path / "copy.db"
    cluster.cli("db", "backup", str(first))
    before = first.read_bytes()
    again = cluster.cli("db", "backup", str(first), expect=1)
    assert "exists: a backup is written to a new file only" in again.stderr
    assert first.read_bytes() == before
    nowhere = f"sqlite:///{tmp_path / 'none.db'}"
    missing = cluster.cli("db", "backup", str(tmp_path / "x.db"), "--db", nowhere, expect=1)
    assert "no SQLite database at" in missing.stderr
    pg = cluster.cli("db", "backup", str(tmp_path / "y.db"), "--db", "postgresql://127.0.0.1:1/x", expect=1)
    assert "pg_basebackup" in pg.stderr
    assert not (tmp_path / "x.db").exists()
    assert not (tmp_path / "y.db").exists()
