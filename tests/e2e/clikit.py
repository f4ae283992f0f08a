"""Runs the `lockstep` command line as a user would: one subprocess per command, on one database (a
SQLite file or a PostgreSQL database, by URL)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from lab import clifork

TABLES = ("definitions", "runs", "events", "tasks", "timers")


class Cli:
    """Runs `python -m lockstep --db URL ...` (the console script's code) with a clean environment."""

    def __init__(self, url: str, cwd: Path) -> None:
        self.url = url
        self.backend = "sqlite" if url.startswith("sqlite:") else "postgresql"
        self.cwd = cwd
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}

    def run(self, *args: str, expect: int | None = 0, db: bool = True) -> subprocess.CompletedProcess[str]:
        """Run one command; assert its exit status equals `expect` (None: any)."""
        cmd = [sys.executable, "-m", "lockstep", *(["--db", self.url] if db else []), *args]
        done = clifork.run(
            cmd, env=self.env, cwd=self.cwd, capture_output=True, text=True, timeout=120, check=False
        )
        if expect is not None:
            assert done.returncode == expect, (
                f"lockstep {' '.join(args)} exited {done.returncode}, expected {expect}:\n"
                f"stdout: {done.stdout}\nstderr: {done.stderr}"
            )
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args).stdout)

    def write(self, name: str, text: str) -> str:
        path = self.cwd / name
        path.write_text(text)
        return str(path)

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of the engine's tables (raw SQL, not the engine), to prove a failed command wrote
        nothing."""
        return {t: sorted(self._query(f"SELECT * FROM {t}"), key=repr) for t in TABLES}

    def _query(self, statement: str) -> list[tuple[Any, ...]]:
        if self.backend == "sqlite":
            with closing(sqlite3.connect(self.url[len("sqlite:///") :])) as conn:
                return conn.execute(statement).fetchall()
        import psycopg  # only the PostgreSQL cases need it

        with psycopg.connect(self.url, autocommit=True) as pg:
            return pg.execute(statement.encode()).fetchall()

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> int:
        """Run one raw statement (in this backend's dialect and placeholders) against the database, to
        tamper with it; returns rowcount."""
        if self.backend == "sqlite":
            with closing(sqlite3.connect(self.url[len("sqlite:///") :])) as conn:
                cur = conn.execute(statement, params)
                conn.commit()
                return cur.rowcount
        import psycopg  # only the PostgreSQL cases need it

        with psycopg.connect(self.url, autocommit=True) as pg:
            return pg.execute(statement.encode(), params).rowcount


BACKENDS = ("sqlite", "postgresql")


def fresh_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest, *, schema: bool = True) -> str:
    """A new database: a SQLite file in tmp_path (created with the schema on first use), or a PostgreSQL
    database, with the schema (`pg_url`) or without it (schema=False: empty, like a new SQLite file)."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'lockstep.db'}"
    if schema and request.scope == "function":
        return str(request.getfixturevalue("pg_url"))
    cluster: Any = request.getfixturevalue("pg_cluster")
    return str(cluster.create_database(f"e_{uuid.uuid4().hex[:16]}"))
