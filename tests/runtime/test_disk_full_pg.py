"""PostgreSQL on a disk that fills up, on a real server: what PostgreSQL does and what lockstep does.

- The data files' disk full (the WAL still has room in its current segment): PostgreSQL answers ERROR
  "could not extend file" and stays up; lockstep answers 503 (`unavailable`) and goes on by itself
  the moment space is freed.
- The WAL's disk full: PostgreSQL PANICs, its crash recovery cannot write WAL either, and the server
  shuts down; lockstep answers `unavailable` until an operator frees space and starts PostgreSQL, then
  reconnects without a restart. Every acknowledged start is there after either; `verify` is clean.
The numbers are in docs/design.md ("Disks that fill up")."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prockit import Cluster, Ledger, wait_until

from lab.fleet import free_port
from lab.fleet.mounts import fill, mounting_allowed, small_disk
from lockstep import Engine
from lockstep.errors import Unavailable
from lockstep.testing.pgcluster import PgCluster, find_pg_bin

pytestmark = pytest.mark.slow

FLOW = {"name": "full", "steps": [{"id": "nap", "wait": "1h"}]}


@pytest.fixture
def disk() -> Iterator[Path]:
    if not mounting_allowed() or find_pg_bin() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("needs root (to mount a tmpfs) and the PostgreSQL server binaries")
        pytest.skip("needs root and the PostgreSQL server binaries")
    # Outside tmp_path: the postgres user must reach it, and pytest's directories are root's alone.
    where = Path(tempfile.mkdtemp(prefix="lockstep-disk-"))
    where.chmod(0o755)
    try:
        with small_disk(where, "48m"):
            yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def running(pg: PgCluster) -> bool:
    cmd = ["runuser", "-u", "postgres", "--", str(pg.bin / "pg_ctl"), "-D", str(pg.data), "status"]
    return subprocess.run(cmd, capture_output=True, text=True, check=False).returncode == 0


def start_until_unavailable(engine: Engine, acked: list[str], pad: int) -> Unavailable:
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline:
        try:
            acked.append(engine.start("full", input={"pad": os.urandom(pad).hex()}))
        except Unavailable as exc:
            return exc
    raise AssertionError("the disk never filled up")


def post_until_unavailable(url: str, auth: dict[str, str], acked: list[str]) -> httpx.Response:
    """A start that still fits in a half-empty page succeeds: only one needing a new page is refused."""
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline:
        body = {"definition": "full", "input": {"pad": os.urandom(2000).hex()}}
        r = httpx.post(url, json=body, headers=auth, timeout=30)
        if r.status_code != 201:
            assert r.status_code == 503, r.text
            return r
        acked.append(r.json()["run_id"])
    raise AssertionError("the API never answered 503 on the full disk")


def test_data_files_full_is_an_error_503_and_resumes_when_space_is_freed(tmp_path: Path, disk: Path) -> None:
    """Data directory on a full tmpfs: ERROR per statement, server up, 503 + Retry-After, resumes."""
    pg = PgCluster(base=str(disk / "pg"))
    pg.init().start()
    try:
        url = pg.create_database("lockstep")
        with Engine.open(url) as engine:
            engine.publish(FLOW)
            svc = engine.service
            svc.principals.create_tenant("default")
            key = svc.principals.create_user("default", "ops", ["operator"], []).api_key
            acked = [engine.start("full") for _ in range(10)]
            (tmp_path / "procs").mkdir()
            cluster = Cluster(tmp_path / "procs", url, Ledger(tmp_path / "ledger.db"))
            try:
                api = cluster.serve("api", free_port())
                filler = fill(disk)
                exc = start_until_unavailable(engine, acked, 2000)
                assert "could not extend file" in str(exc), exc
                auth = {"Authorization": f"Bearer {key}"}
                r = post_until_unavailable(f"{api.url}/v1/runs", auth, acked)
                assert r.headers["retry-after"] == "1"
                assert r.json()["code"] == "unavailable"
                assert running(pg), "PostgreSQL stopped on a full data disk"
                assert "ERROR:  could not extend file" in pg.log.read_text()
                filler.unlink()
                r = httpx.post(f"{api.url}/v1/runs", json={"definition": "full"}, headers=auth, timeout=30)
                assert r.status_code == 201, r.text
                acked.append(r.json()["run_id"])
                assert api.alive()
            finally:
                cluster.shutdown()
            assert all(engine.show(run)["status"] == "waiting" for run in acked)
            report = engine.service.verify()
            assert len(report) == len(acked)
            assert all(r.ok for r in report)
    finally:
        pg.destroy()


def test_wal_full_panics_postgresql_and_lockstep_reconnects_after_space_and_a_start(
    tmp_path: Path, disk: Path
) -> None:
    """pg_wal on a full tmpfs: PANIC, server down until started again; lockstep resumes, loses nothing."""
    pg = PgCluster()  # its own directory in /tmp, which the postgres user can reach
    pg.init()
    # pg_wal on the small disk (what initdb --waldir does), the data files on the big one.
    shutil.copytree(pg.data / "pg_wal", disk / "wal", symlinks=True)
    shutil.rmtree(pg.data / "pg_wal")
    (pg.data / "pg_wal").symlink_to(disk / "wal")
    shutil.chown(disk / "wal", "postgres", "postgres")
    for f in (disk / "wal").rglob("*"):
        shutil.chown(f, "postgres", "postgres")
    pg.start()
    try:
        url = pg.create_database("lockstep")
        with Engine.open(url) as engine:
            engine.publish(FLOW)
            acked = [engine.start("full") for _ in range(10)]
            filler = fill(disk)
            exc = start_until_unavailable(engine, acked, 30_000)
            assert "pg_wal" in str(exc) or "connection" in str(exc), exc
            wait_until(lambda: not running(pg), 30, "PostgreSQL to shut down")
            log = pg.log.read_text()
            assert 'PANIC:  could not write to file "pg_wal/xlogtemp' in log, log[-3000:]
            with pytest.raises(Unavailable):
                engine.start("full")
            filler.unlink()
            pg.start()

            def resumed() -> bool:
                try:
                    acked.append(engine.start("full"))
                except Unavailable:
                    return False
                return True

            wait_until(resumed, 60, "lockstep to reconnect to the restarted PostgreSQL", interval=0.2)
            assert all(engine.show(run)["status"] == "waiting" for run in acked)
            report = engine.service.verify()
            assert len(report) == len(acked)
            assert all(r.ok for r in report)
    finally:
        pg.destroy()
