"""Runs the `lockstep` command line as a user would: one subprocess per command, on one database file."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

TABLES = ("definitions", "runs", "events", "tasks", "timers")


class Cli:
    """Runs `python -m lockstep --db URL ...` (the console script's code) with a clean environment."""

    def __init__(self, db: Path, cwd: Path) -> None:
        self.db = db
        self.url = f"sqlite:///{db}"
        self.cwd = cwd
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}

    def run(self, *args: str, expect: int | None = 0, db: bool = True) -> subprocess.CompletedProcess[str]:
        """Run one command; assert its exit status equals `expect` (None: any)."""
        cmd = [sys.executable, "-m", "lockstep", *(["--db", self.url] if db else []), *args]
        done = subprocess.run(
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
        """Every row of the engine's tables (raw sqlite3), to prove a failed command wrote nothing."""
        with closing(sqlite3.connect(self.db)) as conn:
            return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in TABLES}

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> int:
        """Run one raw statement against the database file (to tamper with it); returns rowcount."""
        with closing(sqlite3.connect(self.db)) as conn:
            cur = conn.execute(statement, params)
            conn.commit()
            return cur.rowcount
