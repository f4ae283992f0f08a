"""A throwaway PostgreSQL cluster in a temporary directory, for tests, benchmarks and fault injection.

PostgreSQL refuses to run as root, so when we are root the server runs as the `postgres` OS user
(`runuser`). It listens on 127.0.0.1 only, on a free port, with its socket in the data directory.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["PgCluster", "find_pg_bin"]

CANDIDATES = ["/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/15/bin"]


def find_pg_bin() -> Path | None:
    """The directory with initdb/pg_ctl, or None when PostgreSQL's server binaries are not installed."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    for c in CANDIDATES:
        if (Path(c) / "initdb").exists():
            return Path(c)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgCluster:
    def __init__(self, base: str | None = None, port: int | None = None) -> None:
        bindir = find_pg_bin()
        if bindir is None:
            raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
        self.bin = bindir
        self.dir = Path(base or tempfile.mkdtemp(prefix="lockstep-pg-"))
        self.data = self.dir / "data"
        self.port = port or _free_port()
        self.as_root = os.geteuid() == 0
        self.log = self.dir / "server.log"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=120)  # noqa: S603

    def init(self) -> PgCluster:
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.as_root:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-instructions",
        )
        with open(self.data / "postgresql.conf", "a") as fh:
            fh.write(
                f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.data}'\nmax_connections = 200\n"
                "shared_buffers = 128MB\nfsync = on\nsynchronous_commit = on\n"
            )
        return self

    def start(self, timeout: float = 100.0) -> PgCluster:
        # After an `immediate` stop the start is a crash recovery that replays the WAL since the last
        # checkpoint: on a loaded machine that takes longer than a clean start.
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", str(int(timeout)), "start")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"PostgreSQL did not start on port {self.port}; see {self.log}")

    def stop(self, mode: str = "fast") -> None:
        """mode: smart, fast or immediate (immediate = crash without shutdown checkpoint)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def sql(self, statement: str, dbname: str = "postgres") -> list[tuple[object, ...]]:
        """Run one statement in autocommit mode (CREATE DATABASE cannot run in a transaction)."""
        import psycopg  # noqa: PLC0415 - only tests and tools need it

        with psycopg.connect(self.url(dbname), autocommit=True) as conn:
            cur = conn.execute(statement.encode())
            return cur.fetchall() if cur.description else []

    def create_database(self, name: str, template: str | None = None) -> str:
        tmpl = f" TEMPLATE {template}" if template else ""
        self.sql(f'CREATE DATABASE "{name}"{tmpl}')
        return self.url(name)

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PgCluster:
        return self.init().start()

    def __exit__(self, *exc: object) -> None:
        self.destroy()


def pg_dump(url: str) -> bytes:
    """`pg_dump --data-only` of the database at `url`: every table's rows as the server stores them
    (the scans that prove nothing is stored in clear read it)."""
    found = find_pg_bin()
    candidates = [Path(os.path.realpath(found / "initdb")).parent / "pg_dump"] if found else []
    exe = next((str(c) for c in candidates if c.exists()), None) or shutil.which("pg_dump")
    if exe is None:
        raise RuntimeError("pg_dump is needed for the PostgreSQL scan (Debian: postgresql-client)")
    for _ in range(5):
        done = subprocess.run([exe, "--data-only", url], capture_output=True, timeout=120, check=False)  # noqa: S603
        # An engine open beside the dump maintains the event partitions: a month it drops between
        # pg_dump's listing and its read fails the dump ("does not exist"); the next listing lacks it.
        if done.returncode == 0 or b"does not exist" not in done.stderr:
            break
    if done.returncode != 0:
        raise RuntimeError(f"pg_dump exited {done.returncode}: {done.stderr.decode(errors='replace')}")
    return done.stdout
