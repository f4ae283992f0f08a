"""lockstep through a real PgBouncer in transaction mode (docs/production.md, "Connection pooling"):
runs complete with a worker and its scheduler connected only to PgBouncer, LISTEN through it hears
nothing (the polling does the work), and server-side prepared statements break a PgBouncer before 1.21
unless the URL turns them off (`?prepare_threshold=none`)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from lab.fleet import free_port, wait_until
from lockstep import Engine
from lockstep.store.postgres.adapter import PgStore
from lockstep.testing import PgCluster
from tests.client.serverkit import one_step
from tests.conftest import TEMPLATE
from tests.runtime.prockit import Cluster, Ledger

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NO_PREPARE = "?prepare_threshold=none"


def _pgbouncer() -> str:
    """The pgbouncer binary; a CI run without it fails (`.ci/run` installs it), a local one skips."""
    found = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if Path(p).exists()), None
    )
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("pgbouncer is not installed (CI installs the Debian package pgbouncer)")
        pytest.skip("pgbouncer is not installed: apt-get install pgbouncer (required when CI is set)")
    return found


def _version(binary: str) -> tuple[int, int]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"PgBouncer (\d+)\.(\d+)", out)
    assert found is not None, out
    return int(found[1]), int(found[2])


class Bouncer:
    """pgbouncer on a free loopback port in front of `cluster` (every database, user postgres, trust),
    in transaction mode with `pool_size` server connections per database; run as the postgres OS user
    when we are root (pgbouncer refuses to run as root)."""

    def __init__(self, cluster: PgCluster, pool_size: int, extra: str = "") -> None:
        self.binary = _pgbouncer()
        self.version = _version(self.binary)
        self.dir = Path(tempfile.mkdtemp(prefix="lockstep-pgbouncer-"))
        self.port = free_port()
        self.log = self.dir / "pgbouncer.log"
        (self.dir / "users.txt").write_text('"postgres" ""\n')
        (self.dir / "pgbouncer.ini").write_text(
            f"[databases]\n* = host=127.0.0.1 port={cluster.port} user=postgres\n"
            f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.dir / 'users.txt'}\npool_mode = transaction\n"
            f"default_pool_size = {pool_size}\nmax_client_conn = 500\nlogfile = {self.log}\n"
            f"pidfile = {self.dir / 'pgbouncer.pid'}\n{extra}"
        )
        argv = [self.binary, str(self.dir / "pgbouncer.ini")]
        if os.geteuid() == 0:
            for path in (self.dir, *self.dir.iterdir()):
                shutil.chown(path, "postgres", "postgres")
            argv = ["runuser", "-u", "postgres", "--", *argv]
        with (self.dir / "stderr.log").open("wb") as out:  # what it says before its log file is open
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer did not start: {self.logged()}") from None
                time.sleep(0.05)

    def url(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def logged(self) -> str:
        logs = (self.dir / "stderr.log", self.log)
        return "".join(p.read_text(errors="replace") for p in logs if p.exists())

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def database(pg_cluster: PgCluster) -> str:
    """A fresh database with the lockstep schema (created directly: migrations never go through it)."""
    name = f"b_{uuid.uuid4().hex[:16]}"
    pg_cluster.create_database(name, template=TEMPLATE)
    return name


def _bouncer(cluster: PgCluster, pool_size: int, extra: str = "") -> Iterator[Bouncer]:
    bouncer = Bouncer(cluster, pool_size, extra)
    try:
        yield bouncer
    finally:
        bouncer.close()


@pytest.fixture
def bouncer(pg_cluster: PgCluster) -> Iterator[Bouncer]:
    yield from _bouncer(pg_cluster, pool_size=4)


@pytest.fixture
def tight(pg_cluster: PgCluster) -> Iterator[Bouncer]:
    """One server connection for everyone: two clients' prepared statements meet on it."""
    yield from _bouncer(pg_cluster, pool_size=1)


