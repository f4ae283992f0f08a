"""Damaged databases: a changed byte in an event row or a snapshot is named by `lockstep verify` (which
run, which seq, what is wrong) and refuses only that run's commands; a schema that lost a table or a
column, or is newer than the code, makes `serve`, `worker` and `scheduler` exit non-zero with a clear
message instead of running on it."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import httpx
import psycopg
import pytest
from prockit import Cluster, Ledger, wait_until

from lab import clifork
from lab.fleet import free_port
from lockstep import Engine

WAITING = {"name": "waiting", "steps": [{"id": "nap", "wait": "1h"}]}


def raw_update(path: Path, statement: str, params: tuple[object, ...]) -> None:
    """Change an event row past its append-only trigger (dropped and put back as it was): a byte
    changed under the engine, as a disk or a hand would, with the schema left intact."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        (trigger,) = conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'events_append_only_update'"
        ).fetchone()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DROP TRIGGER events_append_only_update")
        assert conn.execute(statement, params).rowcount == 1
        conn.execute(trigger)
        conn.execute("COMMIT")


def lockstep(db_url: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return clifork.run(
        [sys.executable, "-m", "lockstep", "--db", db_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
    )


def test_verify_names_the_run_and_seq_of_changed_bytes_and_only_that_run_refuses(tmp_path: Path) -> None:
    """A changed letter breaks the chain at its seq, a changed brace makes the row undecodable: verify
    names both; the damaged run refuses (exit 5, 409), the others and the server go on."""
    path = tmp_path / "lockstep.db"
    url = f"sqlite:///{path}"
    with closing(Engine.open(url)) as engine:
        engine.publish(WAITING)
        flipped, broken, sound, snap, latin = (engine.start("waiting", input={"m": "abc"}) for _ in range(5))
        svc = engine.service
        svc.principals.create_tenant("default")
        key = svc.principals.create_user("default", "ops", ["operator"], []).api_key
    # One bit of one letter in RunStarted's data (still valid JSON): only the hash chain can tell.
    raw_update(
        path,
        "UPDATE events SET data = replace(data, '\"abc\"', '\"abb\"') WHERE run_id = ? AND seq = 1",
        (flipped,),
    )
    # The first byte of an event's data: no longer JSON at all.
    raw_update(
        path, "UPDATE events SET data = 'z' || substr(data, 2) WHERE run_id = ? AND seq = 2", (broken,)
    )
    # The high bit of one letter: the text is no longer UTF-8 (SQLite's driver cannot even fetch it).
    raw_update(
        path,
        "UPDATE events SET data = CAST(replace(CAST(data AS BLOB), X'616263', X'61E263') AS TEXT) "
        "WHERE run_id = ? AND seq = 1",
        (latin,),
    )
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("UPDATE runs SET snapshot = 'z' || substr(snapshot, 2) WHERE run_id = ?", (snap,))

    done = lockstep(url, "verify", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = {line.split(":")[0]: line for line in done.stdout.splitlines() if line.startswith("MISMATCH")}
    assert "hash chain broken at seq 1 (RunStarted)" in lines[f"MISMATCH {flipped}"]
    assert f"run {broken}: its stored event seq 2 cannot be decoded" in lines[f"MISMATCH {broken}"]
    assert f"run {snap}: its stored snapshot cannot be decoded" in lines[f"MISMATCH {snap}"]
    assert (
        f"run {latin}: its stored event seq 1 cannot be decoded (its data is not UTF-8"
        in lines[f"MISMATCH {latin}"]
    )
    assert f"MISMATCH {sound}" not in lines
    assert "Traceback" not in done.stdout + done.stderr

    refused = lockstep(url, "cancel", snap, "--reason", "test", cwd=tmp_path)
    assert refused.returncode == 5, refused.stdout + refused.stderr
    assert f"run {snap}: its stored snapshot cannot be decoded" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert lockstep(url, "cancel", sound, "--reason", "test", cwd=tmp_path).returncode == 0

    (tmp_path / "procs").mkdir()

    cluster = Cluster(tmp_path / "procs", url, Ledger(tmp_path / "ledger.db"))
    try:
        api = cluster.serve("api", free_port())
        auth = {"Authorization": f"Bearer {key}"}
        r = httpx.get(f"{api.url}/v1/runs/{broken}/events", headers=auth, timeout=30)
        assert r.status_code == 409, r.text
        assert r.json()["code"] == "corrupt_run"
        assert "event seq 2 cannot be decoded" in r.json()["detail"]
        r = httpx.post(f"{api.url}/v1/runs/{snap}/cancel", json={"reason": "t"}, headers=auth, timeout=30)
        assert r.status_code == 409, r.text
        assert httpx.get(f"{api.url}/v1/runs/{flipped}", headers=auth, timeout=30).status_code == 200
        assert api.alive()
    finally:
        cluster.shutdown()


def damage_sqlite(path: Path, how: str) -> None:
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        if how == "missing table":
            conn.execute("DROP TABLE holds")
        elif how == "missing column":
            conn.execute("ALTER TABLE timers DROP COLUMN tenant")
        else:
            conn.execute("INSERT INTO schema_migrations VALUES (9999, 'future', 'x', '2030-01-01T00:00:00Z')")


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("missing table", "table holds is missing"),
        ("missing column", "table timers lacks column(s) tenant"),
        ("newer schema", "has schema version 9999, newer than this lockstep"),
    ],
)
def test_serve_worker_and_scheduler_refuse_a_broken_sqlite_schema(
    tmp_path: Path, how: str, said: str
) -> None:
    """Each process exits 1 at once with the damage named, instead of failing later mid-command."""
    path = tmp_path / "lockstep.db"
    url = f"sqlite:///{path}"
    with closing(Engine.open(url)) as engine:
        engine.publish(WAITING)
        engine.start("waiting")
    damage_sqlite(path, how)
    for args in (
        ["serve", "--port", str(free_port())],
        ["worker", "--activities", "lockstep.examples.activities"],
        ["scheduler"],
    ):
        done = lockstep(url, *args, cwd=tmp_path)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert said in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr


def test_serve_refuses_a_postgresql_database_that_lost_a_table(pg_url: str, tmp_path: Path) -> None:
    """PostgreSQL: a dropped table is named at start-up; serve and worker exit 1."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE holds")
    for args in (
        ["serve", "--port", str(free_port())],
        ["worker", "--activities", "lockstep.examples.activities"],
    ):
        done = lockstep(pg_url, *args, cwd=tmp_path)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert "table holds is missing" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("DROP INDEX timers_due", "index timers_due is missing"),
        (
            "ALTER TABLE events DISABLE TRIGGER events_append_only",
            "trigger events_append_only is missing or disabled",
        ),
        ("DROP TRIGGER events_append_only ON events", "trigger events_append_only is missing or disabled"),
    ],
)
def test_a_postgresql_schema_without_an_index_or_an_append_only_trigger_is_refused_and_named(
    pg_url: str, tmp_path: Path, damage: str, said: str
) -> None:
    """PostgreSQL: a dropped index, or the events' append-only trigger dropped or disabled (history
    anyone could rewrite), is named at start-up (serve exits 1) and by `verify` as a FILE line."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(damage.encode())
    done = lockstep(pg_url, "serve", "--port", str(free_port()), cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    done = lockstep(pg_url, "verify", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert f"FILE schema: {said}" in done.stdout, done.stdout


@pytest.mark.parametrize(
    ("how", "said"),
    [("missing table", "table holds is missing"), ("missing column", "table timers lacks column(s) tenant")],
)
def test_verify_opens_a_damaged_sqlite_schema_and_names_the_damage(
    tmp_path: Path, how: str, said: str
) -> None:
    """Where every other process refuses to start, `verify` opens the damaged file and reports what is
    gone as a FILE line (and in `--json`), exit 1, no traceback."""
    path = tmp_path / "lockstep.db"
    url = f"sqlite:///{path}"
    with closing(Engine.open(url)) as engine:
        engine.publish(WAITING)
        engine.start("waiting")
    damage_sqlite(path, how)
    done = lockstep(url, "verify", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert f"FILE schema: {said}" in done.stdout, done.stdout
    assert "Traceback" not in done.stderr
    report = json.loads(lockstep(url, "verify", "--json", cwd=tmp_path).stdout)
    assert not report["ok"]
    assert f"schema: {said}" in report["files"]
    assert lockstep(url, "runs", cwd=tmp_path).returncode == 1  # the others still refuse it


def test_verify_names_a_postgresql_table_that_is_gone(pg_url: str, tmp_path: Path) -> None:
    """PostgreSQL: `verify` opens a database that lost a table and names it; serve refuses it."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE holds")
    done = lockstep(pg_url, "verify", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "FILE schema: table holds is missing" in done.stdout, done.stdout
    assert "Traceback" not in done.stderr


def test_verify_json_reports_the_file_check(tmp_path: Path) -> None:
    """`verify --json` carries SQLite's integrity_check result: empty on a sound file."""
    url = f"sqlite:///{tmp_path / 'lockstep.db'}"
    with closing(Engine.open(url)) as engine:
        engine.publish(WAITING)
        engine.start("waiting")
    report = json.loads(lockstep(url, "verify", "--json", cwd=tmp_path).stdout)
    assert report["ok"]
    assert report["files"] == []


def test_a_damaged_run_does_not_hold_back_the_scheduler_for_the_others(tmp_path: Path) -> None:
    """Timers due in the same pass: the damaged run's is skipped (logged), every other run completes."""
    path = tmp_path / "lockstep.db"
    url = f"sqlite:///{path}"
    with closing(Engine.open(url)) as engine:
        engine.publish({"name": "nap", "steps": [{"id": "nap", "wait": "300ms"}]})
        runs = [engine.start("nap") for _ in range(6)]
    damaged = runs[2]
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("UPDATE runs SET snapshot = 'z' || substr(snapshot, 2) WHERE run_id = ?", (damaged,))
    (tmp_path / "procs").mkdir()

    cluster = Cluster(tmp_path / "procs", url, Ledger(tmp_path / "ledger.db"))
    try:
        sched = cluster.scheduler("s1")
        others = [r for r in runs if r != damaged]

        def others_done() -> bool:
            rows = cluster.sql(
                f"SELECT status FROM runs WHERE run_id IN ({','.join('?' * len(others))})", tuple(others)
            )
            return [r[0] for r in rows] == ["completed"] * len(others)

        wait_until(others_done, 20, "the sound runs to complete")
        assert cluster.sql("SELECT status FROM runs WHERE run_id = ?", (damaged,)) == [("waiting",)]
        wait_until(
            lambda: f"run {damaged}: its stored snapshot cannot be decoded" in sched.log(), 10, "the log"
        )
        assert sched.alive()
    finally:
        cluster.shutdown()
