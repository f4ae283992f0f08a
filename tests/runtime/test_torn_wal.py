"""SQLite's write-ahead log under real damage: a process SIGKILLed in the middle of a checkpoint of a big
WAL (the next opener finishes it: every run is there, the file is sound, `lockstep verify` is clean),
and a WAL file cut short (SQLite keeps the commits before the cut, whole, and drops the rest: the file is
sound and every run consistent, so only the audit chain head kept elsewhere shows what was lost)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from prockit import wait_until

from lab import clifork
from lockstep import Engine
from lockstep.errors import NotFound

pytestmark = pytest.mark.slow

FLOW = {"name": "torn", "steps": [{"id": "nap", "wait": "1h"}]}
RUNS = 600
# A writer that pins a read snapshot first (so no checkpoint can copy what it writes next), starts RUNS
# runs of padded input, prints their ids and waits to be SIGKILLed: its WAL is left holding them all.
WRITER = f"""
import json, sqlite3, sys, time
from lockstep import Engine
from lockstep.errors import NotFound
pin = sqlite3.connect(sys.argv[1], isolation_level=None)
pin.execute("BEGIN"); pin.execute("SELECT count(*) FROM runs").fetchone()
engine = Engine.open("sqlite:///" + sys.argv[1])
ids = [engine.start("torn", input={{"n": n, "pad": "p" * 40000}}) for n in range({RUNS})]
print(json.dumps(ids), flush=True)
time.sleep(600)
"""
CHECKPOINT = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
print("checkpointing", flush=True)
conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
print("checkpointed", flush=True)
"""


def crashed_with_a_big_wal(tmp_path: Path) -> tuple[Path, list[str]]:
    """A database whose RUNS starts are in its WAL only, left by a SIGKILLed writer."""
    path = tmp_path / "lockstep.db"
    with closing(Engine.open(f"sqlite:///{path}")) as engine:
        engine.publish(FLOW)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None
        ids: list[str] = json.loads(writer.stdout.readline())
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
        if writer.stdout is not None:
            writer.stdout.close()
    assert (tmp_path / "lockstep.db-wal").stat().st_size > 20 << 20, "the WAL should hold the runs"
    return path, ids


def sound(path: Path) -> dict[str, object]:
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    done = clifork.run(
        [sys.executable, "-m", "lockstep", "--db", f"sqlite:///{path}", "verify", "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, object] = json.loads(done.stdout)
    return report


def test_sigkill_in_the_middle_of_a_checkpoint_loses_nothing(tmp_path: Path) -> None:
    """Killed while copying a 24+ MiB WAL into the file: the next opener redoes it; all runs, sound."""
    path, ids = crashed_with_a_big_wal(tmp_path)
    before = path.stat().st_size
    ckpt = subprocess.Popen([sys.executable, "-c", CHECKPOINT, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert ckpt.stdout is not None
        assert ckpt.stdout.readline().strip() == "checkpointing"
        # The moment the main file starts growing, the checkpoint is copying pages: kill it there.
        wait_until(lambda: path.stat().st_size > before, 30, "the checkpoint to start", interval=0.001)
        ckpt.send_signal(signal.SIGKILL)
    finally:
        ckpt.kill()
        ckpt.wait(30)
        if ckpt.stdout is not None:
            ckpt.stdout.close()
    assert ckpt.returncode == -signal.SIGKILL
    wal = tmp_path / "lockstep.db-wal"
    assert wal.exists(), "the checkpoint finished before the kill"
    assert wal.stat().st_size > 0, "the checkpoint finished before the kill (WAL truncated)"
    with closing(Engine.open(f"sqlite:///{path}")) as engine:
        assert [engine.show(run)["status"] for run in ids] == ["waiting"] * RUNS
    report = sound(path)
    assert report["runs"] == RUNS, report


def test_a_wal_cut_short_keeps_whole_commits_before_the_cut_and_verify_stays_clean(tmp_path: Path) -> None:
    """Half the WAL gone: an earlier prefix of the starts survives, each run whole; the file is sound."""
    path, ids = crashed_with_a_big_wal(tmp_path)
    wal = tmp_path / "lockstep.db-wal"
    os.truncate(wal, wal.stat().st_size // 2 + 1234)  # mid-frame, as a torn copy or a full disk leaves it
    with closing(Engine.open(f"sqlite:///{path}")) as engine:
        present = [run for run in ids if _exists(engine, run)]
    assert 0 < len(present) < RUNS, len(present)
    assert present == ids[: len(present)], "the survivors are not a prefix of the commits"
    report = sound(path)
    assert report["runs"] == len(present), report


def _exists(engine: Engine, run_id: str) -> bool:
    try:
        engine.show(run_id)
    except NotFound:  # its commit was in the part of the WAL that was cut
        return False
    return True