def test_runs_complete_with_only_pgbouncer_between_worker_and_database(
    bouncer: Bouncer, database: str, tmp_path: Path
) -> None:
    """A `lockstep worker` (with its scheduler) and the starting engine connect only to PgBouncer in
    transaction mode: 20 runs of an activity step complete, each step ran once, no prepared-statement
    error in the worker's log."""
    url = bouncer.url(database) + NO_PREPARE
    cluster = Cluster(tmp_path, url, Ledger(tmp_path / "ledger.db"))
    engine = Engine.open(url)
    try:
        engine.publish(one_step("pooled"))
        cluster.worker("w1")
        runs = [engine.start("pooled", input={"order": i}) for i in range(20)]
        wait_until(
            lambda: all(engine.service.show("default", r).status == "completed" for r in runs), timeout=120
        )
        calls = cluster.ledger.value("SELECT count(*) FROM calls")
        assert calls == 20
        worker_log = cluster.procs[0].log()
        assert "prepared statement" not in worker_log
        assert "Traceback" not in worker_log
        assert "login attempt" in bouncer.logged()  # the clients did come through PgBouncer
    finally:
        engine.close()
        cluster.shutdown(show_logs=True)


def test_listen_through_pgbouncer_hears_nothing(
    bouncer: Bouncer, database: str, pg_cluster: PgCluster
) -> None:
    """LISTEN through transaction pooling never hears a NOTIFY (its session is given back after the
    statement), while the same listener on the direct URL does: the doc's "never hears anything"."""
    direct = pg_cluster.url(database)

    def heard(url: str) -> int:
        store = PgStore(url)
        stop, count = threading.Event(), [0]

        def hear() -> None:
            count[0] += 1

        listener = threading.Thread(target=store.listen, args=(["lockstep_tasks"], hear, stop))
        listener.start()
        try:
            time.sleep(1.0)  # the LISTEN is in place
            with psycopg.connect(direct, autocommit=True) as conn:
                for _ in range(10):
                    conn.execute("NOTIFY lockstep_tasks")
                    time.sleep(0.1)
            time.sleep(1.5)
            return count[0]
        finally:
            stop.set()
            listener.join(10)
            store.close()

    assert heard(direct) > 0
    assert heard(bouncer.url(database) + NO_PREPARE) == 0


def _reads(urls: list[str], rounds: int = 20) -> None:
    """Two engines take turns reading the same run `rounds` times each, through the same PgBouncer."""
    engines = [Engine.open(u) for u in urls]
    try:
        engines[0].publish({"name": "held", "steps": [{"id": "nap", "wait": "1h"}]})
        run_id = engines[0].start("held")
        for _ in range(rounds):
            for e in engines:
                assert e.service.show("default", run_id).status == "waiting"
    finally:
        for e in engines:
            e.close()


def test_prepared_statements_and_pgbouncer_transaction_mode(tight: Bouncer, database: str) -> None:
    """psycopg prepares a query after 5 executions: behind a PgBouncer before 1.21 two clients' statements
    meet on one server connection and fail ("prepared statement ... exists / does not exist");
    `?prepare_threshold=none` in the URL turns them off and the same reads work. (From 1.21 on,
    PgBouncer tracks them itself with max_prepared_statements.)"""
    url = tight.url(database)
    if tight.version < (1, 21):
        with pytest.raises(psycopg.Error, match="prepared statement"):
            _reads([url, url])
    _reads([url + NO_PREPARE, url + NO_PREPARE])


def test_a_bad_prepare_threshold_is_refused_with_what_to_write(pg_cluster: PgCluster, database: str) -> None:
    """`?prepare_threshold=sometimes` is refused before connecting, naming the option and its values."""
    from lockstep.store import SchemaError

    with pytest.raises(SchemaError, match=r"prepare_threshold=.sometimes.*none"):
        PgStore(pg_cluster.url(database) + "?prepare_threshold=sometimes")
    store = PgStore(pg_cluster.url(database) + "?connect_timeout=5&prepare_threshold=0")
    try:
        assert store.prepare_threshold == 0
        assert store.url.endswith("?connect_timeout=5")
    finally:
        store.close()
